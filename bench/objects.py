"""Bodies of the objects the bench creates: nodes, pods, PodGroups, namespaces."""

from __future__ import annotations

from typing import Any

from extender.devcluster.control_plane_commands import (
    KWOK_NODE_ANNOTATION,
    KWOK_NODE_ANNOTATION_VALUE,
)
from extender.domain.objects.membership import GROUP_LABEL, MIN_AVAILABLE_ANNOTATION, SCHEDULER_NAME
from extender.domain.objects.quantity import GPU

#: Every object the bench makes carries this label (cleanup selects on it).
BENCH_LABEL = "bench.gang-extender.io/workload"
#: A schedulerName nobody serves: the pod stays Pending until the bench binds it.
UNSERVED_SCHEDULER = "bench-unserved"
COSCHEDULING_SCHEDULER = "coscheduling"
COSCHEDULING_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
GANG_PODGROUP_API = "scheduling.gang-extender.io/v1alpha1"
COSCHEDULING_PODGROUP_API = "scheduling.x-k8s.io/v1alpha1"
#: Kubernetes' own gang scheduling runs in the default profile (GenericWorkload gate).
UPSTREAM_SCHEDULER = "default-scheduler"
IMAGE = "registry.example/bench:1"
#: Tolerate everything: nodes without a kubelet get tainted unreachable, and
#: the bench's pods must not be evicted from them mid-run.
TOLERATE_ALL = [{"operator": "Exists"}]


#: What the node lifecycle controller would write onto a node nobody heartbeats,
#: 50 s after its creation: Ready=Unknown and the "unreachable" taints. Created
#: so from the start, thousands of cache-only nodes cause no later update storm
#: (which would land in the middle of a latency measurement).
_UNREACHABLE_TAINTS = [
    {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"},
]
_UNKNOWN_CONDITIONS = [
    {
        "type": kind,
        "status": "Unknown",
        "reason": "NodeStatusNeverUpdated",
        "message": "bench: a cache-only node without a kubelet",
    }
    for kind in ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure")
]


def node_body(
    name: str,
    workload: str,
    *,
    gpus: int | None = 8,
    kwok: bool,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A GPU node. `kwok=False`: a plain Node object nobody heartbeats (cache-size runs).
    `gpus=None`: no nvidia.com/gpu in allocatable (its GPUs are DRA devices)."""
    resources = {"cpu": "64", "memory": "512Gi", "pods": "110"}
    if gpus is not None:
        resources[GPU] = str(gpus)
    annotations = {"node.alpha.kubernetes.io/ttl": "0"}
    spec: dict[str, Any] = {}
    status: dict[str, Any] = {"capacity": dict(resources), "allocatable": dict(resources)}
    if kwok:
        annotations[KWOK_NODE_ANNOTATION] = KWOK_NODE_ANNOTATION_VALUE
    else:
        spec["taints"] = [dict(t) for t in _UNREACHABLE_TAINTS]
        status["conditions"] = [dict(c) for c in _UNKNOWN_CONDITIONS]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": annotations,
            "labels": {
                BENCH_LABEL: workload,
                "type": "kwok" if kwok else "bench",
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                **(labels or {}),
            },
        },
        "spec": spec,
        "status": status,
    }


def pod_body(
    name: str,
    workload: str,
    *,
    scheduler: str,
    gpus: int = 1,
    cpu: str = "100m",
    memory: str = "128Mi",
    node_name: str | None = None,
    node_selector: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    requests: dict[str, Any] = {"cpu": cpu, "memory": memory}
    limits: dict[str, Any] = {}
    if gpus:
        requests[GPU] = str(gpus)
        limits[GPU] = str(gpus)
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "terminationGracePeriodSeconds": 0,
        "tolerations": TOLERATE_ALL,
        "containers": [
            {"name": "main", "image": IMAGE, "resources": {"requests": requests, "limits": limits}}
        ],
    }
    if node_name:
        spec["nodeName"] = node_name
    if node_selector:
        spec["nodeSelector"] = node_selector
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {BENCH_LABEL: workload, **(labels or {})},
            "annotations": dict(annotations or {}),
        },
        "spec": spec,
    }


def gang_member(
    name: str,
    group: str,
    size: int,
    workload: str,
    *,
    gpus: int = 1,
    scheduler: str = SCHEDULER_NAME,
    annotations: dict[str, str] | None = None,
    **kw: Any,
) -> dict[str, Any]:
    """A gang-extender member: scheduler gang-extender, group label, size annotation."""
    return pod_body(
        name,
        workload,
        scheduler=scheduler,
        gpus=gpus,
        labels={GROUP_LABEL: group},
        annotations={MIN_AVAILABLE_ANNOTATION: str(size), **(annotations or {})},
        **kw,
    )


def podgroup_body(api_version: str, name: str, min_member: int, workload: str) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": "PodGroup",
        "metadata": {"name": name, "labels": {BENCH_LABEL: workload}},
        "spec": {"minMember": min_member},
    }


def podgroups_path(api_version: str, namespace: str) -> str:
    return f"/apis/{api_version}/namespaces/{namespace}/podgroups"


def coscheduling_member(name: str, group: str, workload: str, *, gpus: int = 1) -> dict[str, Any]:
    """A scheduler-plugins coscheduling member: its scheduler and its pod-group label."""
    return pod_body(
        name,
        workload,
        scheduler=COSCHEDULING_SCHEDULER,
        gpus=gpus,
        labels={COSCHEDULING_GROUP_LABEL: group},
    )


def upstream_member(name: str, group: str, workload: str, *, gpus: int = 1) -> dict[str, Any]:
    """A member of a Kubernetes v1beta1 PodGroup: the default scheduler, and the group
    named in `spec.schedulingGroup.podGroupName` (no label, no annotation)."""
    body = pod_body(name, workload, scheduler=UPSTREAM_SCHEDULER, gpus=gpus)
    body["spec"]["schedulingGroup"] = {"podGroupName": group}
    return body


DRA_DRIVER = "gpu.bench.example.com"
DRA_CLASS = "bench-gpu"


def dra_device_class() -> dict[str, Any]:
    """A DeviceClass serving nvidia.com/gpu from the bench driver's devices (as NVIDIA's
    DRA driver's class does), selecting them with a CEL expression."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": DRA_CLASS},
        "spec": {
            "selectors": [{"cel": {"expression": f'device.driver == "{DRA_DRIVER}"'}}],
            "extendedResourceName": GPU,
        },
    }


def dra_slice(node: str, devices: int) -> dict[str, Any]:
    """One ResourceSlice publishing `devices` GPUs of `node`."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-gpus"},
        "spec": {
            "driver": DRA_DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": f"gpu-{i}",
                    "attributes": {
                        "index": {"int": i},
                        "productName": {"string": "NVIDIA H100 80GB HBM3"},
                    },
                    "capacity": {"memory": {"value": "80Gi"}},
                }
                for i in range(devices)
            ],
        },
    }
