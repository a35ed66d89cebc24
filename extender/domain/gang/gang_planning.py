"""Steps 4-8 of the filter for one gang: plan it now, or say why it waits.

Pure; a part of `GangCore` (domain/gang/gang.py, where the decision order is written).
Backing off, short of members (4), known not to fit (5, the room's memo), after the
held gangs ahead (6, the queue), planned on the room free of bound pods, other plans
and starving gangs' holds (7), else preempting (8) or held with why (`HoldReason`:
reserving, behind a gang, no room). The filter runs it for the member kube-scheduler
asks about (`try_plan`); the queue, the starvation check and the watch are given
`plan_held`, the same steps with no pod asking.
"""

from __future__ import annotations

from collections.abc import Sequence

from extender.domain.cluster.ledger import Plan
from extender.domain.objects.membership import GroupKey
from extender.domain.objects.model import GroupSpec, PodInfo
from extender.domain.planning.planner import Placement, plan_gang
from extender.domain.planning.queue import rank_of
from extender.domain.planning.restrictions import CurrentRestrictions, learnt_now
from extender.domain.planning.selection import MembersMissing, choose_members, tasks_left_out
from extender.domain.preemption.gang_preemption import GangPreemption
from extender.domain.queue.gang_admission import ADMISSION_WINDOW_MEMBERS, admission_window_full
from extender.domain.queue.gang_queue import QueueOrder
from extender.domain.starvation.gang_starvation import StarvationReservations
from extender.domain.state.decisions import PlanCreated
from extender.domain.state.gang_room import GangRoom
from extender.domain.state.gang_state import (
    GroupState,
    HoldReason,
    SharedState,
    members_missing_message,
    say,
)


class GangPlanning:
    """The filter's steps 4-8 for one gang, over the room, the queue, the starvation
    reservations and preemption (each a part of its own)."""

    def __init__(
        self,
        shared: SharedState,
        *,
        room: GangRoom,
        queue: QueueOrder,
        starvation: StarvationReservations,
        preemption: GangPreemption,
    ) -> None:
        self.shared = shared
        self.room = room
        self.queue = queue
        self.starvation = starvation
        self.preemption = preemption

    def try_plan(
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

        Contained: an exception planning this gang holds this gang (`SharedState.fault`), and is
        not raised into the filter of the gang that asked, nor the queue pass that
        tried it on another's behalf. A faulted gang is not planned again until its
        members or PodGroup change.
        """
        version = self.shared.snapshot.group_version(key)
        if state.fault is not None:
            if state.fault[0] == version:
                return state.message
            state.fault = None
        try:
            return self._steps(
                key, state, spec, now, asking=asking, candidates=candidates, queue=queue
            )
        except Exception as err:  # noqa: BLE001 -- contained per gang, reported as an effect
            return self.shared.fault(key, state, err, version)

    def plan_held(
        self, key: GroupKey, state: GroupState, spec: GroupSpec, now: float, *, queue: bool
    ) -> Plan | str:
        """`try_plan` with no pod asking: what the queue, the starvation check and the
        watch are given (`gang_state.PlanGroup`)."""
        return self.try_plan(key, state, spec, now, asking=None, candidates=None, queue=queue)

    def _steps(
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
        """`try_plan` itself, uncontained."""
        if now < state.retry_after:
            return state.message
        # The snapshot's members only: a pod it leaves out (another schedulerName,
        # deleting, finished) is neither counted toward the quorum nor planned, even
        # when it is the one asked about (its bind would be refused anyway).
        members = self.shared.snapshot.members(key)
        state.rank = rank_of(key, members)
        choice = choose_members(
            members, min_member=spec.min_member, task_minimums=spec.min_task_member
        )
        if isinstance(choice, MembersMissing):
            return say(state, HoldReason.WAITING_FOR_MEMBERS, members_missing_message(key, choice))
        in_flight = admission_window_full(self.shared, members)
        if in_flight is not None:
            return say(
                state,
                HoldReason.ADMISSION_WINDOW,
                f"gang {key}: behind its admission gate while kube-scheduler binds "
                f"{in_flight} planned members of other gangs (at most "
                f"{ADMISSION_WINDOW_MEMBERS} at once)",
            )
        if self.room.shortfall_holds(key, state):
            return state.message
        # Queue order: every held gang ahead that can be planned now is planned first;
        # what they cannot use now is left for this one (backfill).
        ahead = self.queue.plan_gangs_ahead(state.rank, now) if queue else []
        if self.room.shortfall_holds(key, state):
            return state.message
        generation = self.room.planning_inputs()

        free, order = self.room.planning_room(key)
        allowed = CurrentRestrictions(self.shared.restrictions, self.shared.snapshot)
        if asking is not None and candidates is not None:
            offered = self.shared.unseen_nodes.offered_or_unseen(
                candidates, self.shared.snapshot.nodes
            )
            asked = learnt_now(self.shared.snapshot, allowed=frozenset(offered))
            allowed = allowed.with_asked(asking.uid, asked)
        # Bound members anchor the gang's topology domain and its nodes.
        bound = [m for m in members if m.is_bound]
        for chosen in choice.attempts:
            outcome = plan_gang(
                chosen,
                free,
                self.shared.snapshot.nodes,
                self.shared.policy,
                allowed=allowed,
                topology=spec.topology,
                bound=bound,
                order=order,
                accelerators=self.shared.snapshot.accelerators,
            )
            if isinstance(outcome, Placement):
                break
        state.behind = None
        if not isinstance(outcome, Placement):
            state.shortfall_generation = generation
            if self.shared.switches.preemption:
                held = self.preemption.try_preemption(
                    key, state, spec, choice.attempts, free, allowed, now
                )
                if held is not None:
                    return held
            if self.starvation.reserving(key):
                return say(state, HoldReason.RESERVING, self.starvation.reserving_message(key))
            self.room.remember_shortfall(key, spec, members, state.rank.priority)
            behind = self.queue.waiting_behind(ahead, choice.attempts, free, allowed)
            if behind is None and queue:
                behind = self.queue.gang_ahead_of(key, members, allowed)
            if behind is not None:
                state.behind = behind.key
                return say(
                    state,
                    HoldReason.BEHIND_GANG,
                    f"gang {key}: {outcome.message}; "
                    f"waiting behind {behind.key} (priority {behind.priority})",
                )
            left_out = tasks_left_out(chosen, outcome.unplaced, spec.min_task_member)
            if left_out:
                return say(
                    state,
                    HoldReason.NO_ROOM,
                    f"gang {key}: {outcome.message}; short of room: {left_out}",
                )
            return say(state, HoldReason.NO_ROOM, f"gang {key}: {outcome.message}")

        timeout = spec.schedule_timeout_seconds or self.shared.timeouts.schedule_timeout_seconds
        plan = self.shared.new_plan(key, members, outcome, now, deadline=now + timeout)
        self.shared.ledger.reserve(plan)
        self.shared.shortfalls.forget(key)
        self.starvation.keep_fence_for(plan)
        self.starvation.end_reservation(key)
        self.starvation.sync_holds(now)
        state.shortfall_generation = None
        state.waiting = False
        say(
            state,
            HoldReason.PLANNED,
            f"gang {key}: planned {len(plan.placements)} members, binding",
        )
        self.shared.effects.append(PlanCreated(plan))
        return plan
