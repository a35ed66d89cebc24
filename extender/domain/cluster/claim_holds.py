"""Whether an allocated ResourceClaim's devices count on a node already as a pod's
request or a plan's reservation (so the inventory does not subtract them twice).

Pure: reads the snapshot's pods and the ledger's plans (placements); the watch passes it to the
device inventory (domain/devices/inventory.py `Holds`) when it folds a node's
devices into what the planner sees.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from extender.domain.devices.objects import CLASS_RESOURCE_PREFIX, Claim
from extender.domain.objects.membership import GroupKey
from extender.domain.objects.model import TERMINAL_PHASES, PodInfo


class Placed(Protocol):
    """A plan, as far as this reads it."""

    @property
    def placements(self) -> Mapping[str, str]: ...

    @property
    def requests(self) -> Mapping[str, Mapping[str, int]]: ...


def claim_held(
    pods: Mapping[str, PodInfo], plans: Mapping[GroupKey, Placed], claim: Claim, node: str
) -> bool:
    """The claim's devices are its owner pod's requests (kube-scheduler's claim for
    the pod's extended resources, or one from a template the member's requests
    count), counted on `node` already: as used (bound there) or as reserved (a
    gang member its plan places there, whose claim kube-scheduler allocated before
    calling bind, while the bind barrier waits). A claim no pod owns: see
    `_shared_held`."""
    if claim.owner_pod is None:
        return _shared_held(pods, plans, claim, node)
    pod = pods.get(claim.owner_pod)
    if pod is None or pod.phase in TERMINAL_PHASES:
        return False
    # A claim whose devices depend on the node (firstAvailable, allocationMode All):
    # its devices are in the member's plan's requests while it is planned, never in
    # a bound pod's requests (there they are taken).
    chosen = not pod.node_name and any(c.claim == claim.pod_claim_name for c in pod.device_choices)
    if not claim.extended and claim.pod_claim_name not in pod.device_claims and not chosen:
        return False
    if pod.node_name:
        return pod.node_name == node and pod.holds_capacity
    plan = plans.get(pod.group) if pod.group is not None else None
    if plan is None or plan.placements.get(pod.uid) != node:
        return False
    # The plan reserves what the member needed when it was made: a claim allocated
    # later with more devices than that (another firstAvailable subrequest, or one
    # left over by a failed bind when the plan was made) is taken, not a reservation.
    return claim.extended or _devices_reserved(plan, pod.uid) >= len(claim.allocated)


def _devices_reserved(plan: Placed, uid: str) -> int:
    return sum(
        value
        for name, value in plan.requests.get(uid, {}).items()
        if name.startswith(CLASS_RESOURCE_PREFIX)
    )


def _shared_held(
    pods: Mapping[str, PodInfo], plans: Mapping[GroupKey, Placed], claim: Claim, node: str
) -> bool:
    """A claim named directly by gang members, allocated by kube-scheduler before it
    bound the first of them: while the member of the plan that carries the claim's
    devices (domain/planning/sharers.py: the first by name of those naming it) waits
    unbound on `node`, the plan reserves those devices already."""
    for uid in claim.reserved_for:
        pod = pods.get(uid)
        plan = plans.get(pod.group) if pod is not None and pod.group is not None else None
        if plan is None:
            continue
        sharers = [
            p
            for u in plan.placements
            if (p := pods.get(u)) is not None and claim.key in p.named_claims
        ]
        if not sharers:
            return False
        carrier = min(sharers, key=lambda p: (p.name, p.uid))
        return not carrier.node_name and plan.placements.get(carrier.uid) == node
    return False
