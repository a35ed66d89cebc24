"""Why a pod was held, planned or bound: the gang scheduling decisions, in one place.

`GangCore` keeps the shared state (domain/state/gang_state.py: snapshot, ledger, groups,
effects) and answers the extender's three verbs with a core-owned verdict; the HTTP
routes only translate it. Time is passed in (`now`), side effects go out as `Effect`
records the service drains (annotate planned members so kube-scheduler retries them,
write status, emit Events), so every decision here is deterministic and testable
without a cluster. Why a gang is held is said once, by the step that holds it: a
`HoldReason` with its message (`GroupState.hold`), which the PodGroup status maps.

`GangCore` is composed of parts, one object and one module a concern, each owning
its own state and given only what it uses of the others (a part, or one narrow
callable such as `plan_held`, the filter's steps 4-8 for a held gang); no part
imports this module, which wires them, keeps this map, prioritize and expiry. The
edges hold it as a `SchedulingCore` (domain/gang/core_api.py: its verbs and read-only
views):
 - domain/gang/gang_filter.py: the filter, steps 1-3 (and a plain pod's answer);
 - domain/gang/gang_planning.py: steps 4-8 for one gang, over the parts below;
 - domain/state/gang_room.py: capacity for planning, and step 5, the memo of held gangs
   known not to fit;
 - domain/gang/gang_watch.py: the watch's observations (a pod or group that changed or
   went away), which settle plans and plan the held gangs they complete;
 - domain/queue/gang_admission.py: gangs behind gang-extender's admission gate, planned
   without kube-scheduler asking, and gates lifted off pods nobody will plan;
 - domain/queue/gang_queue.py: queue order, step 6, whom a held gang waits behind, and
   the view of the held gangs (domain/queue/held_queue.py) the starvation check reads too;
 - domain/starvation/gang_starvation.py: starvation reservations and their placeholder pods;
 - domain/preemption/gang_preemption.py: gang preemption, step 8, made whole for kube-scheduler's;
 - domain/gang/gang_barrier.py: the bind checks, the barrier and what follows its release;
 - domain/failover/gang_failover.py: plans recovered or dropped when the writer changes;
 - domain/state/gang_state.py: the per-group records, and what the parts share.

Filter decision order for a pod:
 1. No group -> NOT_A_GANG: any candidate it fits on once gang reservations are
    taken out, and the GPUs a starving gang holds (below).
 2. Group misdeclared (two groups, members disagree on size, bad PodGroup) -> REJECT.
 3. Group has a plan that includes the pod -> PLANNED on its node (if kube-scheduler
    still offers that node; else the plan is dropped and the gang waits, unless its
    barrier released: then the member waits for its node, and a node that is gone
    loses the member, GangBroken; or the node joined or changed and no filter has
    named it since: kube-scheduler has not seen it yet, the member waits,
    domain/planning/restrictions.py `UnseenNodes`).
 4. Group backing off after a dropped plan, or fewer members than minMember or
    than a task's minimum (minTaskMember) -> WAIT.
 5. Nothing that could make it fit changed since its last failed attempt -> WAIT
    (memoised shortfall: per gang, domain/planning/shortfalls.py, ended only by a change to
    its own members or PodGroup or to a node one of its pending members could use
    before or after; else the global planning generation).
 6. Queue order (domain/planning/queue.py, domain/queue/gang_queue.py): every held gang ahead of
    this one (higher pod priority, or equal and older) that can be planned now is
    planned first, gangs kube-scheduler has not asked about yet included; one that
    cannot blocks no one.
 7. Plan every unbound member (or, failing that, the fewest that meet every task
    minimum and minMember: domain/planning/selection.py) on capacity free of bound pods and
    other gangs' reservations -> PLANNED, or WAIT with what is missing, naming the
    gang ahead whose plan holds the room ("waiting behind <ns>/<name> (priority N)").
 8. Not placed, and preemption on (`preemption_enabled`): the fewest, lowest whole
    lower-priority gangs and plain pods whose eviction makes it fit
    (domain/preemption/preemption.py, domain/preemption/gang_preemption.py) -> PLANNED on the room they
    free, held by the plan until `preemption_hold_seconds`, with an `EvictVictims`
    effect.

Starvation (domain/starvation/reservations.py; domain/starvation/gang_starvation.py,
`update_reservations`, run with every expiry pass): a held gang at the head of the
queue (`gang_ahead_of` is None) that waited longer than its starvationSeconds
reserves nodes; the GPUs free there, up to its need, are taken out of every other
gang's planning (`free_for_planning`) and refused to plain pods (filter and bind),
and it is planned once they hold its need. The reservation ends when it is planned
or no longer held, or at its bound (`reservation_max_seconds`, then other nodes are
chosen). While it holds GPUs, placeholder pods request them on the reserved nodes
(domain/starvation/placeholders.py, `_sync_placeholders`), so other schedulers see them taken;
a group's own placeholders are its room (`free_for_planning`). Planned, its
placeholders are deleted and its complete barrier releases only once the watch saw
them gone (`placeholder_gone`, `BarrierReleased`).

Steps 4-8 also run when the watch delivers a change to a held group
(`group_changed`): kube-scheduler retries held members only on an event, and the
plan's annotations are one.

Filter and prioritize ask about a pod by its API object (`asked_about`): our
copy when the watch delivered it, else the request's, which is never recorded:
only the watch says which pods exist, what they request and what holds capacity,
so a forged request can neither join a quorum nor change free capacity. A member
the watch has not delivered yet is held until it has (its arrival re-plans the
group, `group_changed`); a plain pod is answered from the request, storing nothing.

Before a bind (domain/gang/gang_barrier.py, `bind_refusal`): the pod must be in the watch
cache under that name, be of schedulerName gang-extender, not be bound yet, and the
node must be one this service's last filter answer offered it.

Bind (`arrive`): a planned member joins its plan's barrier; a member without a
plan is refused; a plain pod is bound at once unless a gang reserved the room on
its node after it passed filter (then refused, and kube-scheduler retries it).
Around the binding call: a plain pod is counted on its node before the call
(`assume_bound`, undone by `undo_assumption` if the binding fails), a planned
member after it (`binding_succeeded`).

Bind decision order for a planned member (the barrier, `arrive`):
 1. Plan released already (a member whose binding failed, retried by
    kube-scheduler): bind again on the planned node if the node still has room,
    else refuse (kept reserved; kube-scheduler retries).
 2. Reached bind on another node than planned: the plan is dropped, nothing bound.
 3. Other members still missing: WAIT (bounded by the barrier timeout, then dropped).
 4. Last member arrived: every planned node is re-checked against the snapshot,
    which counts every bound pod whoever bound it (the default scheduler does not
    see reservations). A node short of room: the plan is dropped and re-made,
    nothing bound. Else RELEASE: from here the plan is never dropped.

After release (`bind_failed`, `observe_pod`, `forget_pod`): a binding that failed
keeps the member's reservation (`MemberBindFailed`, kube-scheduler retries it onto
its planned node); a member that can never be bound (deleted, bound elsewhere by
someone else is not one: it is bound) is lost: `GangBroken`, the group's failure
record that the service turns into a Warning Event and a metric and that the
lifecycle policy (restart/abort) will act on. A gang never ends partial silently.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from extender.domain.cluster.ledger import Ledger, Plan
from extender.domain.cluster.snapshot import ClusterSnapshot
from extender.domain.failover.gang_failover import Failover
from extender.domain.failover.recovery import Recovery
from extender.domain.gang.gang_barrier import BindBarrier
from extender.domain.gang.gang_filter import GangFilter
from extender.domain.gang.gang_planning import GangPlanning
from extender.domain.gang.gang_watch import GangWatch
from extender.domain.objects.limits import listing
from extender.domain.objects.membership import GroupKey
from extender.domain.objects.model import GroupSpec, NodeInfo, PodInfo, Resources
from extender.domain.objects.policy import Policy
from extender.domain.planning.planner import NodeRestriction
from extender.domain.planning.queue import QueueRank
from extender.domain.planning.restrictions import UnseenNodes
from extender.domain.planning.scoring import MAX_SCORE, Priorities
from extender.domain.preemption.gang_preemption import GangPreemption
from extender.domain.preemption.preemption import EvictionRefusal, GangAwareAnswer, NodeVictims
from extender.domain.queue.gang_admission import GatedAdmission
from extender.domain.queue.gang_queue import QueueOrder
from extender.domain.starvation.gang_starvation import (
    PLACEHOLDER_RETRY_SECONDS,
    STARVATION_CHECK_SECONDS,
    StarvationReservations,
)
from extender.domain.state.decisions import (
    Assumption,
    BindDecision,
    BindVerdict,
    Effect,
    FilterDecision,
)
from extender.domain.state.gang_room import GangRoom
from extender.domain.state.gang_state import (
    GroupState,
    Hold,
    SharedState,
    StarvingHold,
    Switches,
    Timeouts,
)

# GroupState and Timeouts (domain/state/gang_state.py) and the placeholder retry interval are
# imported from here by the service, the controller and the tests; the starvation
# check's interval was defined here too, so it is still found here.
__all__ = [
    "PLACEHOLDER_RETRY_SECONDS",
    "STARVATION_CHECK_SECONDS",
    "GangCore",
    "GroupState",
    "Timeouts",
]


class GangCore:
    """The gang scheduler's decisions: the shared state, and the parts that own the rest.

    Keeps what every part reads (`shared`: policy, timeouts, snapshot, ledger, groups,
    effects), wires the parts and answers for them (`SchedulingCore`); each part keeps
    its own state and is given only what it uses of the others (see the module
    docstring for who does what). Prioritize and expiry are its own.
    """

    def __init__(
        self,
        policy: Policy,
        timeouts: Timeouts,
        *,
        preemption_enabled: bool = False,
        placeholders: bool = True,
        fences: bool = True,
        snapshot: ClusterSnapshot | None = None,
    ) -> None:
        shared = SharedState(
            policy,
            timeouts,
            snapshot=snapshot if snapshot is not None else ClusterSnapshot(),
            switches=Switches(
                preemption=preemption_enabled, placeholders=placeholders, fences=fences
            ),
        )
        self.shared = shared
        self.room = GangRoom(
            shared,
            starving_holds=self.starving_holds,
            reserving=self._reserving,
            holds_a_place=self._holds_a_place,
        )
        self.queue = QueueOrder(
            shared, absorb_changes=self.room.absorb_changes, plan_group=self._plan_held
        )
        self.starvation = StarvationReservations(
            shared,
            queue=self.queue,
            room=self.room,
            plan_group=self._plan_held,
            placeholder_gone=self._placeholder_gone,
        )
        self.preemption = GangPreemption(
            shared,
            end_reservation=self.starvation.end_reservation,
            group_changed=self.group_changed,
        )
        self.planning = GangPlanning(
            shared,
            room=self.room,
            queue=self.queue,
            starvation=self.starvation,
            preemption=self.preemption,
        )
        self.barrier = BindBarrier(
            shared,
            room=self.room,
            starvation=self.starvation,
            expire=self.expire,
            observe_pod=self.observe_pod,
            group_changed=self.group_changed,
        )
        self.admission = GatedAdmission(shared, queue=self.queue)
        self.watch = GangWatch(
            shared,
            queue=self.queue,
            starvation=self.starvation,
            preemption=self.preemption,
            barrier=self.barrier,
            plan_group=self.planning.plan_held,
            admit_gated=self.admission.admit_gated,
        )
        self.failover = Failover(shared)
        self.filtering = GangFilter(
            shared,
            planning=self.planning,
            room=self.room,
            starvation=self.starvation,
            barrier=self.barrier,
            expire=self.expire,
        )

    # A part made before another is given the core's method that reaches it: bound
    # methods, so a copy of the core (copy.deepcopy) calls its own parts.
    def _plan_held(
        self, key: GroupKey, state: GroupState, spec: GroupSpec, now: float, *, queue: bool
    ) -> Plan | str:
        return self.planning.plan_held(key, state, spec, now, queue=queue)

    def _reserving(self, key: GroupKey) -> bool:
        return self.starvation.reserving(key)

    def _holds_a_place(self, key: GroupKey) -> bool:
        return self.queue.holds_a_place(key)

    def _placeholder_gone(self, group: GroupKey, now: float) -> None:
        self.barrier.placeholder_gone(group, now)

    # ------------------------------------------------------ the shared state
    @property
    def policy(self) -> Policy:
        return self.shared.policy

    @property
    def timeouts(self) -> Timeouts:
        return self.shared.timeouts

    @property
    def snapshot(self) -> ClusterSnapshot:
        return self.shared.snapshot

    @property
    def ledger(self) -> Ledger:
        return self.shared.ledger

    @property
    def groups(self) -> dict[GroupKey, GroupState]:
        return self.shared.groups

    @property
    def effects(self) -> list[Effect]:
        return self.shared.effects

    @property
    def restrictions(self) -> dict[str, NodeRestriction]:
        return self.shared.restrictions

    @property
    def restrictions_version(self) -> int:
        return self.shared.restrictions_version

    @restrictions_version.setter
    def restrictions_version(self, value: int) -> None:
        self.shared.restrictions_version = value

    @property
    def unseen_nodes(self) -> UnseenNodes:
        return self.shared.unseen_nodes

    @property
    def preemption_enabled(self) -> bool:
        return self.shared.switches.preemption

    @preemption_enabled.setter
    def preemption_enabled(self, on: bool) -> None:
        self.shared.switches.preemption = on

    @property
    def placeholders(self) -> bool:
        return self.shared.switches.placeholders

    @placeholders.setter
    def placeholders(self, on: bool) -> None:
        self.shared.switches.placeholders = on

    @property
    def fences(self) -> bool:
        return self.shared.switches.fences

    @fences.setter
    def fences(self, on: bool) -> None:
        self.shared.switches.fences = on

    # ------------------------------------------- the parts' verbs, for the edges
    def observe_pod(self, pod: PodInfo, now: float) -> None:
        self.watch.observe_pod(pod, now)

    def group_changed(self, key: GroupKey, now: float) -> None:
        self.watch.group_changed(key, now)

    def forget_pod(self, uid: str, now: float) -> None:
        self.watch.forget_pod(uid, now)

    def forget_group_if_gone(self, key: GroupKey) -> None:
        self.watch.forget_group_if_gone(key)

    def apply_node(self, node: NodeInfo) -> None:
        """The watch saw a node added or changed."""
        self.shared.snapshot.upsert_node(node)

    def forget_node(self, name: str) -> None:
        """The watch saw a node deleted (or a relist no longer has it)."""
        self.shared.snapshot.delete_node(name)

    def apply_group_spec(self, spec: GroupSpec) -> bool:
        """A PodGroup (of any source) added or changed; True if what sizes the gang changed."""
        return self.shared.snapshot.upsert_podgroup(spec)

    def forget_group_spec(self, source: str, key: GroupKey) -> None:
        """A PodGroup of `source` went away."""
        self.shared.snapshot.delete_podgroup(source, key)

    def bind_refusal(self, *, uid: str, namespace: str, name: str, node: str) -> str:
        return self.barrier.bind_refusal(uid=uid, namespace=namespace, name=name, node=node)

    def arrive(self, uid: str, node: str, now: float) -> BindDecision:
        return self.barrier.arrive(uid, node, now)

    def barrier_deadline(self, plan_id: int, group: GroupKey) -> float | None:
        return self.barrier.barrier_deadline(plan_id, group)

    def barrier_state(self, plan_id: int, group: GroupKey) -> BindVerdict:
        return self.barrier.barrier_state(plan_id, group)

    def barrier_timed_out(self, plan_id: int, group: GroupKey, now: float) -> str:
        return self.barrier.barrier_timed_out(plan_id, group, now)

    def dropped_plan_message(self, plan_id: int, group: GroupKey) -> str:
        return self.barrier.dropped_plan_message(plan_id, group)

    def assume_bound(self, uid: str, node: str, now: float) -> Assumption | None:
        return self.barrier.assume_bound(uid, node, now)

    def undo_assumption(self, assumption: Assumption, now: float) -> bool:
        return self.barrier.undo_assumption(assumption, now)

    def binding_succeeded(self, uid: str, node: str, now: float) -> bool:
        return self.barrier.binding_succeeded(uid, node, now)

    def bind_failed(self, uid: str, reason: str, now: float, *, gone: bool = False) -> None:
        self.barrier.bind_failed(uid, reason, now, gone=gone)

    def recover(self, now: float) -> Recovery:
        return self.failover.recover(now)

    def stand_down(self, now: float) -> None:
        self.failover.stand_down(now)

    def preempt(
        self, pod: PodInfo, proposed: Mapping[str, NodeVictims], now: float
    ) -> GangAwareAnswer:
        return self.preemption.preempt(pod, proposed, now)

    def eviction_refused(
        self,
        unit: str,
        now: float,
        *,
        preemptor: GroupKey | None,
        refusal: EvictionRefusal,
        why: str,
    ) -> None:
        self.preemption.eviction_refused(unit, now, preemptor=preemptor, refusal=refusal, why=why)

    def gang_ahead_of(self, key: GroupKey) -> QueueRank | None:
        return self.queue.gang_ahead_of(key)

    def word_on(self, key: GroupKey) -> Hold | None:
        return self.shared.word_on(key)

    def members_short(self, key: GroupKey) -> Hold | None:
        return self.shared.members_short(key)

    def starving_holds(self) -> dict[str, StarvingHold]:
        return self.starvation.starving_holds()

    def free_for_planning(self, group: GroupKey | None = None) -> dict[str, Resources]:
        return self.room.free_for_planning(group)

    def free_after_reservations(self, node: str) -> Resources:
        return self.room.free_after_reservations(node)

    # ------------------------------------------------------------- requests
    def asked_about(self, pod: Mapping[str, Any]) -> PodInfo:
        """The scheduler's copy of the pod, or ours when we have it (ours carries plan notes)."""
        # Look the pod up by the uid PodInfo.from_api would give it, and parse only
        # a pod the cache has not seen: filter and prioritize come for every pod.
        cached = self.snapshot.pods.get(pod["metadata"]["uid"])
        if cached is not None:
            return cached
        # Not recorded: a request body is not evidence that a pod exists (anyone who
        # reaches the listener can send one). The watch delivers the real pod.
        return PodInfo.from_api(pod)

    # ------------------------------------------------------------------ filter
    def filter(
        self, pod: PodInfo, candidates: Sequence[str], now: float, nominated: str | None = None
    ) -> FilterDecision:
        """Steps 1-3 here (domain/gang/gang_filter.py), 4-8 in domain/gang/gang_planning.py.

        `nominated`: the `status.nominatedNodeName` of the pod as kube-scheduler sent it.
        """
        return self.filtering.filter(pod, candidates, now, nominated)

    # ------------------------------------------------------------ prioritize
    def prioritize(self, pod: PodInfo, candidates: Collection[str]) -> dict[str, int]:
        """Every candidate's score, zeros included (the plain form of `priorities`)."""
        return self.priorities(pod).for_candidates(candidates)

    def priorities(self, pod: PodInfo) -> Priorities:
        """Prioritize's answer as the nodes that score: a planned member's node, else
        the score board's (domain/planning/scoring.py)."""
        plan = self.ledger.plan_of(pod.uid)
        if plan is not None:
            return Priorities({plan.placements[pod.uid]: MAX_SCORE})
        return self.room.score_board.priorities(self.snapshot, self.ledger, self.policy)

    # --------------------------------------------------------------- expiry
    def admit_gated(self, now: float) -> None:
        """Periodic: plan the held gangs behind the admission gate (domain/queue/gang_admission.py)."""
        self.admission.admit_gated(now)

    def expire(self, now: float) -> None:
        """Drop plans past their deadline, and the ones a node kube-scheduler never offered
        holds up; then bring the starvation reservations up to date."""
        self.shared.catch_up_unseen(now)
        self._expire_plans(now)
        self.starvation.update_reservations(now)

    def _expire_plans(self, now: float) -> None:
        for plan in list(self.ledger.plans.values()):
            if now >= plan.deadline and not plan.released:
                missing = listing(sorted(plan.names[u] for u in plan.waiting_for))
                self.shared.drop(
                    plan,
                    f"schedule timeout: {missing} did not reach bind in time",
                    now,
                    timed_out=True,
                )

    # ---------------------------------------------------------------- drains
    def drain_touched(self) -> set[GroupKey]:
        """Groups whose hold changed outside a filter (their status is re-written)."""
        touched, self.shared.touched = self.shared.touched, set()
        return touched

    def reserved_placements(self) -> int:
        """Planned members not bound yet, each holding a reservation (a metrics gauge)."""
        return sum(len(p.unbound) for p in self.ledger.plans.values())

    def drain_effects(self) -> list[Effect]:
        effects, self.shared.effects = self.shared.effects, []
        return effects
