"""The bind barrier as a part of `GangCore`: no member of a gang is bound until all of them can be.

Pure; a part of `GangCore` (domain/gang/gang.py). The bind decision order (`bind_refusal`,
then `arrive`) is written at the top of domain/gang/gang.py. A planned member joins its
plan's barrier; the last one re-checks every planned node and releases the plan
(`arrive`), or, while the gang's placeholder pods are still on its nodes, the watch
seeing the last one gone does (`placeholder_gone`). Around the binding call a pod
is counted on its node (`assume_bound`, `binding_succeeded`). After release a
failed binding keeps the member's reservation (`bind_failed`), and a member that can
never be bound is lost (`lose`: `GangBroken`); a plan whose members are all bound
or lost is retired (`settle`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from extender.domain.cluster.ledger import Plan
from extender.domain.cluster.snapshot import fits
from extender.domain.objects.limits import listing
from extender.domain.objects.membership import SCHEDULER_NAME, GroupKey
from extender.domain.objects.model import PodInfo
from extender.domain.objects.quantity import shown_units
from extender.domain.starvation.gang_starvation import StarvationReservations
from extender.domain.state.decisions import (
    Assumption,
    BarrierReleased,
    BindDecision,
    BindVerdict,
    GangBound,
    GangBroken,
    MemberBindFailed,
)
from extender.domain.state.gang_room import GangRoom
from extender.domain.state.gang_state import GroupState, HoldReason, SharedState, say


class BindBarrier:
    """The bind checks, the barrier and what follows its release.

    Reads the room (`room`) and the starvation holds (`starvation`); given the core's
    `expire` (run before a bind is decided) and the watch's `observe_pod` and
    `group_changed` (a pod counted on its node; a partial gang re-planned).
    """

    def __init__(
        self,
        shared: SharedState,
        *,
        room: GangRoom,
        starvation: StarvationReservations,
        expire: Callable[[float], None],
        observe_pod: Callable[[PodInfo, float], None],
        group_changed: Callable[[GroupKey, float], None],
    ) -> None:
        self.shared = shared
        self.room = room
        self.starvation = starvation
        self.expire = expire
        self.observe_pod = observe_pod
        self.group_changed = group_changed
        # Per uid of a pod in the watch cache: the nodes this service's last filter
        # answer offered it (None: too many to keep). `bind_refusal` refuses a bind to
        # anything else; forgotten with the pod.
        self.offered: dict[str, frozenset[str] | None] = {}

    """The bind barrier and what happens to a plan's members after it released."""

    def bind_refusal(self, *, uid: str, namespace: str, name: str, node: str) -> str:
        """Why this service will not bind `uid` to `node` ("" when it may go on to `arrive`).

        The binding is made with the service's cluster-wide `pods/binding` right, so a
        bind must be for a pod this service scheduled: one the watch delivered under
        that name, of schedulerName gang-extender, not bound yet, and to a node its
        last filter answer offered (a held pod was offered none).
        """
        ref = f"{namespace}/{name}"
        pod = self.shared.snapshot.pods.get(uid)
        if pod is None:
            return f"refusing to bind {ref}: uid {uid} is not a pod in gang-extender's watch cache"
        if (pod.namespace, pod.name) != (namespace, name):
            return f"refusing to bind {ref}: uid {uid} is pod {pod.ref}"
        if pod.scheduler_name != SCHEDULER_NAME:
            return (
                f"refusing to bind {ref}: its schedulerName is {pod.scheduler_name!r}, "
                f"not {SCHEDULER_NAME!r}"
            )
        if pod.is_bound:
            return f"refusing to bind {ref}: it is already bound to {pod.node_name}"
        if uid not in self.offered:
            return (
                f"refusing to bind {ref}: this gang-extender never filtered it "
                "(kube-scheduler retries it with a filter first)"
            )
        offered = self.offered[uid]
        if offered is not None and node not in offered:
            said = ", ".join(sorted(offered)) or "no node"
            return f"refusing to bind {ref} to {node}: the last filter offered it {said}"
        return ""

    def arrive(self, uid: str, node: str, now: float) -> BindDecision:
        """A pod reached bind on `node`: join its gang's barrier, if it has one."""
        self.expire(now)
        pod = self.shared.snapshot.pods.get(uid)
        plan = self.shared.ledger.plan_of(uid)
        if plan is None:
            if pod is not None and pod.group is not None:
                state = self.shared.groups.get(pod.group)
                reason = state.message if state else "no plan"
                return BindDecision(
                    BindVerdict.ERROR,
                    group=pod.group,
                    message=f"gang {pod.group} has no plan for {pod.ref} ({reason}); retrying",
                )
            # A gang may have reserved this node since the plain pod passed filter.
            if (
                pod is not None
                and self.shared.ledger.reserved(node)
                and not fits(pod.requests, self.room.free_after_reservations(node))
            ):
                owners = ", ".join(str(g) for g in self.shared.ledger.owners(node))
                return BindDecision(
                    BindVerdict.ERROR,
                    message=f"capacity on {node} was reserved for gang {owners} after "
                    f"{pod.ref} passed filter; retrying",
                )
            held = self.starvation.starving_holds().get(node) if pod is not None else None
            if (
                pod is not None
                and held is not None
                and self.starvation.starving_refusal(pod, node, held)
            ):
                return BindDecision(
                    BindVerdict.ERROR,
                    message=f"{self.starvation.starving_refusal(pod, node, held)} (reserved after "
                    f"{pod.ref} passed filter); retrying",
                )
            return BindDecision(BindVerdict.BIND_NOW)
        planned = plan.placements[uid]
        if plan.released:
            return self._arrive_after_release(plan, uid, node)
        if planned != node:
            self.shared.drop(
                plan, f"{plan.names[uid]} reached bind on {node}, planned {planned}", now
            )
            return BindDecision(
                BindVerdict.ERROR, plan.plan_id, plan.group, self.shared.groups[plan.group].message
            )
        plan.arrived.add(uid)
        if plan.barrier_started is None:
            plan.barrier_started = now
        if not plan.barrier_complete:
            return BindDecision(BindVerdict.WAIT, plan.plan_id, plan.group)
        if self.starvation.placeholders_on(plan.group, set(plan.placements.values())):
            # Released when the watch saw them deleted (`placeholder_gone`).
            return BindDecision(BindVerdict.WAIT, plan.plan_id, plan.group)
        short = self._short_nodes(plan)
        if short:
            self.shared.drop(plan, f"{short} before the gang was bound; re-planning", now)
            return BindDecision(
                BindVerdict.ERROR, plan.plan_id, plan.group, self.shared.groups[plan.group].message
            )
        plan.released = True
        return BindDecision(BindVerdict.RELEASE, plan.plan_id, plan.group)

    def _arrive_after_release(self, plan: Plan, uid: str, node: str) -> BindDecision:
        """A released member back at bind (its binding failed): its planned node, if it has room."""
        planned = plan.placements[uid]
        if planned != node:
            return BindDecision(
                BindVerdict.ERROR,
                plan.plan_id,
                plan.group,
                f"gang {plan.group}: {plan.names[uid]} is reserved on {planned}, not {node}; "
                "retrying",
            )
        short = self._short_nodes(plan, only=uid)
        if short:
            return BindDecision(
                BindVerdict.ERROR,
                plan.plan_id,
                plan.group,
                f"gang {plan.group}: {short}; {plan.names[uid]} keeps its reservation and "
                "waits for room",
            )
        plan.arrived.add(uid)
        return BindDecision(BindVerdict.RELEASE, plan.plan_id, plan.group)

    def _short_nodes(self, plan: Plan, only: str | None = None) -> str:
        """Why a node of the plan's unbound members (or of `only`) lacks room, "" if none does.

        The snapshot counts every bound pod, whoever bound it, and the ledger every
        reservation, this plan's included: a negative remainder means something
        outside the plans (the default scheduler, a pod bound by hand) took the room.
        """
        members = [only] if only is not None else sorted(plan.unbound)
        for node in sorted({plan.placements[uid] for uid in members}):
            if node not in self.shared.snapshot.nodes:
                return f"planned node {node} is gone"
            free = self.room.free_after_reservations(node)
            wanted = {
                name
                for uid in plan.unbound
                if plan.placements[uid] == node
                for name, value in plan.requests[uid].items()
                if value > 0
            }
            over = sorted(name for name in wanted if free.get(name, 0) < 0)
            if over:
                return (
                    f"node {node} has no room left for its reservations ({', '.join(over)} "
                    f"short by {', '.join(shown_units(n, -free.get(n, 0)) for n in over)}): pods bound "
                    "outside the plan took it"
                )
        return ""

    def placeholder_gone(self, group: GroupKey, now: float) -> None:
        """A placeholder of `group` was deleted: release a complete barrier waiting for it."""
        plan = self.shared.ledger.plans.get(group)
        if (
            plan is None
            or plan.released
            or plan.barrier_started is None
            or not plan.barrier_complete
            or self.starvation.placeholders_on(group, set(plan.placements.values()))
        ):
            return
        short = self._short_nodes(plan)
        if short:
            self.shared.drop(plan, f"{short} before the gang was bound; re-planning", now)
            return
        plan.released = True
        self.shared.effects.append(BarrierReleased(plan))

    def barrier_deadline(self, plan_id: int, group: GroupKey) -> float | None:
        plan = self.shared.ledger.plans.get(group)
        if plan is None or plan.plan_id != plan_id or plan.barrier_started is None:
            return None
        return min(
            plan.deadline, plan.barrier_started + self.shared.timeouts.bind_barrier_timeout_seconds
        )

    def barrier_state(self, plan_id: int, group: GroupKey) -> BindVerdict:
        """RELEASE when the barrier of that plan is complete, ERROR when the plan is gone."""
        plan = self.shared.ledger.plans.get(group)
        if plan is None or plan.plan_id != plan_id:
            return BindVerdict.ERROR
        return BindVerdict.RELEASE if plan.released else BindVerdict.WAIT

    def barrier_timed_out(self, plan_id: int, group: GroupKey, now: float) -> str:
        plan = self.shared.ledger.plans.get(group)
        if plan is not None and plan.plan_id == plan_id and not plan.released:
            missing = listing(sorted(plan.names[u] for u in plan.waiting_for))
            self.shared.drop(
                plan, f"bind barrier timed out waiting for {missing}", now, timed_out=True
            )
        state = self.shared.groups.get(group)
        return state.message if state else "bind barrier timed out"

    def dropped_plan_message(self, plan_id: int, group: GroupKey) -> str:
        """What to tell a member whose barrier's plan is gone (`barrier_state` ERROR)."""
        state = self.shared.groups.get(group)
        return (state.message if state else "") or f"gang {group}: plan {plan_id} was dropped"

    # ------------------------------------------- counting a pod on its node

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
        pod = self.shared.snapshot.pods.get(uid)
        if pod is None or pod.is_bound:
            return None
        return Assumption(before=pod, assumed=self._count_on_node(pod, node, now))

    def undo_assumption(self, assumption: Assumption, now: float) -> bool:
        """Give the room back after the binding failed, only while the assumption is ours.

        The watch may have said more about the pod in the meantime; then its word
        stands. True when undone.
        """
        if self.shared.snapshot.pods.get(assumption.before.uid) is not assumption.assumed:
            return False
        self.observe_pod(assumption.before, now)
        return True

    def binding_succeeded(self, uid: str, node: str, now: float) -> bool:
        """Count a planned member on `node` once its binding succeeded; True if counted.

        Now rather than when the watch catches up, so the next filter does not offer
        the same room twice; not before the call (see `assume_bound`). A pod already
        bound (the watch was first, or a plain pod's assumption) is left alone. Either
        way the binding is remembered until the watch names the node
        (`SharedState.confirmed_bindings`).
        """
        pod = self.shared.snapshot.pods.get(uid)
        if pod is None:
            return False
        counted = not pod.is_bound
        if counted:
            self._count_on_node(pod, node, now)
        # After counting: the count's own copy names the node and would end it.
        self.shared.confirmed_bindings[uid] = node
        return counted

    def _count_on_node(self, pod: PodInfo, node: str, now: float) -> PodInfo:
        """Record `pod` as bound to `node`; the recorded copy."""
        bound = replace(pod, node_name=node)
        self.observe_pod(bound, now)
        return bound

    # ----------------------------------------------------- after release

    def bind_failed(self, uid: str, reason: str, now: float, *, gone: bool = False) -> None:
        """The binding call failed for good (the binder retried what was transient).

        Before release nothing of the plan is bound: drop it, the gang is re-planned.
        After release the others may be bound: the member keeps its reservation and
        kube-scheduler retries it onto its planned node (`MemberBindFailed`), unless
        it is `gone` (deleted or re-created): then the gang lost it (`GangBroken`).
        """
        plan = self.shared.ledger.plan_of(uid)
        if plan is None:
            return
        if not plan.released:
            self.shared.drop(plan, f"binding {plan.names[uid]} failed: {reason}", now)
            return
        if gone:
            self.lose(plan, uid, f"binding failed: {reason}", now)
            return
        plan.arrived.discard(uid)
        state = self.shared.groups.setdefault(plan.group, GroupState())
        say(
            state,
            HoldReason.BIND_FAILED,
            f"gang {plan.group}: binding {plan.names[uid]} failed ({reason}); it keeps its "
            f"reservation on {plan.placements[uid]} and is retried",
        )
        self.shared.effects.append(MemberBindFailed(plan, plan.names[uid], reason))

    def lose(self, plan: Plan, uid: str, cause: str, now: float) -> None:
        """A released member can never be bound: record the partial gang, free its room."""
        first = not plan.lost
        plan.lost[uid] = cause
        plan.arrived.discard(uid)
        self.shared.ledger.forget_member(uid)
        state = self.shared.groups.setdefault(plan.group, GroupState())
        bound = len(plan.bound - set(plan.lost))
        message = say(
            state,
            HoldReason.PARTIAL,
            f"gang {plan.group} is partial: {plan.names[uid]} cannot be bound ({cause}); "
            f"{bound}/{len(plan.placements)} planned members bound",
        )
        self.shared.effects.append(
            GangBroken(plan, plan.names[uid], cause, bound=bound, first=first, message=message)
        )
        self.settle(plan, now)

    def settle(self, plan: Plan, now: float) -> None:
        """Retire a plan whose every member is bound or lost; GangBound when whole."""
        if not plan.fully_bound or self.shared.ledger.plans.get(plan.group) is not plan:
            return
        self.shared.ledger.drop(plan.group)
        state = self.shared.groups.setdefault(plan.group, GroupState())
        if plan.lost:
            # The lifecycle policy decides what a partial gang becomes; until then the
            # group is re-planned for members created to replace the lost ones.
            state.waiting = True
            state.shortfall_generation = None
            self.group_changed(plan.group, now)
            return
        say(
            state,
            HoldReason.BOUND,
            f"gang {plan.group}: all {len(plan.placements)} planned members bound",
        )
        self.shared.effects.append(GangBound(plan))

    def member_gone(self, plan: Plan, uid: str, reason: str, now: float) -> None:
        """An unbound planned member was deleted: before release the plan is dropped
        (nothing bound), after it the gang lost the member."""
        if plan.released:
            self.lose(plan, uid, reason, now)
        else:
            self.shared.drop(plan, reason, now)

    def bound_member_gone(self, pod: PodInfo, reason: str, now: float) -> None:
        """A bound member went away while its plan still binds the others: the gang
        is partial before it ever ran whole. (After the plan settled, a member that
        goes away is the lifecycle policy's business, not the binding's.)"""
        plan = self.shared.ledger.plans.get(pod.group) if pod.group is not None else None
        if plan is not None and pod.uid in plan.bound and pod.uid not in plan.lost:
            self.lose(plan, pod.uid, reason, now)
