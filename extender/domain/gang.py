"""Why a pod was held, planned or bound: the gang scheduling decisions, in one place.

`GangCore` owns the snapshot and the ledger and answers the extender's three
verbs with a core-owned verdict; the HTTP routes only translate it. Time is
passed in (`now`), side effects go out as `Effect` records the service drains
(annotate planned members so kube-scheduler retries them, write status, emit
Events), so every decision here is deterministic and testable without a cluster.

`GangCore` is one object composed of parts, one module a concern; this module
keeps its state, the filter's decision order below (steps 1-4 and 7), prioritize
and expiry:
 - domain/gang_room.py: capacity for planning, and step 5, the memo of held gangs
   known not to fit;
 - domain/gang_watch.py: the watch's observations (a pod or group that changed or
   went away), which settle plans and plan the held gangs they complete;
 - domain/gang_queue.py: queue order, step 6, whom a held gang waits behind, and
   the view of the held gangs (domain/held_queue.py) the starvation check reads too;
 - domain/gang_starvation.py: starvation reservations and their placeholder pods;
 - domain/gang_preemption.py: gang preemption, step 8, made whole for kube-scheduler's;
 - domain/gang_barrier.py: the bind checks, the barrier and what follows its release;
 - domain/gang_failover.py: plans recovered or dropped when the writer changes;
 - domain/gang_state.py: the per-group records, and what one part may use of another.

Filter decision order for a pod:
 1. No group -> NOT_A_GANG: any candidate it fits on once gang reservations are
    taken out, and the GPUs a starving gang holds (below).
 2. Group misdeclared (two groups, members disagree on size, bad PodGroup) -> REJECT.
 3. Group has a plan that includes the pod -> PLANNED on its node (if kube-scheduler
    still offers that node; else the plan is dropped and the gang waits, unless its
    barrier released: then the member waits for its node, and a node that is gone
    loses the member, GangBroken; or the node joined or changed and no filter has
    named it since: kube-scheduler has not seen it yet, the member waits,
    domain/restrictions.py `UnseenNodes`).
 4. Group backing off after a dropped plan, or fewer members than minMember or
    than a task's minimum (minTaskMember) -> WAIT.
 5. Nothing that could make it fit changed since its last failed attempt -> WAIT
    (memoised shortfall: per gang, domain/shortfalls.py, ended only by a change to
    its own members or PodGroup or to a node one of its pending members could use
    before or after; else the global planning generation).
 6. Queue order (domain/queue.py, domain/gang_queue.py): every held gang ahead of
    this one (higher pod priority, or equal and older) that can be planned now is
    planned first, gangs kube-scheduler has not asked about yet included; one that
    cannot blocks no one.
 7. Plan every unbound member (or, failing that, the fewest that meet every task
    minimum and minMember: domain/selection.py) on capacity free of bound pods and
    other gangs' reservations -> PLANNED, or WAIT with what is missing, naming the
    gang ahead whose plan holds the room ("waiting behind <ns>/<name> (priority N)").
 8. Not placed, and preemption on (`preemption_enabled`): the fewest, lowest whole
    lower-priority gangs and plain pods whose eviction makes it fit
    (domain/preemption.py, domain/gang_preemption.py) -> PLANNED on the room they
    free, held by the plan until `preemption_hold_seconds`, with an `EvictVictims`
    effect.

Starvation (domain/reservations.py; domain/gang_starvation.py,
`update_reservations`, run with every expiry pass): a held gang at the head of the
queue (`gang_ahead_of` is None) that waited longer than its starvationSeconds
reserves nodes; the GPUs free there, up to its need, are taken out of every other
gang's planning (`free_for_planning`) and refused to plain pods (filter and bind),
and it is planned once they hold its need. The reservation ends when it is planned
or no longer held, or at its bound (`reservation_max_seconds`, then other nodes are
chosen). While it holds GPUs, placeholder pods request them on the reserved nodes
(domain/placeholders.py, `_sync_placeholders`), so other schedulers see them taken;
a group's own placeholders are its room (`free_for_planning`). Planned, its
placeholders are deleted and its complete barrier releases only once the watch saw
them gone (`_placeholder_gone`, `BarrierReleased`).

Steps 4-8 also run when the watch delivers a change to a held group
(`group_changed`): kube-scheduler retries held members only on an event, and the
plan's annotations are one.

Filter and prioritize ask about a pod by its API object (`asked_about`): our
copy when the watch delivered it, else the request's, which is never recorded:
only the watch says which pods exist, what they request and what holds capacity,
so a forged request can neither join a quorum nor change free capacity. A member
the watch has not delivered yet is held until it has (its arrival re-plans the
group, `group_changed`); a plain pod is answered from the request, storing nothing.

Before a bind (domain/gang_barrier.py, `bind_refusal`): the pod must be in the watch
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

import traceback
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import filterfalse
from typing import Any

from extender.domain.decisions import (
    Effect,
    FilterDecision,
    GangFaulted,
    PlaceholderCreate,
    PlanCreated,
    PlanDropped,
    Verdict,
)
from extender.domain.gang_barrier import BindBarrier
from extender.domain.gang_failover import Failover
from extender.domain.gang_preemption import GangPreemption
from extender.domain.gang_room import GangRoom
from extender.domain.gang_starvation import (
    PLACEHOLDER_RETRY_SECONDS,
    STARVATION_CHECK_SECONDS,
    StarvationReservations,
)
from extender.domain.gang_state import GroupState, Timeouts
from extender.domain.gang_watch import GangWatch
from extender.domain.held_queue import HeldEntry, HeldQueue
from extender.domain.ledger import Ledger, Plan
from extender.domain.limits import clip, listing, quoted
from extender.domain.membership import GroupKey
from extender.domain.model import GroupSpec, PodInfo
from extender.domain.planner import NodeRestriction, Placement, plan_gang
from extender.domain.policy import Policy
from extender.domain.quantity import GPU
from extender.domain.queue import rank_of
from extender.domain.reservations import Reservation
from extender.domain.restrictions import CurrentRestrictions, UnseenNodes, learnt_now, waiting_on
from extender.domain.scoring import MAX_SCORE, NodeScoreBoard, Priorities
from extender.domain.selection import MembersMissing, choose_members, tasks_left_out
from extender.domain.shortfalls import ShortfallMemo
from extender.domain.snapshot import ClusterSnapshot, fits

# GroupState and Timeouts (domain/gang_state.py) and the placeholder retry interval are
# imported from here by the service, the controller and the tests; the starvation
# check's interval was defined here too, so it is still found here.
__all__ = [
    "PLACEHOLDER_RETRY_SECONDS",
    "STARVATION_CHECK_SECONDS",
    "GangCore",
    "GroupState",
    "Timeouts",
]

# Remember what kube-scheduler's filters said about a member only when it is this
# many node names or fewer (allow- or deny-list), to bound memory on big clusters.
RESTRICTION_MEMORY_LIMIT = 256


@dataclass
class GangCore(GangRoom, GangWatch, StarvationReservations, GangPreemption, BindBarrier, Failover):
    policy: Policy
    timeouts: Timeouts
    snapshot: ClusterSnapshot = field(default_factory=ClusterSnapshot)
    ledger: Ledger = field(default_factory=Ledger)
    groups: dict[GroupKey, GroupState] = field(default_factory=dict)
    effects: list[Effect] = field(default_factory=list)
    # Per member uid: nodes kube-scheduler last offered (or refused) it, so a plan
    # avoids nodes the scheduler's own filters reject (affinity, ports, ...).
    restrictions: dict[str, NodeRestriction] = field(default_factory=dict)
    # Nodes whose joining or change no filter's candidates named yet: kube-scheduler's
    # informer may lag ours, so their absence from a member's candidates is no refusal.
    unseen_nodes: UnseenNodes = field(default_factory=UnseenNodes)
    # Per uid of a pod in the watch cache: the nodes this service's last filter answer
    # offered it (None: more than RESTRICTION_MEMORY_LIMIT, not kept). `bind_refusal`
    # refuses a bind to anything else; forgotten with the pod.
    offered: dict[str, frozenset[str] | None] = field(default_factory=dict)
    # Prioritize's per-node scores, rescored only where capacity changed.
    score_board: NodeScoreBoard = field(default_factory=NodeScoreBoard)
    # Groups with a pending, ungated member kube-scheduler has not asked about yet:
    # they join the queue (`groups`) when a gang behind them is tried, since
    # kube-scheduler never asks the extender about a pod its own filters place
    # nowhere (every GPU taken), and a gang created then must still go first.
    unasked: set[GroupKey] = field(default_factory=set)
    # Starving gangs' reservations (domain/reservations.py), and the nodes of the last
    # one each gave up (its next choice prefers others).
    reservations: dict[GroupKey, Reservation] = field(default_factory=dict)
    given_up: dict[GroupKey, tuple[str, ...]] = field(default_factory=dict)
    # Groups whose hold message changed outside a filter or plan (a reservation
    # started, moved or ended): the controller re-writes their status (`drain_touched`).
    touched: set[GroupKey] = field(default_factory=set)
    starvation_checked: float = float("-inf")
    # Since when each held gang without a plan has been seen held by the starvation
    # check: its wait, on this service's clock (not the pods' creation times, which a
    # gated or long-existing pod makes old, and another clock writes).
    held_since: dict[GroupKey, float] = field(default_factory=dict)
    # Per unplanned group: (its version, held, its own starvationSeconds or None for the
    # default) when last looked at.
    starving_inputs: dict[GroupKey, tuple[int, bool, float | None]] = field(default_factory=dict)
    # Gang preemption (domain/preemption.py), Settings.preemption: off, no gang
    # preempts and kube-scheduler's own preemption is passed through unchanged.
    preemption_enabled: bool = False
    # Eviction units (VictimUnit.key) the API server refused to evict, until when.
    refused_evictions: dict[str, float] = field(default_factory=dict)
    # Pods asked to be evicted, so none is asked twice.
    evicting: set[str] = field(default_factory=set)
    # Placeholder pods (domain/placeholders.py) make reservations visible to other
    # schedulers and the cluster autoscaler; off: only this scheduler's pods respect them.
    placeholders: bool = True
    # Placeholder deletes asked for and not seen done yet: ("delete", name) -> when asked;
    # creates, by name: when asked and what (counted as there until seen or retried).
    placeholder_requests: dict[tuple[str, str], float] = field(default_factory=dict)
    placeholder_creating: dict[str, tuple[float, PlaceholderCreate]] = field(default_factory=dict)
    # Fence taints (domain/fences.py) keep every other scheduler off reserved nodes; off:
    # placeholders alone, which a pod of another scheduler already pending can race.
    fences: bool = True
    # Fence writes asked for and not seen done: (node, value, "" to remove) -> when asked.
    fence_requests: dict[tuple[str, str], float] = field(default_factory=dict)
    # Gangs planned from a fenced reservation: the plan and the nodes kept fenced
    # until that plan is bound or dropped.
    fenced_plans: dict[GroupKey, tuple[Plan, frozenset[str]]] = field(default_factory=dict)
    # Held gangs known not to fit, each until a change that could help it
    # (domain/shortfalls.py): a cluster event costs them the shapes of their members,
    # not a plan each. Gangs it does not cover (starving ones, ones that could preempt)
    # keep the global memo, `GroupState.shortfall_generation`.
    shortfalls: ShortfallMemo = field(default_factory=ShortfallMemo)
    # The lowest priority holding capacity at the last `_absorb_changes`: a drop below
    # a memoised gang's priority gives it something to preempt.
    lowest_priority_seen: int | None = None
    # Bumped when kube-scheduler's last word on a member (`restrictions`) changes.
    restrictions_version: int = 0
    # Per group: whether it would fit on the empty nodes it wants (gang_ahead_of), with
    # the inputs that was computed on (its version, nodes, kube-scheduler's last word).
    fits_when_empty: dict[GroupKey, tuple[tuple[int, int, int], bool]] = field(default_factory=dict)
    # The same answer per demand shape (gang_queue.demand_shape), for the nodes as of
    # `fits_by_shape_nodes`: after a node change every held gang asks again, and gangs
    # of one template (the common case) share one plan on the empty nodes.
    fits_by_shape: dict[object, bool] = field(default_factory=dict)
    fits_by_shape_nodes: int = -1
    # The held gangs in queue order (domain/held_queue.py), rebuilt when an entry, the
    # nodes or kube-scheduler's last word changed; each group's entry (its rank and
    # members if held, None if not) kept with the group version and plan state it
    # was computed from, so a member event recomputes one entry, not every group's.
    held_view: HeldQueue | None = None
    held_view_inputs: tuple[int, int] = (-1, -1)
    held_entries: dict[GroupKey, tuple[tuple[int, int, bool], HeldEntry | None]] = field(
        default_factory=dict
    )
    # The groups whose kept entry was computed with a plan: its plan may have gone since.
    held_planned: set[GroupKey] = field(default_factory=set)

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
    def filter(self, pod: PodInfo, candidates: Sequence[str], now: float) -> FilterDecision:
        self._catch_up_unseen(now)
        self.unseen_nodes.saw(candidates)
        known = self.snapshot.pods.get(pod.uid)
        if known is None:
            return self._filter_unknown(pod, candidates, now)
        decision = self._filter_known(known, candidates, now)  # the watch's copy, always
        nodes = decision.nodes
        self.offered[pod.uid] = frozenset(nodes) if len(nodes) <= RESTRICTION_MEMORY_LIMIT else None
        return decision

    def _filter_unknown(
        self, pod: PodInfo, candidates: Sequence[str], now: float
    ) -> FilterDecision:
        """A pod the watch has not delivered: answered, and nothing about it kept.

        A plain pod is filtered on its request's figures (an answer changes no state;
        its bind is refused until the watch has it). A gang member is held: it cannot
        count toward a quorum before the watch says it exists. When its group already
        has members in the cache, kube-scheduler's interest is noted, so the member's
        arrival from the watch re-plans the group (`group_changed`).
        """
        if pod.group is None and pod.group_error is None:
            return self._filter_plain(pod, candidates)
        if pod.group is not None and self.snapshot.members(pod.group):
            self.groups.setdefault(pod.group, GroupState())
        return self._hold(
            candidates,
            Verdict.WAIT,
            f"pod {pod.ref} is not in gang-extender's watch cache yet; held until it is",
        )

    def _filter_known(self, pod: PodInfo, candidates: Sequence[str], now: float) -> FilterDecision:
        self.expire(now)
        if pod.group is None and pod.group_error is None:
            return self._filter_plain(pod, candidates)
        if pod.group_error is not None:
            return self._hold(candidates, Verdict.REJECT, pod.group_error)
        assert pod.group is not None
        key = pod.group
        self._remember_candidates(pod.uid, candidates)
        state = self.groups.setdefault(key, GroupState())
        spec = self.snapshot.group_spec(key)
        if spec is None:
            return self._hold(
                candidates,
                Verdict.WAIT,
                self._say(
                    state,
                    f"gang {key}: no PodGroup {key.name} and no gang-extender.io/min-available "
                    "annotation; create the PodGroup or annotate the pods",
                ),
            )
        if spec.error is not None:
            # Waiting for its spec to be fixed (or an aborted group to be released): the
            # fix plans it at once (`group_changed`), whatever the group did before.
            state.waiting = True
            return self._hold(
                candidates, Verdict.REJECT, self._say(state, f"gang {key}: {spec.error}")
            )

        plan = self.ledger.plans.get(key)
        if plan is not None:
            node = plan.placements.get(pod.uid) if pod.uid not in plan.lost else None
            if node is None or node in candidates:
                return self._planned_answer(plan, pod, candidates)
            if plan.released:
                return self._hold(
                    candidates, Verdict.WAIT, self._released_elsewhere(plan, pod, now)
                )
            if self._placeholders_on(key, {node}):
                # kube-scheduler counts the gang's own placeholder there until the
                # watch tells it the placeholder is gone; then it offers the node.
                return self._hold(
                    candidates,
                    Verdict.WAIT,
                    f"gang {key}: {pod.ref} waits for the placeholder pods on its planned "
                    f"node {node} to be deleted",
                )
            if self.unseen_nodes.unseen(node):
                return self._hold(candidates, Verdict.WAIT, self._not_seen_yet(plan, pod, node))
            self._drop(
                plan,
                f"kube-scheduler no longer offers planned node {node} for {pod.ref}",
                now,
            )
            return self._hold(candidates, Verdict.WAIT, self.groups[key].message)

        outcome = self._try_plan(key, state, spec, now, asking=pod, candidates=candidates)
        if isinstance(outcome, str):
            return self._hold(candidates, Verdict.WAIT, outcome)
        return self._planned_answer(outcome, pod, candidates)

    def _try_plan(
        self,
        key: GroupKey,
        state: GroupState,
        spec: GroupSpec,
        now: float,
        *,
        asking: PodInfo | None,
        candidates: Sequence[str] | None,
        queue: bool = True,
    ) -> Plan | str:
        """Steps 4-7 for a group: its new plan, or why it waits (also kept in `state`).

        `asking` is the member kube-scheduler is filtering, with the nodes it offers;
        None when the watch delivered a change (see `observe_pod`).

        Contained: an exception planning this gang holds this gang (`_fault`), and is
        not raised into the filter of the gang that asked, nor the queue pass that
        tried it on another's behalf. A faulted gang is not planned again until its
        members or PodGroup change.
        """
        version = self.snapshot.group_version(key)
        if state.fault is not None:
            if state.fault[0] == version:
                return state.message
            state.fault = None
        try:
            return self._plan_steps(
                key, state, spec, now, asking=asking, candidates=candidates, queue=queue
            )
        except Exception as err:  # noqa: BLE001 -- contained per gang, reported as an effect
            return self._fault(key, state, err, version)

    def _fault(self, key: GroupKey, state: GroupState, err: Exception, version: int) -> str:
        """Hold `key` with what went wrong; the service logs the traceback once (`GangFaulted`)."""
        message = self._say(
            state,
            f"gang {key}: planning failed ({type(err).__name__}: {quoted(str(err))}); "
            "held until its members or PodGroup change",
        )
        state.fault = (version, message)
        state.waiting = True
        state.shortfall_generation = None
        self.touched.add(key)
        details = "".join(traceback.format_exception(err))
        self.effects.append(GangFaulted(key, "plan", message, clip(details, 16_384)))
        return message

    def _plan_steps(
        self,
        key: GroupKey,
        state: GroupState,
        spec: GroupSpec,
        now: float,
        *,
        asking: PodInfo | None,
        candidates: Sequence[str] | None,
        queue: bool,
    ) -> Plan | str:
        """`_try_plan` itself, uncontained."""
        if now < state.retry_after:
            return state.message
        # The snapshot's members only: a pod it leaves out (another schedulerName,
        # deleting, finished) is neither counted toward the quorum nor planned, even
        # when it is the one asked about (its bind would be refused anyway).
        members = self.snapshot.members(key)
        state.rank = rank_of(key, members)
        choice = choose_members(
            members, min_member=spec.min_member, task_minimums=spec.min_task_member
        )
        if isinstance(choice, MembersMissing):
            return self._say(state, f"gang {key}: {choice}; waiting for the rest to be created")
        if self._shortfall_holds(key, state):
            return state.message
        # Queue order: every held gang ahead that can be planned now is planned first;
        # what they cannot use now is left for this one (backfill).
        ahead = self._plan_gangs_ahead(state.rank, now) if queue else []
        if self._shortfall_holds(key, state):
            return state.message
        generation = self._planning_inputs()

        free, order = self.planning_room(key)
        allowed = CurrentRestrictions(self.restrictions, self.snapshot)
        if asking is not None and candidates is not None:
            offered = self.unseen_nodes.offered_or_unseen(candidates, self.snapshot.nodes)
            asked = learnt_now(self.snapshot, allowed=frozenset(offered))
            allowed = allowed.with_asked(asking.uid, asked)
        # Bound members anchor the gang's topology domain and its nodes.
        bound = [m for m in members if m.is_bound]
        for chosen in choice.attempts:
            outcome = plan_gang(
                chosen,
                free,
                self.snapshot.nodes,
                self.policy,
                allowed=allowed,
                topology=spec.topology,
                bound=bound,
                order=order,
            )
            if isinstance(outcome, Placement):
                break
        state.behind = None
        if not isinstance(outcome, Placement):
            state.shortfall_generation = generation
            if self.preemption_enabled:
                held = self._try_preemption(key, state, spec, choice.attempts, free, allowed, now)
                if held is not None:
                    return held
            if key in self.reservations:
                return self._say(state, self._reserving_message(key))
            self._remember_shortfall(key, spec, members, state.rank.priority)
            behind = self._waiting_behind(ahead, choice.attempts, free, allowed)
            if behind is None and queue:
                behind = self.gang_ahead_of(key, members, allowed)
            if behind is not None:
                state.behind = behind.key
                return self._say(
                    state,
                    f"gang {key}: {outcome.message}; "
                    f"waiting behind {behind.key} (priority {behind.priority})",
                )
            left_out = tasks_left_out(chosen, outcome.unplaced, spec.min_task_member)
            if left_out:
                return self._say(state, f"gang {key}: {outcome.message}; short of room: {left_out}")
            return self._say(state, f"gang {key}: {outcome.message}")

        timeout = spec.schedule_timeout_seconds or self.timeouts.schedule_timeout_seconds
        plan = self._new_plan(key, members, outcome, now, deadline=now + timeout)
        self.ledger.reserve(plan)
        self.shortfalls.forget(key)
        self._keep_fence_for(plan)
        self._end_reservation(key)
        self._sync_holds(now)
        state.shortfall_generation = None
        state.waiting = False
        self._say(state, f"gang {key}: planned {len(plan.placements)} members, binding")
        self.effects.append(PlanCreated(plan))
        return plan

    def _new_plan(
        self,
        key: GroupKey,
        members: Sequence[PodInfo],
        outcome: Placement,
        now: float,
        *,
        deadline: float,
    ) -> Plan:
        """The plan of `outcome`'s placements (a plain plan and a preemptor's hold alike)."""
        by_uid = {m.uid: m for m in members}
        return Plan(
            group=key,
            plan_id=self.ledger.new_plan_id(),
            placements=dict(outcome.nodes),
            requests={uid: by_uid[uid].requests for uid in outcome.nodes},
            names={uid: by_uid[uid].ref for uid in outcome.nodes},
            created_at=now,
            deadline=deadline,
        )

    def _released_elsewhere(self, plan: Plan, pod: PodInfo, now: float) -> str:
        """A released member whose planned node kube-scheduler does not offer now.

        Its reservation is kept (the others may be bound): kube-scheduler's filters
        may reject the node for a while. A node that is gone is a loss for the gang.
        """
        node = plan.placements[pod.uid]
        if node not in self.snapshot.nodes:
            self._lose(plan, pod.uid, f"its planned node {node} is gone", now)
            return self.groups[plan.group].message
        return (
            f"gang {plan.group}: {pod.ref} keeps its reservation on {node}, which "
            "kube-scheduler does not offer now; waiting for it"
        )

    def _planned_answer(
        self, plan: Plan, pod: PodInfo, candidates: Sequence[str]
    ) -> FilterDecision:
        """The pod's planned node; a member the plan left out waits for the next one."""
        node = plan.placements.get(pod.uid)
        if node is None:
            return self._hold(
                candidates,
                Verdict.WAIT,
                f"gang {plan.group}: being placed without this member; it is scheduled after",
            )
        if node not in candidates:  # planned where kube-scheduler has not seen the node yet
            return self._hold(candidates, Verdict.WAIT, self._not_seen_yet(plan, pod, node))
        return FilterDecision(Verdict.PLANNED, [node], {}, {}, f"planned on {node}")

    @staticmethod
    def _not_seen_yet(plan: Plan, pod: PodInfo, node: str) -> str:
        return (
            f"gang {plan.group}: {pod.ref} is planned on {node}, which joined or changed "
            "just now and kube-scheduler has not offered yet; waiting for it to"
        )

    def _catch_up_unseen(self, now: float) -> None:
        """Note node news; drop the plans a node nobody was offered in its grace holds up."""
        for node in self.unseen_nodes.catch_up(self.snapshot, now):
            for plan in waiting_on(self.ledger.plans.values(), node):
                self._drop(
                    plan,
                    f"kube-scheduler offered node {node} to no pod within "
                    f"{self.unseen_nodes.grace_seconds:g}s of its joining or changing",
                    now,
                )

    def _remember_candidates(self, uid: str, candidates: Sequence[str]) -> None:
        candidates = self.unseen_nodes.offered_or_unseen(candidates, self.snapshot.nodes)
        before = self.restrictions.get(uid)
        total = len(self.snapshot.nodes)
        if len(candidates) >= total:
            self.restrictions.pop(uid, None)
        elif len(candidates) <= RESTRICTION_MEMORY_LIMIT:
            self.restrictions[uid] = learnt_now(self.snapshot, allowed=frozenset(candidates))
        elif total - len(candidates) <= RESTRICTION_MEMORY_LIMIT:
            offered = set(candidates)
            denied = frozenset(n for n in self.snapshot.nodes if n not in offered)
            self.restrictions[uid] = learnt_now(self.snapshot, denied=denied)
        else:
            self.restrictions.pop(uid, None)
        if self.restrictions.get(uid) != before:
            self.restrictions_version += 1

    def _filter_plain(self, pod: PodInfo, candidates: Sequence[str]) -> FilterDecision:
        """Candidates minus the nodes where the pod does not fit beside the plans' and the
        starving gangs' holds.

        Costs the reserved and held nodes, not the candidates, in Python: the candidates
        (every node of the cluster) are only passed through C-level `filter`.
        """
        refusals = {
            name: f"capacity on {name} is reserved for gang "
            + listing(str(g) for g in self.ledger.owners(name))
            for name in self.ledger.reserved_nodes()
            if not fits(pod.requests, self.free_after_reservations(name))
        }
        if pod.requests.get(GPU, 0) > 0:
            for name, held in self.starving_holds().items():
                if name not in refusals:
                    why = self._starving_refusal(pod, name, held)
                    if why:
                        refusals[name] = why
        if not refusals:
            return FilterDecision(Verdict.NOT_A_GANG, list(candidates), {}, {})
        nodes = list(filterfalse(refusals.__contains__, candidates))
        failed = {name: refusals[name] for name in filter(refusals.__contains__, candidates)}
        return FilterDecision(Verdict.NOT_A_GANG, nodes, failed, {})

    def _hold(self, candidates: Sequence[str], verdict: Verdict, message: str) -> FilterDecision:
        """Every candidate refused with one reason: the same string object for each node
        (no per-node copy here), cut to MAX_REASON_CHARS since kube-scheduler is sent
        it once per node."""
        message = clip(message)
        return FilterDecision(verdict, [], {}, dict.fromkeys(candidates, message), message)

    @staticmethod
    def _say(state: GroupState, message: str) -> str:
        """Keep `message` as the group's word (status, Events, holds), cut to MAX_REASON_CHARS."""
        state.message = clip(message)
        return state.message

    # ------------------------------------------------------------ prioritize
    def prioritize(self, pod: PodInfo, candidates: Collection[str]) -> dict[str, int]:
        """Every candidate's score, zeros included (the plain form of `priorities`)."""
        return self.priorities(pod).for_candidates(candidates)

    def priorities(self, pod: PodInfo) -> Priorities:
        """Prioritize's answer as the nodes that score: a planned member's node, else
        the score board's (domain/scoring.py)."""
        plan = self.ledger.plan_of(pod.uid)
        if plan is not None:
            return Priorities({plan.placements[pod.uid]: MAX_SCORE})
        return self.score_board.priorities(self.snapshot, self.ledger, self.policy)

    # --------------------------------------------------------------- expiry
    def expire(self, now: float) -> None:
        """Drop plans past their deadline, and the ones a node kube-scheduler never offered
        holds up; then bring the starvation reservations up to date."""
        self._catch_up_unseen(now)
        self._expire_plans(now)
        self.update_reservations(now)

    def _expire_plans(self, now: float) -> None:
        for plan in list(self.ledger.plans.values()):
            if now >= plan.deadline and not plan.released:
                missing = listing(sorted(plan.names[u] for u in plan.waiting_for))
                self._drop(
                    plan,
                    f"schedule timeout: {missing} did not reach bind in time",
                    now,
                    timed_out=True,
                )

    def _drop(self, plan: Plan, reason: str, now: float, *, timed_out: bool = False) -> None:
        if self.ledger.drop(plan.group) is None:
            return
        state = self.groups.setdefault(plan.group, GroupState())
        state.retry_after = now + self.timeouts.replan_backoff_seconds
        state.shortfall_generation = None
        self.shortfalls.forget(plan.group)
        state.waiting = True
        self._say(state, f"gang {plan.group}: plan dropped: {reason}")
        self.effects.append(PlanDropped(plan, reason, timed_out))

    # ---------------------------------------------------------------- drains
    def drain_touched(self) -> set[GroupKey]:
        """Groups whose hold changed outside a filter (their status is re-written)."""
        touched, self.touched = self.touched, set()
        return touched

    def reserved_placements(self) -> int:
        """Planned members not bound yet, each holding a reservation (a metrics gauge)."""
        return sum(len(p.unbound) for p in self.ledger.plans.values())

    def drain_effects(self) -> list[Effect]:
        effects, self.effects = self.effects, []
        return effects
