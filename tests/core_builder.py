"""One way for the core's unit tests to build a `GangCore` with what the watch saw.

Nodes, pods and PodGroups go in through the core's own verbs (`apply_node`,
`observe_pod`, `apply_group_spec`), as the cache sink sends them, so a test starts
from a state the service could be in. The timeouts most tests share are the default.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from extender.domain.cluster.snapshot import ClusterSnapshot
from extender.domain.gang.gang import GangCore, Timeouts
from extender.domain.objects.model import GroupSpec, NodeInfo, PodInfo
from extender.domain.objects.policy import Policy

# When the builder's pods are observed (most tests' T0).
BUILT_AT = 1_000_000.0


def make_core(
    nodes: Iterable[dict[str, Any] | NodeInfo] = (),
    pods: Iterable[dict[str, Any] | PodInfo] = (),
    groups: Iterable[dict[str, Any] | GroupSpec] = (),
    *,
    policy: Policy | None = None,
    timeouts: Timeouts | None = None,
    preemption: bool = False,
    placeholders: bool = True,
    fences: bool = True,
    snapshot: ClusterSnapshot | None = None,
    now: float = BUILT_AT,
) -> GangCore:
    """A core over `nodes`, then `pods` (observed at `now`), then `groups` (PodGroup
    objects, or specs), with the default policy and timeouts unless given (schedule timeout 60 s, bind
    barrier 30 s, replan backoff 2 s)."""
    core = GangCore(
        policy if policy is not None else Policy(),
        timeouts if timeouts is not None else Timeouts(60, 30, 2),
        preemption_enabled=preemption,
        placeholders=placeholders,
        fences=fences,
        snapshot=snapshot,
    )
    for node in nodes:
        core.apply_node(node if isinstance(node, NodeInfo) else NodeInfo.from_api(node))
    for pod in pods:
        core.observe_pod(pod if isinstance(pod, PodInfo) else PodInfo.from_api(pod), now)
    for group in groups:
        spec = (
            group
            if isinstance(group, GroupSpec)
            else GroupSpec.from_podgroup(group, source="PodGroup")
        )
        core.apply_group_spec(spec)
    return core
