"""What the watch tells `GangCore`: pods and groups that changed or went away.

Pure. A part of `GangCore` (domain/gang/gang.py), like the other domain/*/gang_*.py
modules. A pod's arrival or change updates the snapshot, settles the plan it
completes (a member bound), loses a planned member that is gone (`GangBroken`
after the barrier released) and plans a held group it completes (`group_changed`:
kube-scheduler retries held members only on an event, and a gated member sends
none); a deletion frees its capacity, and a group left with no members and no
PodGroup is forgotten with its starvation reservation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from extender.domain.cluster.ledger import Plan
from extender.domain.gang.gang_barrier import BindBarrier
from extender.domain.objects.membership import SCHEDULER_NAME, GroupKey
from extender.domain.objects.model import PodInfo
from extender.domain.preemption.gang_preemption import GangPreemption
from extender.domain.preemption.preemption import SCHEDULER_PREEMPTION_REASON
from extender.domain.queue.gang_queue import QueueOrder
from extender.domain.starvation.gang_starvation import StarvationReservations
from extender.domain.state.decisions import LiftAdmissionGate
from extender.domain.state.gang_state import GroupState, PlanGroup, SharedState


class GangWatch:
    """Routes what the watch says to the parts it concerns; keeps no state of its own.

    Given the filter's planning steps (`plan_group`) for a held group a change completes.
    """

    def __init__(
        self,
        shared: SharedState,
        *,
        queue: QueueOrder,
        starvation: StarvationReservations,
        preemption: GangPreemption,
        barrier: BindBarrier,
        plan_group: PlanGroup,
        admit_gated: Callable[[float], None] = lambda now: None,
    ) -> None:
        self.shared = shared
        self.queue = queue
        self.starvation = starvation
        self.preemption = preemption
        self.barrier = barrier
        self.plan_group = plan_group
        # The admission pass (domain/queue/gang_admission.py), run when a gang is bound
        # whole: the room it leaves in the admission window goes to the next gated gang
        # now, not at the next tick.
        self.admit_gated = admit_gated

    def observe_pod(self, pod: PodInfo, now: float) -> None:
        """The watch saw a pod: update the snapshot and settle plans it completes."""
        confirmed = self.shared.confirmed_bindings
        if pod.uid in confirmed:
            if pod.node_name is None:  # older than our binding (see `confirmed_bindings`)
                pod = replace(pod, node_name=confirmed[pod.uid])
            else:
                del confirmed[pod.uid]
        old = self.shared.snapshot.upsert_pod(pod)
        if pod.admission_gated and not pod.is_bound and not pod.deleting:
            self.shared.admission_gated.setdefault(pod.uid, now)
        elif self.shared.admission_gated.pop(pod.uid, None) is not None:
            self.shared.gates_lifting.pop(pod.uid, None)
        if pod.placeholder_for is not None:
            self.starvation.placeholder_creating.pop(pod.name, None)
            return
        if (
            self.shared.switches.preemption
            and pod.disruption == SCHEDULER_PREEMPTION_REASON
            and pod.group is not None
        ):
            self.preemption.complete_preempted_gang(pod, pod.group)
        if old is not None and old.holds_capacity and not pod.holds_capacity:
            self.starvation.freed_on(old.node_name, now)
        plan = self.shared.ledger.plan_of(pod.uid)
        if plan is None:
            # A bound member that Succeeded ran: it was bound, not lost (a Job's pod can
            # finish before the last of its gang is bound). One deleted or Failed was.
            if pod.deleting or pod.phase == "Failed":
                self.barrier.bound_member_gone(pod, f"member {pod.ref} is gone", now)
            if pod.group is not None and pod.is_active_member:
                if (
                    not pod.is_bound
                    and not pod.gated
                    and pod.scheduler_name == SCHEDULER_NAME
                    and pod.group not in self.shared.groups
                ):
                    if pod.admission_gated:
                        # kube-scheduler will not ask about it: held now, so the change
                        # that completes it plans it (`group_changed`).
                        self.shared.groups[pod.group] = GroupState()
                    else:
                        self.queue.unasked.add(pod.group)
                self.group_changed(pod.group, now)
            return
        if pod.is_bound:
            self.shared.ledger.mark_bound(pod.uid)
            self.barrier.settle(plan, now)
            if self.shared.admission_gated and plan.group not in self.shared.ledger.plans:
                self.admit_gated(now)
            return
        if pod.deleting or pod.phase in ("Succeeded", "Failed"):
            self.barrier.member_gone(plan, pod.uid, f"member {pod.ref} is gone", now)

    def group_changed(self, key: GroupKey, now: float) -> None:
        """A member or the PodGroup of `key` changed: plan now if that completes a held gang.

        Why not wait for filter: kube-scheduler parks held members until some event,
        and a member it never filters (created with a scheduling gate, as Kueue does)
        sends none. The plan's annotations on the members are that event. Only groups
        kube-scheduler has asked about, or with members behind gang-extender's own
        admission gate, are planned here.
        """
        state = self.shared.groups.get(key)
        if state is None or not state.waiting or key in self.shared.ledger.plans:
            return
        spec = self.shared.snapshot.group_spec(key)
        if spec is None or spec.error is not None:
            return
        self.plan_group(key, state, spec, now, queue=True)

    def forget_pod(self, uid: str, now: float) -> None:
        pod = self.shared.snapshot.delete_pod(uid)
        self.shared.confirmed_bindings.pop(uid, None)
        self.shared.admission_gated.pop(uid, None)
        self.shared.gates_lifting.pop(uid, None)
        if self.shared.restrictions.pop(uid, None) is not None:
            self.shared.restrictions_version += 1
        self.barrier.offered.pop(uid, None)
        self.preemption.evicting.discard(uid)
        for held in self.shared.ledger.plans.values():
            if uid in held.victims:
                held.victims_gone[uid] = now
                if held.gates_held and held.victims.keys() <= held.victims_gone.keys():
                    self.lift_gates_of(held)
        if pod is not None and pod.placeholder_for is not None:
            self.starvation.placeholder_requests.pop(("delete", pod.name), None)
            self.barrier.placeholder_gone(pod.placeholder_for, now)
            return
        if pod is not None and pod.holds_capacity:
            self.starvation.freed_on(pod.node_name, now)
        plan = self.shared.ledger.plan_of(uid)
        if plan is not None:
            self.barrier.member_gone(plan, uid, f"member {plan.names[uid]} was deleted", now)
        elif pod is not None:
            self.barrier.bound_member_gone(pod, f"member {pod.ref} was deleted", now)
        if pod is not None and pod.group is not None:
            self.forget_group_if_gone(pod.group)

    def lift_gates_of(self, plan: Plan) -> None:
        """Every victim of `plan` is gone: its gated members go to kube-scheduler now."""
        plan.gates_held = False
        for uid in plan.unbound:
            pod = self.shared.snapshot.pods.get(uid)
            if pod is not None and pod.admission_gated:
                self.shared.effects.append(
                    LiftAdmissionGate(pod.group, pod.ref, "its gang's preemption victims are gone")
                )

    def forget_group_if_gone(self, key: GroupKey) -> None:
        """A group with no members left and no PodGroup is forgotten, and its starvation
        reservation and clock with it: a gang re-created under the same name starts
        afresh instead of inheriting the old one's reservation (the watch can deliver
        the new objects before the next reservation pass)."""
        if self.shared.snapshot.members(key) or self.shared.snapshot.podgroup(key) is not None:
            return
        self.shared.groups.pop(key, None)
        self.shared.shortfalls.forget(key)
        self.starvation.held_since.pop(key, None)
        self.starvation.given_up.pop(key, None)
        self.starvation.end_reservation(key)
