"""Kubernetes' own Workload API (1.37: `scheduling.k8s.io/v1beta1`) on a LocalCluster.

Off by default in 1.37: kube-apiserver serves it with the `GenericWorkload` gate and
`--runtime-config=scheduling.k8s.io/v1beta1=true` (a beta API version), and
kube-controller-manager runs its PodGroup protection controller with the gate. The
same gate in kube-scheduler adds the `GangScheduling` plugin to the default profile
(pkg/scheduler/apis/config/v1/default_plugins.go), so a cluster gang-schedules
upstream only once the scheduler is (re)started with it. Shared by the e2e tests of
the Workload API and the bench's upstream gang scheduler.
"""

from __future__ import annotations

import re
from typing import Any

GATE = "GenericWorkload"
RUNTIME_CONFIG = "scheduling.k8s.io/v1beta1=true"
PODGROUP_API_VERSION = "scheduling.k8s.io/v1beta1"
UPSTREAM_API = ("apis", "scheduling.k8s.io", "v1beta1")
#: The version whose kube-apiserver serves v1beta1 (1.36 served v1alpha2).
MIN_MINOR = 37


def serves_v1beta1(version: str) -> bool:
    """Whether a release ("v1.37.2") can serve the v1beta1 Workload API."""
    found = re.match(r"v1\.(\d+)\.", version)
    return found is not None and int(found.group(1)) >= MIN_MINOR


def served_gates() -> dict[str, dict[str, bool]]:
    """LocalCluster's `feature_gates` serving the API (the scheduler left without it)."""
    return {"kube-apiserver": {GATE: True}, "kube-controller-manager": {GATE: True}}


def upstream_podgroup(
    name: str, min_count: int, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    """A v1beta1 PodGroup with a gang policy of `min_count`; pods join it through
    `spec.schedulingGroup.podGroupName`."""
    metadata: dict[str, Any] = {"name": name}
    if labels:
        metadata["labels"] = dict(labels)
    return {
        "apiVersion": PODGROUP_API_VERSION,
        "kind": "PodGroup",
        "metadata": metadata,
        "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}},
    }
