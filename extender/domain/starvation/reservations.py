"""Starvation reservations: the GPUs a long-waiting gang at the head of the queue holds.

Pure (time passed in as `now`). A held gang that has waited longer than its
`starvationSeconds` and has no held gang ahead of it wanting the same nodes
(domain/planning/queue.py, `GangCore.gang_ahead_of`) reserves the nodes it will use: every
GPU that is free there (no bound pod, no plan) is held for it, up to the GPUs it
needs, so nothing else of this scheduler (another gang's plan, a plain pod through
the filter) takes a GPU that frees there until the gang fits. `GangCore` keeps the
reservations and asks this module what to hold.

Nodes (`choose_nodes`): the fewest whose total GPU capacity holds the gang (where it
fits soonest as pods finish), preferring the ones with the most GPUs free now, then
by name so every replica chooses alike; listed most free first. A reservation is bounded: after
`max_seconds` it gives up (`expired`), and the next choice prefers other nodes
(`avoid`), so one busy node cannot hold the cluster forever.

Holding (`hold`): on each reserved node the free GPUs, in the reservation's node
order, until the gang's need is met; never more than is free (no over-commit) and
never more than the gang needs in all.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

from extender.domain.objects.membership import GroupKey
from extender.domain.objects.quantity import GPU

# Shown in messages: at most this many node names, then "...".
MAX_NAMED_NODES = 5


@dataclass(frozen=True)
class NodeGpus:
    """A node's GPUs for choosing: its allocatable and how many are free now."""

    capacity: int
    free: int


@dataclass(frozen=True)
class Reservation:
    """The nodes a starving gang holds free GPUs on, from `started` until `deadline`."""

    group: GroupKey
    nodes: tuple[str, ...]
    need: int  # GPUs the gang's pending members request in all
    started: float
    deadline: float
    # The gang's accelerator resource (domain/objects/accelerators.py): what it holds.
    resource: str = GPU

    def expired(self, now: float) -> bool:
        """Bounded: at its deadline it gives up (and is re-chosen)."""
        return now >= self.deadline


def starving(held_since: float, now: float, starvation_seconds: float) -> bool:
    """A gang held (waiting, without a plan) for more than `starvation_seconds`."""
    return now - held_since > starvation_seconds


def choose_nodes(
    need: int,
    nodes: Mapping[str, NodeGpus],
    *,
    holds: Callable[[Sequence[str]], bool] = lambda _: True,
    avoid: Collection[str] = (),
) -> tuple[str, ...] | None:
    """The fewest nodes whose GPU capacity holds `need`, most free first; None if none do.

    `nodes` are the ones the gang may use (eligible, not reserved by another gang).
    `holds` checks a choice against the members' sizes (a 4-GPU member needs a
    4-GPU node); a choice it rejects is widened by the next node. Nodes in `avoid`
    (the last reservation's, given up) are taken only when the others do not hold
    the gang.
    """
    if need <= 0:
        return None
    fresh = {n: g for n, g in nodes.items() if n not in avoid}
    for pool in (fresh, nodes) if fresh != nodes else (nodes,):
        chosen = _choose_from(need, pool, holds)
        if chosen is not None:
            return chosen
    return None


def _choose_from(
    need: int, nodes: Mapping[str, NodeGpus], holds: Callable[[Sequence[str]], bool]
) -> tuple[str, ...] | None:
    usable = {n: g for n, g in nodes.items() if g.capacity > 0}
    if sum(g.capacity for g in usable.values()) < need:
        return None
    # The fewest nodes: take the largest capacities until they hold `need`.
    by_capacity = sorted(usable, key=lambda n: (-usable[n].capacity, n))
    fewest, total = 0, 0
    for name in by_capacity:
        fewest += 1
        total += usable[name].capacity
        if total >= need:
            break
    # Among node sets that size, prefer the most free now: take nodes by free GPUs,
    # and while the set cannot hold `need`, swap its smallest for the next largest.
    by_free = sorted(usable, key=lambda n: (-usable[n].free, -usable[n].capacity, n))
    chosen = by_free[:fewest]
    spare = [n for n in by_capacity if n not in chosen]
    while sum(usable[n].capacity for n in chosen) < need and spare:
        smallest = min(chosen, key=lambda n: (usable[n].capacity, usable[n].free, n))
        chosen[chosen.index(smallest)] = spare.pop(0)
    # Widen by the next node while the members do not fit on the choice.
    rest = [n for n in by_free if n not in chosen]
    while not holds(chosen):
        if not rest:
            return None
        chosen.append(rest.pop(0))
    return tuple(sorted(chosen, key=lambda n: (-usable[n].free, -usable[n].capacity, n)))


def hold(reservation: Reservation, free: Mapping[str, int]) -> dict[str, int]:
    """GPUs held per reserved node: what is free there, in order, until the need is met."""
    held: dict[str, int] = {}
    left = reservation.need
    for node in reservation.nodes:
        if left <= 0:
            break
        take = min(max(free.get(node, 0), 0), left)
        if take > 0:
            held[node] = take
            left -= take
    return held


def node_list(nodes: Sequence[str]) -> str:
    shown = list(nodes[:MAX_NAMED_NODES])
    return ", ".join(shown + (["..."] if len(nodes) > MAX_NAMED_NODES else []))


def reservation_message(reservation: Reservation, held: Mapping[str, int]) -> str:
    """What the gang's status says: "reserving gpu-3, gpu-7: 6/8 GPUs free" (another
    accelerator is named: "6/8 amd.com/gpu free")."""
    unit = "GPUs" if reservation.resource == GPU else reservation.resource
    return (
        f"reserving {node_list(reservation.nodes)}: "
        f"{sum(held.values())}/{reservation.need} {unit} free"
    )
