"""Fluent builders for test objects, in the style of scheduler-plugins' MakePodGroup().

make_pod("w0").group("job").gpus(1).obj()   -> API JSON dict
make_node("n1").gpus(8).obj()
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from extender.controller.cluster_state import ClusterState
from extender.domain.cluster.ledger import Ledger, Plan
from extender.domain.objects.membership import (
    CREATED_FROM_ANNOTATION,
    GROUP_LABEL,
    MIN_AVAILABLE_ANNOTATION,
    SCHEDULER_NAME,
    TASK_LABEL,
    GroupKey,
)
from extender.domain.objects.model import NodeInfo, PodInfo
from extender.domain.objects.quantity import GPU
from extender.domain.planning.planner import Placement, Shortfall
from extender.domain.state.decisions import PlaceholderCreate
from extender.kube.cache import CacheSink
from extender.kube.ownership import OwnershipSeal
from extender.kube.reservation_writes import placeholder_pod
from extender.metrics import Metrics
from tests.core_builder import make_core


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

    def gpus(self, n: int, resource: str = "nvidia.com/gpu") -> PodBuilder:
        self._container()["resources"]["limits"][resource] = str(n)
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

    def tolerate(self, toleration: dict[str, str]) -> PodBuilder:
        self._pod["spec"].setdefault("tolerations", []).append(dict(toleration))
        return self

    def gate(self, name: str) -> PodBuilder:
        """A scheduling gate (spec.schedulingGates), as the webhook or Kueue adds one."""
        self._pod["spec"].setdefault("schedulingGates", []).append({"name": name})
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

    def gpus(self, n: int, resource: str = "nvidia.com/gpu") -> NodeBuilder:
        """`n` of `resource`; a node given another accelerator has no nvidia.com/gpu."""
        allocatable = self._node["status"]["allocatable"]
        if resource != "nvidia.com/gpu":
            allocatable.pop("nvidia.com/gpu", None)
        allocatable[resource] = str(n)
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


# ---- the planner's inputs: node pools by shape, a gang's members (plan_gang's tests) ----

ZONE = "topology.kubernetes.io/zone"
RACK = "example.com/rack"
_LABEL_KEYS = {"zone": ZONE, "rack": RACK}


def gpu_node(name: str, gpus: int, **labels: str) -> NodeInfo:
    """A node of `gpus` GPUs (0: one that has no GPU at all) with `labels`; zone= and
    rack= stand for ZONE and RACK, other keys are label keys as they are."""
    builder = make_node(name).gpus(gpus) if gpus else make_node(name).cpu_only()
    for key, value in labels.items():
        builder = builder.label(_LABEL_KEYS.get(key, key), value)
    return NodeInfo.from_api(builder.obj())


def domain_nodes(kind: str, shapes: dict[str, Sequence[int]], **labels: str) -> list[NodeInfo]:
    """One node a GPU count, named after its domain: {"a": (2, 2), "b": (4,)} of kind
    "rack" is a1 and a2 of 2 GPUs in rack a, b1 of 4 GPUs in rack b; `labels` on all."""
    return [
        gpu_node(f"{domain}{i}", gpus, **{kind: domain, **labels})
        for domain, counts in shapes.items()
        for i, gpus in enumerate(counts, start=1)
    ]


def racks(*, zone: str = "", **shapes: Sequence[int]) -> list[NodeInfo]:
    """racks(a=(2, 2), b=(4,)): nodes a1, a2 and b1 (domain_nodes), in `zone` when given."""
    return domain_nodes("rack", shapes, **({"zone": zone} if zone else {}))


def zones(**shapes: Sequence[int]) -> list[NodeInfo]:
    """zones(a=(2,), b=(4, 4)): nodes a1, b1 and b2 (domain_nodes), without a rack."""
    return domain_nodes("zone", shapes)


def cluster(*nodes: NodeInfo) -> tuple[dict[str, NodeInfo], dict[str, dict[str, int]]]:
    """plan_gang's nodes by name and their free resources (all they have)."""
    return {n.name: n for n in nodes}, {n.name: dict(n.allocatable) for n in nodes}


def gang(count: int, gpus: int, *, cpu_only: int = 0, **annotations: str) -> list[PodInfo]:
    """Members m0.. of group g: `count` of `gpus` GPUs, then `cpu_only` asking one CPU."""
    pods = []
    for i in range(count + cpu_only):
        builder = make_pod(f"m{i}").group("g")
        builder = builder.gpus(gpus) if i < count else builder.cpu("1")
        for key, value in annotations.items():
            builder = builder.annotation(key, value)
        pods.append(PodInfo.from_api(builder.obj()))
    return pods


def nodes_used(outcome: Placement | Shortfall) -> set[str]:
    """The nodes of a placement (the test fails on a shortfall)."""
    assert isinstance(outcome, Placement), outcome
    return set(outcome.nodes.values())


def placeholder_pod_info(effect: PlaceholderCreate, uid: str | None = None) -> PodInfo:
    """The placeholder pod the controller creates for `effect`, as the watch delivers it
    (uid `uid`, else ph-<name>)."""
    body = placeholder_pod(
        namespace=effect.group.namespace,
        name=effect.name,
        group=effect.group.name,
        node=effect.node,
        gpus=effect.gpus,
        resource=effect.resource,
        owner=None,
        seal=OwnershipSeal().placeholder(
            namespace=effect.group.namespace,
            name=effect.name,
            group=effect.group.name,
            node=effect.node,
        ),
    )
    body["metadata"]["uid"] = uid or f"ph-{effect.name}"
    return PodInfo.from_api(body)


# ---- a group's members named by a field of their spec (the Workload API's forms) ----


def spec_member(
    name: str,
    namespace: str = "ml",
    *,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A pod of gang-extender's scheduler whose `spec` names its group (schedulingGroup,
    workloadRef), uid = name, asking for one CPU."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": name}
    if labels is not None:
        meta["labels"] = labels
    if annotations is not None:
        meta["annotations"] = annotations
    return {
        "metadata": meta,
        "spec": {
            "schedulerName": SCHEDULER_NAME,
            **spec,
            "containers": [{"name": "main", "resources": {"requests": {"cpu": "1"}}}],
        },
    }


# ---- the watch cache's other side ----


def make_cluster_state() -> ClusterState:
    """The service's ClusterState over a fresh core, effects dropped."""
    core = make_core()
    return ClusterState(core, flush_effects=lambda: None, metrics=Metrics())


class ImmediateLoop:
    """Stands in for the event loop a Watcher hands its traffic to: runs it at once."""

    def call_soon_threadsafe(self, fn: Any, *args: Any) -> None:
        fn(*args)


class PageNamesSink(CacheSink):
    """A cache sink that records the names in each list page (and ignores events)."""

    def __init__(self) -> None:
        self.pages: list[list[str]] = []

    def on_page(self, kind: str, items: list[dict[str, Any]], first: bool, last: bool) -> None:
        self.pages.append([i["metadata"]["name"] for i in items])

    def on_event(self, kind: str, event_type: str, obj: dict[str, Any]) -> None:
        pass


def reserve_gpus(ledger: Ledger, node: str, gpus: int, name: str = "g") -> None:
    """A one-member plan of gang default/<name> that reserves `gpus` on `node`."""
    ledger.reserve(
        Plan(
            group=GroupKey("default", name),
            plan_id=ledger.new_plan_id(),
            placements={f"{name}-0": node},
            requests={f"{name}-0": {GPU: gpus}},
            names={f"{name}-0": f"default/{name}-0"},
            created_at=0.0,
            deadline=60.0,
        )
    )


# ---- `gang-extender status`: the table's cells from API objects (status_report) ----


def status_rows(
    ours: list[dict[str, Any]],
    foreign: list[dict[str, Any]],
    pods: list[dict[str, Any]],
    events: list[dict[str, Any]],
    **more: Any,
) -> list[tuple[str, ...]]:
    """The status table's cells, header first, for these objects (no Lease to read)."""
    from datetime import UTC, datetime

    from extender.status_report import StatusObjects, group_rows
    from extender.status_view import STATUS_HEADER, cells

    objects = StatusObjects(
        now=datetime(2026, 1, 1, tzinfo=UTC),
        ours=ours,
        foreign=foreign,
        pods=pods,
        events=events,
        **more,
    )
    return [STATUS_HEADER, *(cells(r) for r in group_rows(objects))]
