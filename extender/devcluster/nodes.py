"""Fake GPU nodes, played by kwok.

kwok manages the Node objects carrying the annotation ``kwok.x-k8s.io/node: fake``:
it marks them Ready, keeps their lease fresh and moves pods bound to them to
Running. The nodes advertise ``nvidia.com/gpu`` as an extended resource, which
the default scheduler's NodeResourcesFit plugin accounts like cpu or memory.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

from kubernetes import client as k8s

from extender.devcluster.cluster import ClusterError
from extender.devcluster.control_plane_commands import (
    KWOK_NODE_ANNOTATION,
    KWOK_NODE_ANNOTATION_VALUE,
)

GPU_RESOURCE = "nvidia.com/gpu"
#: Taints the control plane puts on a node until it is Ready (TaintNodesByCondition
#: admission adds not-ready at creation; the node lifecycle controller lifts it).
STARTUP_TAINT_KEYS = frozenset(
    {
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
        "node.kubernetes.io/network-unavailable",
    }
)


def gpu_node_body(
    name: str,
    *,
    gpus: int = 8,
    cpu: str = "32",
    memory: str = "256Gi",
    pods: int = 110,
    labels: Mapping[str, str] | None = None,
    resource: str = GPU_RESOURCE,
) -> dict[str, Any]:
    """The Node object for one fake GPU node (no taints of our own); `gpus` of
    `resource` (another accelerator: amd.com/gpu, nvidia.com/mig-1g.10gb, ...)."""
    resources = {"cpu": cpu, "memory": memory, "pods": str(pods), resource: str(gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {
                KWOK_NODE_ANNOTATION: KWOK_NODE_ANNOTATION_VALUE,
                "node.alpha.kubernetes.io/ttl": "0",
            },
            "labels": {
                "type": "kwok",
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "node-role.kubernetes.io/agent": "",
                **dict(labels or {}),
            },
        },
        "spec": {},
        "status": {
            "capacity": dict(resources),
            "allocatable": dict(resources),
        },
    }


def add_gpu_nodes(
    api_client: k8s.ApiClient,
    count: int,
    *,
    gpus: int = 8,
    cpu: str = "32",
    memory: str = "256Gi",
    pods: int = 110,
    labels: dict[str, str] | None = None,
    name_prefix: str = "gpu-node",
    start_index: int = 0,
    resource: str = GPU_RESOURCE,
) -> list[str]:
    """Create ``count`` kwok-managed GPU nodes named ``<name_prefix>-<i>``; return their names.

    They are not schedulable until kwok marks them Ready and the node lifecycle
    controller lifts the not-ready taint: use :func:`wait_for_nodes_ready`.
    """
    core = k8s.CoreV1Api(api_client)
    names = []
    for i in range(start_index, start_index + count):
        name = f"{name_prefix}-{i}"
        body: Any = gpu_node_body(
            name, gpus=gpus, cpu=cpu, memory=memory, pods=pods, labels=labels, resource=resource
        )
        core.create_node(body)
        names.append(name)
    return names


def _node_ready(node: k8s.V1Node) -> bool:
    conditions = (node.status.conditions if node.status else None) or []
    ready = any(c.type == "Ready" and c.status == "True" for c in conditions)
    taints = (node.spec.taints if node.spec else None) or []
    return ready and not any(t.key in STARTUP_TAINT_KEYS for t in taints)


def wait_for_nodes_ready(
    api_client: k8s.ApiClient, names: Iterable[str], timeout: float = 60
) -> None:
    """Wait until every named node is Ready=True (set by kwok) and has no start-up taint.

    Raises ClusterError naming the nodes that are not ready at the deadline.
    """
    core = k8s.CoreV1Api(api_client)
    waiting = set(names)
    deadline = time.monotonic() + timeout
    while True:
        for node in core.list_node(_request_timeout=30).items:
            name = node.metadata.name if node.metadata else None
            if name in waiting and _node_ready(node):
                waiting.discard(name)
        if not waiting:
            return
        if time.monotonic() > deadline:
            raise ClusterError(
                f"nodes not Ready (or still tainted not-ready) after {timeout}s: "
                + ", ".join(sorted(waiting))
            )
        time.sleep(0.2)
