"""Gang preemption, a part of `GangCore`: whole gangs evicted for a higher-priority gang.

Pure; a part of `GangCore` (domain/gang/gang.py, filter step 8), over the choices of
domain/preemption/preemption.py. With `preemption_enabled`, a gang that does not fit evicts the
fewest, lowest whole lower-priority gangs and plain pods whose eviction makes it fit
(`try_preemption`); its plan holds the room they free for
`preemption_hold_seconds` (`_hold_for`, with an `EvictVictims` effect). A unit whose
eviction (or its mark) the API server refused is left out of the next choice for a
time its refusal sets, and the hold made for it dropped (`eviction_refused`).
kube-scheduler's own preemption is made whole-gang (`preempt`), and a member someone
else preempted takes the rest of its gang with it (`complete_preempted_gang`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from extender.domain.cluster.ledger import Plan
from extender.domain.objects.membership import GroupKey
from extender.domain.objects.model import GroupSpec, PodInfo, Resources
from extender.domain.planning.node_order import NodeOrder
from extender.domain.planning.planner import NodeRestriction, Placement, plan_gang
from extender.domain.planning.restrictions import (
    RESTRICTION_MEMORY_LIMIT,
    admitting_preemption_nodes,
)
from extender.domain.preemption.preemption import (
    EvictionRefusal,
    GangAwareAnswer,
    NodeVictims,
    Preemption,
    choose_victims,
    gang_aware_victims,
    gang_unit_key,
    rest_of_preempted_gang,
    victim_units,
)
from extender.domain.state.decisions import EvictVictims, PlanCreated, Victim
from extender.domain.state.gang_state import GroupState, HoldReason, SharedState, say

# A node moved in a kept order costs a bisection and a list insert; past one move in
# this many nodes, sorting every node afresh is cheaper.
MOVES_PER_SORT = 16


class GangPreemption:
    """Preempting for a gang, and preempting a gang whole.

    Given the starvation check's `end_reservation` (a preemptor planned ends its
    reservation) and the watch's `group_changed` (a member asking to preempt is
    tried at once).
    """

    def __init__(
        self,
        shared: SharedState,
        *,
        end_reservation: Callable[[GroupKey], None],
        group_changed: Callable[[GroupKey, float], None],
    ) -> None:
        self.shared = shared
        self.end_reservation = end_reservation
        self.group_changed = group_changed
        # Eviction units (VictimUnit.key) the API server refused to evict, until when.
        self.refused_evictions: dict[str, float] = {}
        # Pods asked to be evicted, so none is asked twice.
        self.evicting: set[str] = set()

    def group_preemptible(self, key: GroupKey) -> bool:
        """May the gang be preempted: its PodGroup's spec.preemptible and its members'
        gang-extender.io/preemptible annotation (either saying false opts it out)."""
        spec = self.shared.snapshot.group_spec(key)
        if spec is not None and not spec.preemptible:
            return False
        return all(
            self.shared.snapshot.pods[uid].preemptible is not False
            for uid in self.shared.snapshot.member_uids(key)
        )

    def group_disrupted_whole(self, key: GroupKey) -> bool:
        """Are the gang's members disrupted only together: its spec's disruption mode
        (All for every source but an upstream PodGroup that says Single or nothing)."""
        spec = self.shared.snapshot.group_spec(key)
        return spec is None or spec.disrupted_whole

    def group_pods(self, key: GroupKey) -> list[PodInfo]:
        return [self.shared.snapshot.pods[uid] for uid in self.shared.snapshot.member_uids(key)]

    def try_preemption(
        self,
        key: GroupKey,
        state: GroupState,
        spec: GroupSpec,
        attempts: Sequence[Sequence[PodInfo]],
        free: Mapping[str, Resources],
        allowed: Mapping[str, NodeRestriction],
        now: float,
    ) -> Plan | None:
        """A gang that does not fit: evict the fewest, lowest whole units that make it fit.

        The plan made on the room they free is reserved at once (the hold: nobody
        else is planned or bound there), with `preemption_hold_seconds` to bind.
        """
        members = self.shared.snapshot.members(key)
        if any(m.preemption_policy == "Never" for m in members):
            return None
        assert state.rank is not None  # `GangPlanning.try_plan` ranks the gang first
        priority = state.rank.priority
        if not any(p.priority < priority for p in self.shared.snapshot.pods.values()):
            return None  # nothing lower to evict: skip building the units
        # A pod another gang's preemption is evicting frees room that gang holds.
        going = {
            uid
            for plan in self.shared.ledger.plans.values()
            if plan.group != key
            for uid in plan.victims
        }
        units = [
            u
            for u in victim_units(
                self.shared.snapshot.pods.values(),
                preemptible=self.group_preemptible,
                disrupted_whole=self.group_disrupted_whole,
            )
            if u.group != key and not any(p.uid in going for p in u.pods)
        ]
        refused = [unit for unit, until in self.refused_evictions.items() if until > now]
        bound = [m for m in members if m.is_bound]
        # Every trial plan sorted all nodes (at 5,000 nodes 40% of a search): they share
        # one order of `free`, each moving only the victims' nodes (one bisection each).
        accelerators = self.shared.snapshot.accelerators
        base = NodeOrder.of(
            self.shared.policy.strategy, free, accelerators.main(m.requests for m in members)
        )
        victim_nodes = sorted(
            {n for u in units for p in u.pods if (n := p.node_name) is not None and n in free}
        )

        def order_of(capacity: Mapping[str, Resources]) -> NodeOrder:
            moved = [n for n in victim_nodes if capacity[n] != free[n]]
            if len(moved) * MOVES_PER_SORT > len(free):  # every candidate gone: sort afresh
                return NodeOrder.of(base.strategy, capacity, base.resource)
            return base.with_rooms((n, capacity[n]) for n in moved)

        for chosen in attempts:

            def fits(capacity: Mapping[str, Resources], chosen: Sequence[PodInfo] = chosen) -> bool:
                placed = plan_gang(
                    chosen,
                    capacity,
                    self.shared.snapshot.nodes,
                    self.shared.policy,
                    allowed=allowed,
                    topology=spec.topology,
                    bound=bound,
                    order=order_of(capacity),
                    accelerators=accelerators,
                    explain=False,
                )
                return isinstance(placed, Placement)

            found = choose_victims(
                fits,
                free,
                units,
                priority=priority,
                refused=refused,
                admitted=members_admitting(chosen, allowed),
            )
            if found is None or not found.victims:
                continue
            outcome = plan_gang(
                chosen,
                found.freed,
                self.shared.snapshot.nodes,
                self.shared.policy,
                allowed=allowed,
                topology=spec.topology,
                bound=bound,
                order=order_of(found.freed),
                accelerators=accelerators,
            )
            assert isinstance(outcome, Placement)  # `fits` said so
            return self._hold_for(key, state, members, outcome, found, priority, now)
        return None

    def _hold_for(
        self,
        key: GroupKey,
        state: GroupState,
        members: Sequence[PodInfo],
        outcome: Placement,
        found: Preemption,
        priority: int,
        now: float,
    ) -> Plan:
        """Reserve the preemptor's plan on the room its victims will free; evict them."""
        plan = self.shared.new_plan(
            key, members, outcome, now, deadline=now + self.shared.timeouts.preemption_hold_seconds
        )
        self.shared.ledger.reserve(plan)
        self.end_reservation(key)
        state.shortfall_generation = None
        state.waiting = False
        victims = tuple(Victim(p.uid, p.ref, unit.key) for unit in found.victims for p in unit.pods)
        plan.victims = {p.uid: (p.node_name, p.ref) for p in found.pods if p.node_name is not None}
        plan.gates_held = bool(plan.victims) and any(m.admission_gated for m in members)
        self.evicting.update(victim.uid for victim in victims)
        message = say(
            state,
            HoldReason.PREEMPTING,
            f"gang {key}: preempting {found.describe()} to make room; "
            f"{len(plan.placements)} members planned there, binding once they are gone",
        )
        self.shared.effects.append(PlanCreated(plan))
        self.shared.effects.append(
            EvictVictims(
                group=key,
                preemptor=f"gang {key} (priority {priority})",
                victims=victims,
                message=message,
            )
        )
        return plan

    def eviction_refused(
        self,
        unit: str,
        now: float,
        *,
        preemptor: GroupKey | None,
        refusal: EvictionRefusal,
        why: str,
    ) -> None:
        """The API server did not evict (or let the service mark) a pod of `unit`.

        The unit is left out of the next choice for as long as `refusal` says
        (`EvictionRefusal`): the same victim is not chosen again after every hold. The
        preemptor's hold (its plan, not released: its members cannot pass
        kube-scheduler's filters while the victims stay) is dropped with `why`, so after
        the replan backoff it chooses again without that unit: other victims, or it waits.
        """
        # Expired refusals go here, so the map holds only units refused lately.
        for expired in [u for u, until in self.refused_evictions.items() if until <= now]:
            del self.refused_evictions[expired]
        lasting = (
            self.shared.timeouts.preemption_forbidden_seconds
            if refusal is EvictionRefusal.FORBIDDEN
            else self.shared.timeouts.preemption_hold_seconds
        )
        self.refused_evictions[unit] = now + lasting
        plan = self.shared.ledger.plans.get(preemptor) if preemptor is not None else None
        if plan is not None and not plan.released:
            self.shared.drop(plan, f"the eviction of {unit} was refused ({why})", now)

    def preempt(
        self, pod: PodInfo, proposed: Mapping[str, NodeVictims], now: float
    ) -> GangAwareAnswer:
        """kube-scheduler's preemption for `pod` (the preempt verb), made whole-gang.

        A gang member asking is a gang that does not fit: it is tried here (whole-gang
        preemption included) and kube-scheduler's victims are refused. The nodes
        proposed widen the kept word of the member and of its pending siblings of the
        same filter spec (`PodInfo.filter_spec`). Off
        (`preemption_enabled` False): kube-scheduler's victims pass unchanged.
        """
        if not self.shared.switches.preemption:
            return GangAwareAnswer(dict(proposed), {})
        known = self.shared.snapshot.pods.get(pod.uid, pod)
        if known.group is not None and known.uid in self.shared.snapshot.pods:
            state = self.shared.groups.setdefault(known.group, GroupState())
            # Its pending siblings of the same filtered spec pass the same filters on
            # the proposed nodes: widened at once, the gang is planned on this one
            # proposal, not after each member's own (one node per member's window).
            siblings = {
                m.uid
                for m in self.shared.snapshot.members(known.group)
                if not m.is_bound and m.filter_spec == known.filter_spec
            }
            widened = [
                admitting_preemption_nodes(
                    self.shared.restrictions,
                    self.shared.snapshot,
                    uid,
                    proposed,
                    memory_limit=RESTRICTION_MEMORY_LIMIT,
                )
                for uid in sorted(siblings | {known.uid})
            ]
            if any(widened):
                self.shared.restrictions_version += 1
                # Its "does not fit" was said on the narrower word: ask again.
                state.shortfall_generation = None
                self.shared.shortfalls.forget(known.group)
            self.group_changed(known.group, now)
        return gang_aware_victims(
            known,
            proposed,
            self.shared.snapshot.pods,
            self.group_pods,
            self.group_preemptible,
            self.group_disrupted_whole,
        )

    def complete_preempted_gang(self, pod: PodInfo, group: GroupKey) -> None:
        """A member kube-scheduler preempted (any scheduler): evict the rest of its gang,
        unless its members may be disrupted one at a time (disruptionMode Single)."""
        if pod.uid in self.evicting or not self.group_disrupted_whole(group):
            return
        self.evicting.add(pod.uid)
        rest = rest_of_preempted_gang(self.group_pods(group), self.evicting)
        if not rest:
            return
        self.evicting.update(p.uid for p in rest)
        unit = gang_unit_key(group)
        self.shared.effects.append(
            EvictVictims(
                group=group,
                preemptor=f"kube-scheduler's preemption of {pod.ref}",
                victims=tuple(Victim(p.uid, p.ref, unit) for p in rest),
            )
        )


def members_admitting(
    members: Sequence[PodInfo], allowed: Mapping[str, NodeRestriction]
) -> Callable[[str], frozenset[int]] | None:
    """Which of `members` (by index) their kept word admits on a node, worked out once
    per node asked; None when no member has a word, so every member may go anywhere."""
    words = [allowed.get(member.uid) for member in members]
    if all(word is None for word in words):
        return None
    answered: dict[str, frozenset[int]] = {}

    def admitted(node: str) -> frozenset[int]:
        found = answered.get(node)
        if found is None:
            found = answered[node] = frozenset(
                i for i, word in enumerate(words) if word is None or word.permits(node)
            )
        return found

    return admitted
