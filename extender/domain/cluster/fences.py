"""Reservation fences: a NoSchedule taint that keeps every other scheduler off a
starving gang's reserved nodes.

Pure. Placeholder pods (domain/starvation/placeholders.py) hold the GPUs that are free when
they are asked for, but a pod of another scheduler already *pending* when a GPU
frees reacts to the same delete event and often binds first. A taint cannot be
raced that way: while a reservation holds a node, the node carries
`gang-extender.io/reserved=<namespace>.<group>:NoSchedule`, and every scheduler
that honours taints (the default one, other profiles, the cluster autoscaler's
simulation) keeps untolerating pods off it. Members of gangs carry the toleration
(`MEMBER_TOLERATION`, added by the webhook), one for every fence: which gang may
use a fenced node's GPUs is still this scheduler's reservation, so the fence only
has to stop the pods that never ask this scheduler.

A fence goes up only when every pending member of the reserving gang tolerates it
(a gang whose namespace is not wired by the webhook would fence itself out); it
stays up while the gang is planned on the node and binding, so the hand-over
from the placeholders' deletion to the binding is not a window for another
scheduler either; and it comes down when the gang is bound, its plan is dropped
or its reservation ends otherwise. A fence no reservation wants (a previous
leader's) comes down too. `desired` is what should be fenced, `changes` the
taint writes that get there from what the watch shows.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from extender.domain.objects.membership import GroupKey
from extender.domain.objects.model import Taint, Toleration

FENCE_TAINT_KEY = "gang-extender.io/reserved"
FENCE_EFFECT = "NoSchedule"
# Exists: one toleration serves every gang's fence (the reservation decides whose GPUs).
MEMBER_TOLERATION: Mapping[str, str] = {
    "key": FENCE_TAINT_KEY,
    "operator": "Exists",
    "effect": FENCE_EFFECT,
}
# Taint values are label values: at most 63 characters.
MAX_VALUE = 63


@dataclass(frozen=True)
class FenceNode:
    """Put `group`'s fence taint on `node`, replacing another value of the key."""

    group: GroupKey
    node: str
    value: str


@dataclass(frozen=True)
class UnfenceNode:
    """Take the fence taint off `node`; `value` is what the watch showed there."""

    node: str
    value: str


FenceChange = FenceNode | UnfenceNode


def fence_value(group: GroupKey) -> str:
    """`<namespace>.<group>` (a namespace has no dots), hashed when over 63 characters,
    so `kubectl describe node` names the gang that holds it."""
    value = f"{group.namespace}.{group.name}"
    if len(value) <= MAX_VALUE:
        return value
    digest = hashlib.sha256(value.encode()).hexdigest()[:10]
    return f"{value[: MAX_VALUE - len(digest) - 1].rstrip('-._')}-{digest}"


def fence_taint(group: GroupKey) -> Taint:
    return Taint(FENCE_TAINT_KEY, fence_value(group), FENCE_EFFECT)


def tolerates_fence(tolerations: Iterable[Toleration], group: GroupKey) -> bool:
    """A pod with these tolerations can still be placed on a node `group` fenced."""
    taint = fence_taint(group)
    return any(t.tolerates(taint) for t in tolerations)


def observed_fence(taints: Iterable[Taint]) -> str | None:
    """The value of the node's fence taint, None when it has none."""
    for taint in taints:
        if taint.key == FENCE_TAINT_KEY and taint.effect == FENCE_EFFECT:
            return taint.value
    return None


def desired(
    fenced: Mapping[GroupKey, Collection[str]], nodes: Collection[str]
) -> dict[str, GroupKey]:
    """The group whose fence each node should carry: the nodes of every group that
    fences, those the watch knows. Groups' nodes are disjoint (a reservation never
    takes another's); should two groups name one node, the first in key order keeps it."""
    wanted: dict[str, GroupKey] = {}
    for group in sorted(fenced, key=lambda g: (g.namespace, g.name)):
        for node in sorted(fenced[group]):
            if node in nodes and node not in wanted:
                wanted[node] = group
    return wanted


def changes(wanted: Mapping[str, GroupKey], observed: Mapping[str, str]) -> list[FenceChange]:
    """The taint writes that turn `observed` (node -> fence value the watch shows) into
    `wanted`, sorted by node so their order does not depend on the maps'."""
    out: list[FenceChange] = []
    for node in sorted({*wanted, *observed}):
        group, have = wanted.get(node), observed.get(node)
        if group is None:
            out.append(UnfenceNode(node, have or ""))
        elif fence_value(group) != have:
            out.append(FenceNode(group, node, fence_value(group)))
    return out
