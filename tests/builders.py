"""Fluent builders for test objects, in the style of scheduler-plugins' MakePodGroup().

make_pod("w0").group("job").gpus(1).obj()   -> API JSON dict
make_node("n1").gpus(8).obj()
"""

from __future__ import annotations

import copy
from typing import Any

from extender.domain.membership import (
    CREATED_FROM_ANNOTATION,
    GROUP_LABEL,
    MIN_AVAILABLE_ANNOTATION,
    SCHEDULER_NAME,
    TASK_LABEL,
)


class PodBuilder:
    def __init__(self, name: str, namespace: str = "default") -> None:
        self._pod: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": f"uid-{namespace}-{name}",
                "labels": {},
                "annotations": {},
                "creationTimestamp": "2026-11-22T10:00:00Z",
            },
            "spec": {
                "schedulerName": SCHEDULER_NAME,
                "containers": [
                    {
                        "name": "main",
                        "image": "busybox",
                        "resources": {"requests": {}, "limits": {}},
                    }
                ],
            },
            "status": {"phase": "Pending"},
        }

    def _container(self) -> dict[str, Any]:
        return self._pod["spec"]["containers"][0]

    def group(self, name: str) -> PodBuilder:
        self._pod["metadata"]["labels"][GROUP_LABEL] = name
        return self

    def label(self, key: str, value: str) -> PodBuilder:
        self._pod["metadata"]["labels"][key] = value
        return self

    def annotation(self, key: str, value: str) -> PodBuilder:
        self._pod["metadata"]["annotations"][key] = value
        return self

    def min_available(self, n: int) -> PodBuilder:
        return self.annotation(MIN_AVAILABLE_ANNOTATION, str(n))

    def task(self, task: str) -> PodBuilder:
        self._pod["metadata"]["labels"][TASK_LABEL] = task
        return self

    def gpus(self, n: int) -> PodBuilder:
        self._container()["resources"]["limits"]["nvidia.com/gpu"] = str(n)
        return self

    def cpu(self, q: str) -> PodBuilder:
        self._container()["resources"]["requests"]["cpu"] = q
        return self

    def memory(self, q: str) -> PodBuilder:
        self._container()["resources"]["requests"]["memory"] = q
        return self

    def node(self, name: str) -> PodBuilder:
        self._pod["spec"]["nodeName"] = name
        self._pod["status"]["phase"] = "Running"
        return self

    def scheduler(self, name: str) -> PodBuilder:
        self._pod["spec"]["schedulerName"] = name
        return self

    def created(self, ts: str) -> PodBuilder:
        self._pod["metadata"]["creationTimestamp"] = ts
        return self

    def owned_by(self, kind: str, name: str, *, controller: bool = True) -> PodBuilder:
        """An ownerReference, as a Job or ReplicaSet sets on the pods it creates."""
        self._pod["metadata"].setdefault("ownerReferences", []).append(
            {
                "apiVersion": "batch/v1" if kind == "Job" else "apps/v1",
                "kind": kind,
                "name": name,
                "uid": f"uid-{kind.lower()}-{name}",
                "controller": controller,
            }
        )
        return self

    def priority(self, value: int) -> PodBuilder:
        """spec.priority, as the API server's admission sets it from a PriorityClass."""
        self._pod["spec"]["priority"] = value
        return self

    def phase(self, phase: str) -> PodBuilder:
        self._pod["status"]["phase"] = phase
        return self

    def unschedulable(self, message: str) -> PodBuilder:
        """kube-scheduler refused it: PodScheduled=False with this message."""
        self._pod["status"]["conditions"] = [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": message,
            }
        ]
        return self

    def obj(self) -> dict[str, Any]:
        return copy.deepcopy(self._pod)


class NodeBuilder:
    def __init__(self, name: str) -> None:
        self._node: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "spec": {},
            "status": {
                "allocatable": {
                    "cpu": "32",
                    "memory": "256Gi",
                    "pods": "110",
                    "nvidia.com/gpu": "8",
                }
            },
        }

    def gpus(self, n: int) -> NodeBuilder:
        self._node["status"]["allocatable"]["nvidia.com/gpu"] = str(n)
        return self

    def cpu_only(self) -> NodeBuilder:
        """A node that advertises no nvidia.com/gpu at all (not even 0)."""
        del self._node["status"]["allocatable"]["nvidia.com/gpu"]
        return self

    def cpu(self, q: str) -> NodeBuilder:
        self._node["status"]["allocatable"]["cpu"] = q
        return self

    def label(self, key: str, value: str) -> NodeBuilder:
        self._node["metadata"]["labels"][key] = value
        return self

    def taint(self, key: str, value: str, effect: str = "NoSchedule") -> NodeBuilder:
        self._node["spec"].setdefault("taints", []).append(
            {"key": key, "value": value, "effect": effect}
        )
        return self

    def obj(self) -> dict[str, Any]:
        return copy.deepcopy(self._node)


def make_pod(name: str, namespace: str = "default") -> PodBuilder:
    return PodBuilder(name, namespace)


def make_node(name: str) -> NodeBuilder:
    return NodeBuilder(name)


def make_podgroup(
    name: str, min_member: int, namespace: str = "default", *, created: bool = False, **spec: Any
) -> dict[str, Any]:
    """A PodGroup; `created=True`: one gang-extender made from min-available annotations."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if created:
        meta["uid"] = f"pg-uid-{name}"
        meta["annotations"] = {CREATED_FROM_ANNOTATION: "min-available annotation"}
    return {
        "apiVersion": "scheduling.gang-extender.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": meta,
        "spec": {"minMember": min_member, **spec},
    }
