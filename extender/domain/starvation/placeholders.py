"""Placeholder pods: a starvation reservation made visible to every scheduler.

Pure. A reservation (domain/starvation/reservations.py) is respected by this scheduler's pods
only; the default scheduler and the cluster autoscaler count what pods request on
a node. So while a reservation holds GPUs on a node, the controller keeps
placeholder pods there (as YuniKorn does) requesting those GPUs: bound directly
(`spec.nodeName`), labelled `gang-extender.io/placeholder: <group name>` in the
gang's namespace. Every scheduler then sees the GPUs taken; the service itself
counts them as the reserving gang's own room (`GangCore.placeholder_gpus`).

`desired` is what the reservations hold per (group, node); `diff` compares it with
the placeholder pods the watch delivered and returns the creates and deletes. A
node's placeholders only grow by a top-up pod for the GPUs that freed since (a
held GPU is never given back to swap one pod for a bigger one), never past what is
free there plus what the group's placeholders already hold (no over-commit); and
they never shrink while the reservation holds the node (`GangCore._sync_placeholders`:
a node over-committed by a pod another scheduler bound at the same moment would
otherwise give a placeholder's GPU straight to the next such pod).
Placeholders nobody wants (the reservation ended: the gang was planned, is no
longer held, gave up or was deleted; a previous leader's) are deleted; ones that
finished or failed (a kubelet that refused one) are deleted and replaced.

Why the placeholders go as soon as the gang is planned: kube-scheduler counts them
too, so it would never offer the gang's members the node they hold. The bind
barrier then waits until the watch saw them gone (`GangCore.arrive`), so no
kubelet or scheduler counts a placeholder and a member at once.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from extender.domain.objects.membership import GroupKey
from extender.domain.objects.model import PLACEHOLDER_LABEL
from extender.domain.state.decisions import PlaceholderCreate, PlaceholderDelete

__all__ = ["PLACEHOLDER_LABEL", "ObservedPlaceholder", "desired", "diff", "placeholder_name"]
# Pod names are DNS subdomains (253); keep them short and readable, hashed when long.
MAX_NAME = 63


@dataclass(frozen=True)
class ObservedPlaceholder:
    """A placeholder pod as the watch delivered it."""

    group: GroupKey
    name: str
    node: str | None
    gpus: int
    active: bool  # bound, not finished: holds its GPUs
    deleting: bool


def placeholder_name(group: GroupKey, node: str, index: int) -> str:
    """`<group>-hold-<node>-<index>`, deterministic so a repeated create is a 409, not a twin."""
    name = f"{group.name}-hold-{node}-{index}"
    if len(name) <= MAX_NAME:
        return name
    digest = hashlib.sha256(f"{group.name}/{node}".encode()).hexdigest()[:10]
    return f"{group.name[:30].rstrip('-.')}-hold-{digest}-{index}"


def desired(holds: Mapping[GroupKey, Mapping[str, int]]) -> dict[tuple[GroupKey, str], int]:
    """GPUs each group's placeholders should hold per node: what its reservation holds."""
    return {
        (group, node): gpus
        for group, held in holds.items()
        for node, gpus in held.items()
        if gpus > 0
    }


def diff(
    wanted: Mapping[tuple[GroupKey, str], int], observed: Sequence[ObservedPlaceholder]
) -> list[PlaceholderCreate | PlaceholderDelete]:
    """The creates and deletes that turn `observed` into `wanted`.

    `wanted` must already be capped by what is free (`desired` of `hold`, which
    counts a group's own placeholders as its room): a top-up asks only for the
    difference. Placeholders being deleted are left alone (they are going).
    """
    effects: list[PlaceholderCreate | PlaceholderDelete] = []
    by_slot: dict[tuple[GroupKey, str], list[ObservedPlaceholder]] = {}
    names: dict[tuple[GroupKey, str], set[str]] = {}
    for pod in observed:
        slot = (pod.group, pod.node or "")
        names.setdefault(slot, set()).add(pod.name)
        if pod.deleting:
            continue
        if not pod.active or pod.node is None:
            effects.append(PlaceholderDelete(pod.group, pod.name))
            continue
        by_slot.setdefault(slot, []).append(pod)
    for slot in sorted({*by_slot, *wanted}, key=lambda s: (s[0], s[1])):
        group, node = slot
        pods = sorted(by_slot.get(slot, []), key=lambda p: p.name)
        want = wanted.get(slot, 0)
        held = sum(p.gpus for p in pods)
        while pods and held > want:
            # Fewer GPUs held than before (rare: the reservation moved or shrank):
            # delete the smallest until within, then top up what is missing.
            smallest = min(pods, key=lambda p: (p.gpus, p.name))
            pods.remove(smallest)
            held -= smallest.gpus
            effects.append(PlaceholderDelete(group, smallest.name))
        if want > held:
            used = names.get(slot, set())
            index = next(i for i in range(1, len(used) + 2) if _free_name(group, node, i, used))
            effects.append(
                PlaceholderCreate(group, placeholder_name(group, node, index), node, want - held)
            )
    return effects


def _free_name(group: GroupKey, node: str, index: int, used: Collection[str]) -> bool:
    return placeholder_name(group, node, index) not in used
