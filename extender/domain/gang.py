"""Why a pod was held, planned or bound: the gang scheduling decisions, in one place.

`GangCore` owns the snapshot and the ledger and answers the extender's three
verbs with a core-owned verdict; the HTTP routes only translate it. Time is
passed in (`now`), side effects go out as `Effect` records the service drains
(annotate planned members so kube-scheduler retries them, write status, emit
Events), so every decision here is deterministic and testable without a cluster.

Filter decision order for a pod:
 1. No group -> NOT_A_GANG: any candidate it fits on once gang reservations are
    taken out.
 2. Group misdeclared (two groups, members disagree on size, bad PodGroup) -> REJECT.
 3. Group has a plan that includes the pod -> PLANNED on its node (if kube-scheduler
    still offers that node; else the plan is dropped and the gang waits).
 4. Group backing off after a dropped plan, or fewer than minMember members -> WAIT.
 5. Nothing changed since the last failed attempt -> WAIT (memoised shortfall).
 6. Plan every unbound member (or, failing that, just enough to reach minMember)
    on capacity free of bound pods and other gangs' reservations -> PLANNED, or
    WAIT with what is missing.

Steps 4-6 also run when the watch delivers a change to a held group
(`group_changed`): kube-scheduler retries held members only on an event, and the
plan's annotations are one.

Filter and prioritize ask about a pod by its API object (`asked_about`): our
copy when the watch delivered it, else the request's, recorded unless it claims
a node (only the watch says what holds capacity).

Bind (`arrive`): a planned member joins its plan's barrier; a member without a
plan is refused; a plain pod is bound at once unless a gang reserved the room on
its node after it passed filter (then refused, and kube-scheduler retries it).
Around the binding call: a plain pod is counted on its node before the call
(`assume_bound`, undone by `undo_assumption` if the binding fails), a planned
member after it (`binding_succeeded`); a failed binding drops the member's plan
(`bind_failed`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any

from extender.domain.ledger import Ledger, Plan
from extender.domain.membership import GroupKey
from extender.domain.model import GroupSpec, PodInfo, Resources
from extender.domain.planner import NodeRestriction, Placement, plan_gang
from extender.domain.policy import Policy, Strategy
from extender.domain.quantity import GPU
from extender.domain.recovery import Recovery, recover_plans
from extender.domain.snapshot import ClusterSnapshot, fits

MAX_SCORE = 10
# Remember what kube-scheduler's filters said about a member only when it is this
# many node names or fewer (allow- or deny-list), to bound memory on big clusters.
RESTRICTION_MEMORY_LIMIT = 256


class Verdict(Enum):
    NOT_A_GANG = "not-a-gang"
    WAIT = "wait"
    PLANNED = "planned"
    REJECT = "reject"


@dataclass(frozen=True)
class FilterDecision:
    verdict: Verdict
    nodes: list[str]  # nodes the pod may go to
    failed: dict[str, str]  # node -> reason, resolvable (plain pods vs reservations)
    unresolvable: dict[str, str]  # node -> reason, preemption cannot help
    message: str = ""


class BindVerdict(Enum):
    BIND_NOW = "bind-now"  # not part of a plan: bind straight away
    WAIT = "wait"  # inside the barrier: wait for the rest of the gang
    RELEASE = "release"  # last member arrived: everyone may bind
    ERROR = "error"  # refuse: plan gone or node differs


@dataclass(frozen=True)
class BindDecision:
    verdict: BindVerdict
    plan_id: int | None = None
    group: GroupKey | None = None
    message: str = ""


@dataclass(frozen=True)
class Assumption:
    """A plain pod counted on a node before its binding call returned: what to undo."""

    before: PodInfo  # the pod as it was
    assumed: PodInfo  # the copy recorded as bound on the node


# ---- effects the service carries out ----
@dataclass(frozen=True)
class PlanCreated:
    plan: Plan


@dataclass(frozen=True)
class PlanDropped:
    plan: Plan
    reason: str
    timed_out: bool = False


@dataclass(frozen=True)
class GangBound:
    plan: Plan


Effect = PlanCreated | PlanDropped | GangBound


@dataclass
class GroupState:
    message: str = ""
    retry_after: float = 0.0
    shortfall_generation: tuple[int, int] | None = None
    first_seen: float | None = None
    waiting: bool = True


@dataclass
class Timeouts:
    schedule_timeout_seconds: float
    bind_barrier_timeout_seconds: float
    replan_backoff_seconds: float


@dataclass
class GangCore:
    policy: Policy
    timeouts: Timeouts
    snapshot: ClusterSnapshot = field(default_factory=ClusterSnapshot)
    ledger: Ledger = field(default_factory=Ledger)
    groups: dict[GroupKey, GroupState] = field(default_factory=dict)
    effects: list[Effect] = field(default_factory=list)
    # Per member uid: nodes kube-scheduler last offered (or refused) it, so a plan
    # avoids nodes the scheduler's own filters reject (affinity, ports, ...).
    restrictions: dict[str, NodeRestriction] = field(default_factory=dict)
    # Node -> prioritize score, kept current by `_refresh_node_scores`; 0 scores are absent.
    _node_scores: dict[str, int] = field(default_factory=dict)

    # ------------------------------------------------------------- requests
    def asked_about(self, pod: Mapping[str, Any]) -> PodInfo:
        """The scheduler's copy of the pod, or ours when we have it (ours carries plan notes)."""
        # Look the pod up by the uid PodInfo.from_api would give it, and parse only
        # a pod the cache has not seen: filter and prioritize come for every pod.
        cached = self.snapshot.pods.get(pod["metadata"]["uid"])
        if cached is not None:
            return cached
        info = PodInfo.from_api(pod)
        # A pod the watch has not delivered yet is recorded, so a gang member known only
        # from a request still joins its group's quorum and is refused a lone bind. One
        # that claims a node is not: kube-scheduler only asks about pods it is placing,
        # and only the watch may say what holds capacity.
        if not info.is_bound:
            self.snapshot.upsert_pod(info)
        return info

    # ------------------------------------------------------------------ filter
    def filter(self, pod: PodInfo, candidates: Sequence[str], now: float) -> FilterDecision:
        self.expire(now)
        if pod.group is None and pod.group_error is None:
            return self._filter_plain(pod, candidates)
        if pod.group_error is not None:
            return self._hold(candidates, Verdict.REJECT, pod.group_error)
        assert pod.group is not None
        key = pod.group
        self._remember_candidates(pod.uid, candidates)
        state = self.groups.setdefault(key, GroupState(first_seen=now))
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
            return self._hold(
                candidates, Verdict.REJECT, self._say(state, f"gang {key}: {spec.error}")
            )

        plan = self.ledger.plans.get(key)
        if plan is not None:
            node = plan.placements.get(pod.uid)
            if node is None or node in candidates:
                return self._planned_answer(plan, pod, candidates)
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
    ) -> Plan | str:
        """Steps 4-6 for a group: its new plan, or why it waits (also kept in `state`).

        `asking` is the member kube-scheduler is filtering, with the nodes it offers;
        None when the watch delivered a change (see `observe_pod`).
        """
        if now < state.retry_after:
            return state.message
        members = self.snapshot.members(key)
        if asking is not None and asking.uid not in {m.uid for m in members}:
            members = sorted([*members, asking], key=lambda p: (p.created, p.name))
        bound = [m for m in members if m.is_bound]
        if len(members) < spec.min_member:
            return self._say(
                state,
                f"gang {key}: {len(members)}/{spec.min_member} members exist; "
                "waiting for the rest to be created",
            )
        generation = (self.snapshot.generation, self.ledger.generation)
        if state.shortfall_generation == generation:
            return state.message

        unbound = [m for m in members if not m.is_bound]
        need = max(1, spec.min_member - len(bound))
        free = self.free_for_planning()
        allowed = dict(self.restrictions)
        if asking is not None and candidates is not None:
            allowed[asking.uid] = NodeRestriction(allowed=frozenset(candidates))
        outcome = plan_gang(unbound, free, self.snapshot.nodes, self.policy, allowed=allowed)
        if not isinstance(outcome, Placement) and len(unbound) > need:
            outcome = plan_gang(
                unbound[:need], free, self.snapshot.nodes, self.policy, allowed=allowed
            )
        if not isinstance(outcome, Placement):
            state.shortfall_generation = generation
            return self._say(state, f"gang {key}: {outcome.message}")

        timeout = spec.schedule_timeout_seconds or self.timeouts.schedule_timeout_seconds
        members_by_uid = {m.uid: m for m in unbound}
        plan = Plan(
            group=key,
            plan_id=self.ledger.new_plan_id(),
            placements=dict(outcome.nodes),
            requests={uid: members_by_uid[uid].requests for uid in outcome.nodes},
            names={uid: members_by_uid[uid].ref for uid in outcome.nodes},
            created_at=now,
            deadline=now + timeout,
        )
        self.ledger.reserve(plan)
        state.shortfall_generation = None
        state.waiting = False
        self._say(state, f"gang {key}: planned {len(plan.placements)} members, binding")
        self.effects.append(PlanCreated(plan))
        return plan

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
        return FilterDecision(Verdict.PLANNED, [node], {}, {}, f"planned on {node}")

    def _remember_candidates(self, uid: str, candidates: Sequence[str]) -> None:
        total = len(self.snapshot.nodes)
        if len(candidates) >= total:
            self.restrictions.pop(uid, None)
        elif len(candidates) <= RESTRICTION_MEMORY_LIMIT:
            self.restrictions[uid] = NodeRestriction(allowed=frozenset(candidates))
        elif total - len(candidates) <= RESTRICTION_MEMORY_LIMIT:
            offered = set(candidates)
            denied = frozenset(n for n in self.snapshot.nodes if n not in offered)
            self.restrictions[uid] = NodeRestriction(denied=denied)
        else:
            self.restrictions.pop(uid, None)

    def _filter_plain(self, pod: PodInfo, candidates: Sequence[str]) -> FilterDecision:
        reserved = set(self.ledger.reserved_nodes())
        if not reserved:
            return FilterDecision(Verdict.NOT_A_GANG, list(candidates), {}, {})
        nodes: list[str] = []
        failed: dict[str, str] = {}
        for name in candidates:
            if name in reserved and not fits(pod.requests, self.free_after_reservations(name)):
                owners = ", ".join(str(g) for g in self.ledger.owners(name))
                failed[name] = f"capacity on {name} is reserved for gang {owners}"
            else:
                nodes.append(name)
        return FilterDecision(Verdict.NOT_A_GANG, nodes, failed, {})

    def _hold(self, candidates: Sequence[str], verdict: Verdict, message: str) -> FilterDecision:
        return FilterDecision(verdict, [], {}, dict.fromkeys(candidates, message), message)

    @staticmethod
    def _say(state: GroupState, message: str) -> str:
        state.message = message
        return message

    # -------------------------------------------------------------- capacity
    def free_after_reservations(self, node: str) -> Resources:
        free = self.snapshot.free(node)
        for name, value in self.ledger.reserved(node).items():
            free[name] = free.get(name, 0) - value
        return free

    def free_for_planning(self) -> dict[str, Resources]:
        return {name: self.free_after_reservations(name) for name in self.snapshot.nodes}

    # ------------------------------------------------------------ prioritize
    def prioritize(self, pod: PodInfo, candidates: Collection[str]) -> dict[str, int]:
        plan = self.ledger.plan_of(pod.uid)
        if plan is not None:
            planned = plan.placements[pod.uid]
            return {n: MAX_SCORE if n == planned else 0 for n in candidates}
        return self._scores(candidates)

    def _scores(self, candidates: Collection[str]) -> dict[str, int]:
        """Each node's score from the board; a node without GPUs (or unknown) scores 0."""
        board = self._refresh_node_scores()
        return {node: board.get(node, 0) for node in candidates}

    def _refresh_node_scores(self) -> dict[str, int]:
        """Rescore the nodes whose capacity or reservations changed since the last call.

        Why a board: prioritize comes for every pod with every feasible node (5,000
        on a large cluster), while a bind changes one node; scoring all of them per
        request was most of prioritize's cost.
        """
        changed = self.snapshot.capacity_changed | self.ledger.capacity_changed
        self.snapshot.capacity_changed.clear()
        self.ledger.capacity_changed.clear()
        board = self._node_scores
        for node in changed:
            score = self._node_score(node)
            if score:
                board[node] = score
            else:
                board.pop(node, None)
        return board

    def _node_score(self, node: str) -> int:
        """GPU fill after bound pods and reservations, 0..MAX_SCORE (spread: inverted)."""
        info = self.snapshot.nodes.get(node)
        total = info.allocatable.get(GPU, 0) if info else 0
        if total <= 0:
            return 0
        free = total - self.snapshot.used(node).get(GPU, 0) - self.ledger.reserved(node).get(GPU, 0)
        used_fraction = (total - max(0, free)) / total
        if self.policy.strategy is Strategy.SPREAD:
            used_fraction = 1 - used_fraction
        return round(used_fraction * MAX_SCORE)

    # ------------------------------------------------------------------ bind
    def arrive(self, uid: str, node: str, now: float) -> BindDecision:
        """A pod reached bind on `node`: join its gang's barrier, if it has one."""
        self.expire(now)
        pod = self.snapshot.pods.get(uid)
        plan = self.ledger.plan_of(uid)
        if plan is None:
            if pod is not None and pod.group is not None:
                state = self.groups.get(pod.group)
                reason = state.message if state else "no plan"
                return BindDecision(
                    BindVerdict.ERROR,
                    group=pod.group,
                    message=f"gang {pod.group} has no plan for {pod.ref} ({reason}); retrying",
                )
            # A gang may have reserved this node since the plain pod passed filter.
            if (
                pod is not None
                and self.ledger.reserved(node)
                and not fits(pod.requests, self.free_after_reservations(node))
            ):
                owners = ", ".join(str(g) for g in self.ledger.owners(node))
                return BindDecision(
                    BindVerdict.ERROR,
                    message=f"capacity on {node} was reserved for gang {owners} after "
                    f"{pod.ref} passed filter; retrying",
                )
            return BindDecision(BindVerdict.BIND_NOW)
        planned = plan.placements[uid]
        if planned != node:
            self._drop(plan, f"{plan.names[uid]} reached bind on {node}, planned {planned}", now)
            return BindDecision(
                BindVerdict.ERROR, plan.plan_id, plan.group, self.groups[plan.group].message
            )
        plan.arrived[uid] = node
        if plan.barrier_started is None:
            plan.barrier_started = now
        if plan.barrier_complete:
            return BindDecision(BindVerdict.RELEASE, plan.plan_id, plan.group)
        return BindDecision(BindVerdict.WAIT, plan.plan_id, plan.group)

    def barrier_deadline(self, plan_id: int, group: GroupKey) -> float | None:
        plan = self.ledger.plans.get(group)
        if plan is None or plan.plan_id != plan_id or plan.barrier_started is None:
            return None
        return min(plan.deadline, plan.barrier_started + self.timeouts.bind_barrier_timeout_seconds)

    def barrier_state(self, plan_id: int, group: GroupKey) -> BindVerdict:
        """RELEASE when the barrier of that plan is complete, ERROR when the plan is gone."""
        plan = self.ledger.plans.get(group)
        if plan is None or plan.plan_id != plan_id:
            return BindVerdict.ERROR
        return BindVerdict.RELEASE if plan.barrier_complete else BindVerdict.WAIT

    def barrier_timed_out(self, plan_id: int, group: GroupKey, now: float) -> str:
        plan = self.ledger.plans.get(group)
        if plan is not None and plan.plan_id == plan_id and not plan.barrier_complete:
            missing = ", ".join(sorted(plan.names[u] for u in plan.waiting_for))
            self._drop(plan, f"bind barrier timed out waiting for {missing}", now, timed_out=True)
        state = self.groups.get(group)
        return state.message if state else "bind barrier timed out"

    def dropped_plan_message(self, plan_id: int, group: GroupKey) -> str:
        """What to tell a member whose barrier's plan is gone (`barrier_state` ERROR)."""
        state = self.groups.get(group)
        return (state.message if state else "") or f"gang {group}: plan {plan_id} was dropped"

    def assume_bound(self, uid: str, node: str, now: float) -> Assumption | None:
        """Count a plain pod on `node` before its binding call; None if unknown or bound.

        Why before: a pod outside any plan is counted before the call returns, as
        kube-scheduler "assumes" a pod, and undone if the binding fails
        (`undo_assumption`). Two such binds can be in flight at once, each checked
        against the gangs' reservations (`arrive`); counting a pod only afterwards let
        both take the last room beside a reservation. A planned member is counted
        after the call (`binding_succeeded`): counting it releases its reservation,
        and a failed binding must still find and drop its plan (`bind_failed`).
        """
        pod = self.snapshot.pods.get(uid)
        if pod is None or pod.is_bound:
            return None
        return Assumption(before=pod, assumed=self._count_on_node(pod, node, now))

    def undo_assumption(self, assumption: Assumption, now: float) -> bool:
        """Give the room back after the binding failed, only while the assumption is ours.

        The watch may have said more about the pod in the meantime; then its word
        stands. True when undone.
        """
        if self.snapshot.pods.get(assumption.before.uid) is not assumption.assumed:
            return False
        self.observe_pod(assumption.before, now)
        return True

    def binding_succeeded(self, uid: str, node: str, now: float) -> bool:
        """Count a planned member on `node` once its binding succeeded; True if counted.

        Now rather than when the watch catches up, so the next filter does not offer
        the same room twice; not before the call (see `assume_bound`). A pod already
        bound (the watch was first) is left alone.
        """
        pod = self.snapshot.pods.get(uid)
        if pod is None or pod.is_bound:
            return False
        self._count_on_node(pod, node, now)
        return True

    def _count_on_node(self, pod: PodInfo, node: str, now: float) -> PodInfo:
        """Record `pod` as bound to `node`; the recorded copy."""
        bound = replace(pod, node_name=node)
        self.observe_pod(bound, now)
        return bound

    def bind_failed(self, uid: str, reason: str, now: float) -> None:
        """The binding call failed: drop the member's plan (its gang is re-planned)."""
        plan = self.ledger.plan_of(uid)
        if plan is not None:
            self._drop(plan, f"binding {plan.names[uid]} failed: {reason}", now)

    # --------------------------------------------------------- observations
    def observe_pod(self, pod: PodInfo, now: float) -> None:
        """The watch saw a pod: update the snapshot and settle plans it completes."""
        self.snapshot.upsert_pod(pod)
        plan = self.ledger.plan_of(pod.uid)
        if plan is None:
            if pod.group is not None and pod.is_active_member:
                self.group_changed(pod.group, now)
            return
        if pod.deleting or pod.phase in ("Succeeded", "Failed"):
            self._drop(plan, f"member {pod.ref} is gone", now)
            return
        if pod.is_bound:
            self.ledger.mark_bound(pod.uid)
            if plan.fully_bound:
                self.ledger.drop(plan.group)
                state = self.groups.setdefault(plan.group, GroupState())
                self._say(
                    state, f"gang {plan.group}: all {len(plan.placements)} planned members bound"
                )
                self.effects.append(GangBound(plan))

    def group_changed(self, key: GroupKey, now: float) -> None:
        """A member or the PodGroup of `key` changed: plan now if that completes a held gang.

        Why not wait for filter: kube-scheduler parks held members until some event,
        and a member it never filters (created with a scheduling gate, as Kueue does)
        sends none. The plan's annotations on the members are that event. Only groups
        kube-scheduler has asked about are planned here.
        """
        state = self.groups.get(key)
        if state is None or not state.waiting or key in self.ledger.plans:
            return
        spec = self.snapshot.group_spec(key)
        if spec is None or spec.error is not None:
            return
        self._try_plan(key, state, spec, now, asking=None, candidates=None)

    def forget_pod(self, uid: str, now: float) -> None:
        pod = self.snapshot.delete_pod(uid)
        self.restrictions.pop(uid, None)
        plan = self.ledger.plan_of(uid)
        if plan is not None:
            self._drop(plan, f"member {plan.names[uid]} was deleted", now)
        if (
            pod is not None
            and pod.group is not None
            and not self.snapshot.members(pod.group)
            and self.snapshot.podgroup(pod.group) is None
        ):
            self.groups.pop(pod.group, None)

    # --------------------------------------------------------------- expiry
    def expire(self, now: float) -> None:
        for plan in list(self.ledger.plans.values()):
            if now >= plan.deadline and not plan.barrier_complete:
                missing = ", ".join(sorted(plan.names[u] for u in plan.waiting_for))
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
        state.waiting = True
        self._say(state, f"gang {plan.group}: plan dropped: {reason}")
        self.effects.append(PlanDropped(plan, reason, timed_out))

    # ------------------------------------------------------------- failover
    def recover(self, now: float) -> Recovery:
        """Reserve the plans the members' planned-node annotations record (domain/recovery.py).

        Called when this replica becomes the one writer, before it reports Ready. No
        effect is emitted: the annotations are already on the members.
        """
        reserved = {node: self.ledger.reserved(node) for node in self.ledger.reserved_nodes()}
        found = recover_plans(self.snapshot, reserved=reserved, planned=set(self.ledger.plans))
        for recovered in found.plans:
            key = recovered.group
            spec = self.snapshot.group_spec(key)
            timeout = (
                spec.schedule_timeout_seconds if spec is not None else None
            ) or self.timeouts.schedule_timeout_seconds
            pods = {uid: self.snapshot.pods[uid] for uid in recovered.placements}
            self.ledger.reserve(
                Plan(
                    group=key,
                    plan_id=self.ledger.new_plan_id(),
                    placements=dict(recovered.placements),
                    requests={uid: pod.requests for uid, pod in pods.items()},
                    names={uid: pod.ref for uid, pod in pods.items()},
                    created_at=now,
                    deadline=now + timeout,
                )
            )
            state = self.groups.setdefault(key, GroupState(first_seen=now))
            state.waiting = False
            state.shortfall_generation = None
            self._say(state, f"gang {key}: plan of {len(pods)} members recovered, binding")
        return found

    def stand_down(self, now: float) -> None:
        """No longer the writer: drop every plan (barrier waiters are refused).

        The PlanDropped effects wake the waiters; their API writes are skipped, since
        this replica is not the leader: the annotations stay for the new one.
        """
        for plan in list(self.ledger.plans.values()):
            self._drop(plan, "this replica is no longer the leader", now)

    def reserved_placements(self) -> int:
        """Planned members not bound yet, each holding a reservation (a metrics gauge)."""
        return sum(len(p.placements) - len(p.bound) for p in self.ledger.plans.values())

    def drain_effects(self) -> list[Effect]:
        effects, self.effects = self.effects, []
        return effects
