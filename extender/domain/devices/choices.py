"""A member's claim requests whose devices depend on the node, resolved on one node.

Pure. `firstAvailable`: the subrequests are tried in order and the first whose
devices are free on the node serves the request, as kube-scheduler's allocator
picks. `allocationMode: All`: every device of the class on the node
(`NodeInfo.device_totals`), none of them taken, at least one. The member's fixed
requests are counted first, then its choices in the pod's order, each seeing what
the ones before it took (kube-scheduler's allocator may also backtrack across a
claim's requests; a node where only that finds room is not used here).

The planner places a member with choices where `requests_on` finds room and
reserves what it returned (the plan's requests for the member), so the ledger,
the bind barrier's re-check and other gangs count those devices as they count
fixed requests.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from extender.domain.devices.objects import CLASS_RESOURCE_PREFIX
from extender.domain.objects.device_choice import DeviceAlternative, DeviceChoice
from extender.domain.objects.model import PodInfo, Resources


def requests_on(
    pod: PodInfo, room: Mapping[str, int], totals: Mapping[str, int]
) -> Resources | None:
    """What `pod` takes on a node with `room` free and `totals` devices per class
    resource (free or not): its requests with each choice resolved, or None if it
    does not fit there."""
    need = dict(pod.requests)
    for choice in pod.device_choices:
        picked = _first_fit(choice, need, room, totals)
        if picked is None:
            return None
        resource, amount = picked
        need[resource] = need.get(resource, 0) + amount
    if any(value > room.get(name, 0) for name, value in need.items() if value > 0):
        return None
    return need


def _first_fit(
    choice: DeviceChoice,
    need: Mapping[str, int],
    room: Mapping[str, int],
    totals: Mapping[str, int],
) -> tuple[str, int] | None:
    for alternative in choice.alternatives:
        amount = _amount(alternative, totals)
        if amount >= 1 and need.get(alternative.resource, 0) + amount <= room.get(
            alternative.resource, 0
        ):
            return alternative.resource, amount
    return None


def _amount(alternative: DeviceAlternative, totals: Mapping[str, int]) -> int:
    if alternative.count is not None:
        return alternative.count
    return totals.get(alternative.resource, 0)


def choice_resources(pod: PodInfo) -> set[str]:
    """Every class resource `pod`'s choices may ask."""
    return {a.resource for c in pod.device_choices for a in c.alternatives}


def _wants(alternative: DeviceAlternative) -> str:
    name = alternative.resource.removeprefix(CLASS_RESOURCE_PREFIX)
    if alternative.count is None:
        return f"all devices of class {name} on a node"
    return f"{alternative.count} device{'s' if alternative.count != 1 else ''} of class {name}"


def choice_shortfall(
    head: str, members: Sequence[PodInfo], misfit: PodInfo, free: Mapping[str, Mapping[str, int]]
) -> str | None:
    """A hold's words for a member with choices that fits no node it may use (None: it
    has none): what each request asks, how many members ask the same, and the most
    free devices of each class on one node (before the gang)."""
    if not misfit.device_choices:
        return None
    asks = "; ".join(
        f"{c.source} request {c.request}: "
        + (" or ".join(_wants(a) for a in c.alternatives))
        + (" (firstAvailable, the first that fits)" if len(c.alternatives) > 1 else "")
        for c in misfit.device_choices
    )
    alike = sum(1 for p in members if p.device_choices == misfit.device_choices)
    largest = ", ".join(
        f"{resource.removeprefix(CLASS_RESOURCE_PREFIX)} "
        f"{max((r.get(resource, 0) for r in free.values()), default=0)}"
        for resource in sorted(choice_resources(misfit))
    )
    return (
        f"{head}: {misfit.name} needs {asks}, as {alike} member{'s' if alike != 1 else ''} "
        f"of the gang do; no node left has that free (most free devices on one node: {largest})"
    )
