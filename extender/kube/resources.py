"""What the watch cache lists and watches: each resource's path, the versions tried when
that one is not served, and whether it may be missing (an optional API).

Optional APIs (scheduler-plugins' and Volcano's PodGroup CRDs; Kubernetes' own
scheduling.k8s.io PodGroups and 1.35's Workloads, served only where their gates and
API versions are on) are found by listing them (extender/kube/cache.py).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "COSCHEDULING_PODGROUPS",
    "DEVICE_CLASSES",
    "NAMESPACES",
    "NODES",
    "PODGROUPS",
    "PODS",
    "RESOURCE_CLAIMS",
    "RESOURCE_CLAIM_TEMPLATES",
    "RESOURCE_SLICES",
    "UPSTREAM_PODGROUPS",
    "UPSTREAM_WORKLOADS",
    "VOLCANO_PODGROUPS",
    "Resource",
]


@dataclass(frozen=True)
class Resource:
    kind: str  # short name used in metrics and by the sink
    path: str
    field_selector: str | None = None
    optional: bool = False  # a missing API (404) is not an error: the CRD is not installed
    # Other versions of the same kind, tried in order when `path` is not served (404);
    # the objects' fields the sink reads must be the same in all of them.
    alternatives: tuple[str, ...] = ()

    @property
    def paths(self) -> tuple[str, ...]:
        return (self.path, *self.alternatives)


NODES = Resource("nodes", "/api/v1/nodes")
# Finished pods are kept: they hold no capacity but PodGroup status counts them.
PODS = Resource("pods", "/api/v1/pods")
PODGROUPS = Resource("podgroups", "/apis/scheduling.gang-extender.io/v1alpha1/podgroups")
COSCHEDULING_PODGROUPS = Resource(
    "coscheduling-podgroups", "/apis/scheduling.x-k8s.io/v1alpha1/podgroups", optional=True
)
# Volcano's PodGroup (docs/podgroup.md#migrating-from-volcano-or-scheduler-plugins).
# Optional like coscheduling's: where the CRD is not served the list answers 404,
# the watcher counts as synced and asks again every optional_api_recheck_seconds,
# so a CRD installed after start is read from then on without a restart.
VOLCANO_PODGROUPS = Resource(
    "volcano-podgroups", "/apis/scheduling.volcano.sh/v1beta1/podgroups", optional=True
)
# Kubernetes' Workload API runtime groups: v1beta1 from 1.37, v1alpha3 in 1.37 and
# v1alpha2 in 1.36 keep spec.schedulingPolicy.gang.minCount where we read it.
UPSTREAM_PODGROUPS = Resource(
    "upstream-podgroups",
    "/apis/scheduling.k8s.io/v1beta1/podgroups",
    optional=True,
    alternatives=(
        "/apis/scheduling.k8s.io/v1alpha3/podgroups",
        "/apis/scheduling.k8s.io/v1alpha2/podgroups",
    ),
)
# Kubernetes 1.35's shape of the same API: a scheduling.k8s.io/v1alpha1 Workload lists
# pod groups (spec.podGroups[].policy.gang.minCount) that pods name in spec.workloadRef.
# Served only with the GenericWorkload gate and that API version on; 1.36 replaced it.
UPSTREAM_WORKLOADS = Resource(
    "upstream-workloads", "/apis/scheduling.k8s.io/v1alpha1/workloads", optional=True
)
NAMESPACES = Resource("namespaces", "/api/v1/namespaces")

# Dynamic Resource Allocation (docs/dra.md): devices that nodes publish (ResourceSlices),
# the classes pods ask them by (DeviceClasses, with the extended resource each
# serves), and what is allocated (ResourceClaims). GA in 1.34; optional so that a
# replica whose RBAC lacks them (or an API server without them) still syncs.
DEVICE_CLASSES = Resource("deviceclasses", "/apis/resource.k8s.io/v1/deviceclasses", optional=True)
RESOURCE_SLICES = Resource(
    "resourceslices", "/apis/resource.k8s.io/v1/resourceslices", optional=True
)
RESOURCE_CLAIMS = Resource(
    "resourceclaims", "/apis/resource.k8s.io/v1/resourceclaims", optional=True
)
# What each claim made from a template asks (a gang member's devices, docs/dra.md).
RESOURCE_CLAIM_TEMPLATES = Resource(
    "resourceclaimtemplates", "/apis/resource.k8s.io/v1/resourceclaimtemplates", optional=True
)
