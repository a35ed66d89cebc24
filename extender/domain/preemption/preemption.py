"""Gang preemption, whole gangs only: which running pods a gang that cannot fit may evict.

Pure: the core (domain/preemption/gang_preemption.py) and the preempt verb (api/extender.py) ask here;
the evictions go out as `EvictVictims` effects (domain/state/decisions.py) that the
controller carries out through the Eviction API (controller/evictions.py), so
PodDisruptionBudgets are the API server's to enforce.

The unit of eviction (`VictimUnit`) is a whole gang (every bound member of a
group) or one plain pod: a gang is never evicted in part. Decision order for a
gang that does not fit (the core checks 1, `choose_victims` does 2-4):
 1. The preemptor's members say `preemptionPolicy: Never` -> no preemption.
 2. Candidates: units whose priority is lower than the preemptor's, that did
    not opt out (`preemptible`: PodGroup `spec.preemptible`, annotation
    `gang-extender.io/preemptible`) and whose eviction the API server did not
    refuse lately (a PodDisruptionBudget's 429: `refused`).
 3. Add candidates lowest priority first (then those on a node the most of the
    gang's members may use, then fewest pods, then newest) until the gang's plan
    fits on the free capacity plus what they hold; none fits -> no preemption.
 4. Then drop every chosen unit the gang still fits without (highest priority
    first): no victim is kept that the plan does not need.
The freed capacity is held for the preemptor by its plan (a reservation with
the plan's deadline) until it binds, so nobody else takes it.

kube-scheduler's own preemption (`gang_aware_victims`, the preempt verb) picks
victims pod by pod on one node. Its answer is made gang-aware: a gang member
asking is answered with no node (the core preempts for whole gangs, above); for
a plain pod, every victim gang is widened to its members on that node, a node
whose victims include a gang that may not be preempted (priority not lower,
opted out) is dropped, and nodes whose victim gangs also run elsewhere are kept
only when no node without such a gang is left. The rest of such a gang is
evicted by the controller (`rest_of_preempted_gang`), as it is for a gang member
the default scheduler preempted, which never asks this extender.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum

from extender.domain.cluster.snapshot import add_into
from extender.domain.objects.membership import GroupKey
from extender.domain.objects.model import PodInfo, Resources

PREEMPTIBLE_ANNOTATION = "gang-extender.io/preemptible"
# Who preempted a pod, put on it before its eviction: the Eviction API overwrites the
# DisruptionTarget reason with its own, so this annotation is what tells the lifecycle
# policy (domain/lifecycle/lifecycle.py) that the member was preempted, not failed.
PREEMPTED_BY_ANNOTATION = "gang-extender.io/preempted-by"
# The DisruptionTarget reason kube-scheduler gives the pods it preempts.
SCHEDULER_PREEMPTION_REASON = "PreemptionByScheduler"
# Event reasons: on each victim, and on the preemptor's members.
PREEMPTED_EVENT = "PreemptedByGang"
PREEMPTING_EVENT = "GangPreempting"


class EvictionRefusal(Enum):
    """Why a unit was not evicted; says how long it is left out of the next choice.

    BUDGET: a PodDisruptionBudget said no (429); it says yes again once the pods it
    counts are healthy, so the unit is left out for `preemption_hold_seconds`.
    FORBIDDEN: the API server refused the mark or the eviction for good (403: the
    service has no RoleBinding in the victim's namespace; 422; an admission policy):
    nothing changes by itself, so `preemption_forbidden_seconds`.
    FAILED: no answer or 5xx through every retry: `preemption_hold_seconds`.
    """

    BUDGET = "a PodDisruptionBudget"
    FORBIDDEN = "forbidden"
    FAILED = "failed"


def gang_unit_key(group: GroupKey) -> str:
    """The eviction unit of a whole gang, as `VictimUnit.key` names it."""
    return f"gang {group}"


@dataclass(frozen=True)
class VictimUnit:
    """What is evicted at once: a whole gang's bound members, or one plain pod."""

    pods: tuple[PodInfo, ...]
    priority: int
    group: GroupKey | None = None
    preemptible: bool = True
    # False for one member of a gang whose members may be disrupted one at a time
    # (an upstream PodGroup's disruptionMode Single): the unit is that pod alone.
    whole: bool = True

    @property
    def key(self) -> str:
        if self.group is not None and self.whole:
            return gang_unit_key(self.group)
        return f"pod {self.pods[0].ref}"

    @property
    def newest(self) -> float:
        return max(p.created for p in self.pods)

    def describe(self) -> str:
        return f"{self.key} (priority {self.priority})"


@dataclass(frozen=True)
class Preemption:
    """The units to evict (lowest first) and the free capacity once they are gone."""

    victims: tuple[VictimUnit, ...]
    freed: dict[str, Resources] = field(default_factory=dict)

    @property
    def pods(self) -> list[PodInfo]:
        return [p for unit in self.victims for p in unit.pods]

    def describe(self) -> str:
        return ", ".join(unit.describe() for unit in self.victims)


def victim_units(
    pods: Iterable[PodInfo],
    *,
    preemptible: Callable[[GroupKey], bool],
    disrupted_whole: Callable[[GroupKey], bool],
) -> list[VictimUnit]:
    """Every bound, running pod as an eviction unit: one per gang, one per plain pod,
    one per member of a gang that `disrupted_whole` says may lose members one at a time.

    A pod being deleted already is no unit: it frees its room anyway. A gang's
    priority is its highest member's, as in the queue (domain/planning/queue.py).
    """
    gangs: dict[GroupKey, list[PodInfo]] = {}
    units: list[VictimUnit] = []
    whole: dict[GroupKey, bool] = {}
    for pod in pods:
        if not pod.holds_capacity or pod.deleting:
            continue
        if pod.group is None:
            units.append(VictimUnit((pod,), pod.priority))
            continue
        if pod.group not in whole:
            whole[pod.group] = disrupted_whole(pod.group)
        if whole[pod.group]:
            gangs.setdefault(pod.group, []).append(pod)
        else:
            units.append(
                VictimUnit(
                    (pod,),
                    pod.priority,
                    group=pod.group,
                    preemptible=preemptible(pod.group),
                    whole=False,
                )
            )
    for key, members in gangs.items():
        ordered = tuple(sorted(members, key=lambda p: p.ref))
        units.append(
            VictimUnit(
                ordered,
                max(p.priority for p in ordered),
                group=key,
                preemptible=preemptible(key),
            )
        )
    return units


def _eviction_order(unit: VictimUnit) -> tuple[int, int, float, str]:
    # Lowest priority first; then the fewest pods (fewest victims); then the newest
    # (least work lost, as kube-scheduler prefers); then by name, so the order is total.
    return (unit.priority, len(unit.pods), -unit.newest, unit.key)


def candidates(
    units: Iterable[VictimUnit], *, priority: int, refused: Iterable[str] = ()
) -> list[VictimUnit]:
    """Units a preemptor of `priority` may evict, in the order they are tried (step 2)."""
    blocked = set(refused)
    allowed = [u for u in units if u.priority < priority and u.preemptible and u.key not in blocked]
    return sorted(allowed, key=_eviction_order)


def _in_reach_order(
    ordered: list[VictimUnit], admitted: Callable[[str], frozenset[int]] | None
) -> Iterator[VictimUnit]:
    """`ordered` (eviction order), with, within each priority, the unit on a node the
    most members not yet reached may use first, then those on nodes more members may
    use: a greedy set cover, so a gang whose members kube-scheduler admits on
    different nodes frees a few nodes they share, not one per member. Units on no
    node any member may use are left out."""
    if admitted is None:
        yield from ordered
        return
    reach: dict[str, frozenset[int]] = {
        unit.key: frozenset().union(*(admitted(p.node_name) for p in unit.pods if p.node_name))
        for unit in ordered
    }
    # Stable: units of one priority and reach keep their eviction order.
    left = sorted(
        (unit for unit in ordered if reach[unit.key]),
        key=lambda unit: (unit.priority, -len(reach[unit.key])),
    )
    everyone = frozenset().union(*reach.values())
    reached: set[int] = set()
    while left:
        best, gain = 0, 0
        if not reached >= everyone:
            for i, unit in enumerate(left):
                if unit.priority != left[0].priority:
                    break
                more = len(reach[unit.key] - reached)
                if more > gain:
                    best, gain = i, more
        unit = left.pop(best)
        reached |= reach[unit.key]
        yield unit


def free_without(
    free: Mapping[str, Resources], victims: Iterable[VictimUnit]
) -> dict[str, Resources]:
    """Free capacity per node once `victims` are gone."""
    after = {node: dict(resources) for node, resources in free.items()}
    for unit in victims:
        _release(after, unit)
    return after


def _release(free: dict[str, Resources], unit: VictimUnit) -> None:
    """Add what `unit`'s pods hold to the free capacity of their nodes (in place)."""
    for pod in unit.pods:
        if pod.node_name is not None and pod.node_name in free:
            add_into(free[pod.node_name], pod.requests)


def choose_victims(
    fits: Callable[[Mapping[str, Resources]], bool],
    free: Mapping[str, Resources],
    units: Iterable[VictimUnit],
    *,
    priority: int,
    refused: Iterable[str] = (),
    admitted: Callable[[str], frozenset[int]] | None = None,
) -> Preemption | None:
    """Steps 2-4: the fewest, lowest units whose eviction makes `fits` true; None if none do.

    `fits` says whether the preemptor's plan fits a free-capacity map (the core
    passes its planner); `free` is what is free now, after bound pods and every
    reservation. The units returned are minimal: dropping any one of them makes
    `fits` false. `admitted`: which of the preemptor's members (by index) may be
    planned on a node (None: every member, any node); units are tried in that reach
    (`_in_reach_order`), and a unit on no node any member may use frees nothing it
    can use, and is not tried.
    """
    if fits(free):
        return Preemption((), {node: dict(r) for node, r in free.items()})
    tried = candidates(units, priority=priority, refused=refused)
    # One plan with every candidate gone first: a gang that does not fit even then
    # (its members' words admit too few nodes yet) costs one plan, not one per unit.
    if not tried or not fits(free_without(free, tried)):
        return None
    chosen: list[VictimUnit] = []
    # Free capacity once `chosen` are gone, grown one unit at a time: rebuilding it
    # for every unit tried cost a copy of every node's figures each (quadratic).
    after = {node: dict(resources) for node, resources in free.items()}
    for unit in _in_reach_order(tried, admitted):
        chosen.append(unit)
        _release(after, unit)
        if fits(after):
            break
    else:
        return None
    # Minimal: drop what the plan fits without, the highest priority first.
    for unit in sorted(chosen, key=_eviction_order, reverse=True):
        rest = [u for u in chosen if u is not unit]
        if fits(free_without(free, rest)):
            chosen = rest
    chosen.sort(key=_eviction_order)
    return Preemption(tuple(chosen), free_without(free, chosen))


# ------------------------------------------------------------------------------
# kube-scheduler's preemption (the preempt verb)


@dataclass(frozen=True)
class NodeVictims:
    """The victims kube-scheduler proposes on one node, as uids (its MetaVictims)."""

    uids: tuple[str, ...]
    pdb_violations: int = 0


@dataclass(frozen=True)
class GangAwareAnswer:
    """The preempt verb's answer: victims per node kept, and why nodes were dropped."""

    nodes: dict[str, NodeVictims]
    dropped: dict[str, str]


def gang_aware_victims(
    preemptor: PodInfo,
    proposed: Mapping[str, NodeVictims],
    pods: Mapping[str, PodInfo],
    members_of: Callable[[GroupKey], Sequence[PodInfo]],
    preemptible: Callable[[GroupKey], bool],
    disrupted_whole: Callable[[GroupKey], bool],
) -> GangAwareAnswer:
    """kube-scheduler's victims made whole-gang (see the module docstring); a member of
    a gang that may lose members one at a time (`disrupted_whole` false) goes alone.

    `pods` is the watch cache by uid; a proposed victim it does not know is kept
    as kube-scheduler proposed it (it is not ours to judge). `members_of` gives a
    group's pods, bound or not.
    """
    if preemptor.group is not None:
        reason = (
            f"{preemptor.ref} is a member of gang {preemptor.group}: gang-extender preempts "
            "for whole gangs itself"
        )
        return GangAwareAnswer({}, dict.fromkeys(proposed, reason))
    kept: dict[str, NodeVictims] = {}
    spread: dict[str, NodeVictims] = {}
    dropped: dict[str, str] = {}
    for node, victims in proposed.items():
        uids = list(victims.uids)
        seen_groups: set[GroupKey] = set()
        refusal = ""
        elsewhere = False
        for uid in victims.uids:
            pod = pods.get(uid)
            if pod is None or pod.group is None or pod.group in seen_groups:
                continue
            key = pod.group
            seen_groups.add(key)
            if not disrupted_whole(key):
                if not preemptible(key):
                    refusal = f"gang {key} opted out of preemption (preemptible: false)"
                    break
                continue  # the member alone, as kube-scheduler proposed it
            members = [m for m in members_of(key) if m.holds_capacity and not m.deleting]
            priority = max([m.priority for m in members] + [pod.priority])
            if not preemptible(key):
                refusal = f"gang {key} opted out of preemption (preemptible: false)"
                break
            if priority >= preemptor.priority:
                refusal = f"gang {key} has priority {priority}, not lower than {preemptor.priority}"
                break
            for member in members:
                if member.node_name == node and member.uid not in uids:
                    uids.append(member.uid)
                elif member.node_name != node:
                    elsewhere = True
        if refusal:
            dropped[node] = refusal
            continue
        answer = NodeVictims(tuple(uids), victims.pdb_violations)
        (spread if elsewhere else kept)[node] = answer
    if kept:
        for node in spread:
            dropped[node] = "its victims include part of a gang running on other nodes too"
        return GangAwareAnswer(kept, dropped)
    return GangAwareAnswer(spread, dropped)


def rest_of_preempted_gang(members: Sequence[PodInfo], evicting: Iterable[str]) -> list[PodInfo]:
    """A gang one of whose members was preempted: its other members still holding room.

    The controller evicts these too, so the gang goes whole. `evicting` are uids
    already asked to go (not asked twice).
    """
    asked = set(evicting)
    return [m for m in members if m.holds_capacity and not m.deleting and m.uid not in asked]
