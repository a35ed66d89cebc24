"""Gated admission, a part of `GangCore`: gangs planned before kube-scheduler queues them.

Pure. A member created with gang-extender's scheduling gate (`ADMISSION_GATE`, put
there by the webhook or the user's pod template) is invisible to kube-scheduler
until the gate goes, so it never tries a gang that is incomplete or does not fit:
no refused attempts, no backoff, no preemption dry runs for it. The core plans
such gangs itself, in queue order: when a change completes one (`GangWatch.group_changed`)
and on every periodic pass (`admit_gated`, for room freed since). A plan's writes
lift the gate with the planned node (controller/effects.py), so the gang's members
enter kube-scheduler's queue together and each is answered from the plan.

A gated pod the core will not plan is ungated at once (`LiftAdmissionGate`), so the
filter, not a silent gate, says what to fix; one of a group with no spec yet (its
PodGroup not seen) after `SPEC_GRACE_SECONDS`. Kueue's gate, or any other, is left
alone: the core plans a pod only when ours is its only gate (`PodInfo.gated`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from extender.domain.objects.membership import SCHEDULER_NAME, GroupKey
from extender.domain.objects.model import GroupSpec, PodInfo
from extender.domain.planning.queue import QueueRank
from extender.domain.queue.gang_queue import QueueOrder
from extender.domain.state.decisions import LiftAdmissionGate
from extender.domain.state.gang_state import SharedState

# How long a gated member waits for its group's spec (its PodGroup, or a
# min-available annotation) before its gate is lifted for the filter to say it is
# missing: a PodGroup applied with its pods can reach the watch a moment after them.
SPEC_GRACE_SECONDS = 10.0

# How long a gate asked lifted (`LiftAdmissionGate`) may still show before it is
# asked again: the write failed for good, or this replica was not the leader then.
LIFT_RETRY_SECONDS = 30.0

# The most planned members not yet bound (every plan's) while a gated gang is
# planned: the rest stay gated, in queue order, until kube-scheduler has bound
# enough of them. Without it every gang that fits was planned and ungated at once,
# and at 1,000 nodes the members of the last ones waited in kube-scheduler's
# queue past their plans' 60 s schedule timeout (873 plans dropped in one run,
# docs/benchmarks.md round 19). A gang larger than the window goes alone.
ADMISSION_WINDOW_MEMBERS = 256

# Behind every held gang: `plan_gangs_ahead(TAIL, now)` tries the first held gangs
# in queue order, as a filter call of a gang at the very end would.
TAIL = QueueRank(GroupKey("", ""), priority=-(2**63), created=math.inf)


class GatedAdmission:
    """Plans the gangs behind the admission gate, and lifts gates nobody will."""

    def __init__(self, shared: SharedState, *, queue: QueueOrder) -> None:
        self.shared = shared
        self.queue = queue

    def admit_gated(self, now: float) -> None:
        """The periodic pass: lift the gates the core will not plan behind, then plan
        the held gangs in queue order (at most `GANGS_AHEAD_TRIED_PER_CALL` not known
        not to fit), which lifts the gates of each one planned."""
        if not self.shared.admission_gated:
            return
        lifting = self.shared.gates_lifting
        # A group's spec is read once a pass, not once per gated member.
        specs: dict[GroupKey, GroupSpec | None] = {}
        for uid, since in self.shared.admission_gated.items():
            if now < lifting.get(uid, -math.inf) + LIFT_RETRY_SECONDS:
                continue
            pod = self.shared.snapshot.pods.get(uid)
            if pod is None:
                continue
            why = self.unplannable(pod, waited=now - since, specs=specs)
            if why is not None:
                lifting[uid] = now
                self.shared.effects.append(LiftAdmissionGate(pod.group, pod.ref, why))
        self.queue.plan_gangs_ahead(TAIL, now)

    def unplannable(
        self,
        pod: PodInfo,
        *,
        waited: float,
        specs: dict[GroupKey, GroupSpec | None],
    ) -> str | None:
        """Why the core will never plan `pod` behind its gate; None while it may.

        `specs` keeps the group specs read so far in this pass."""
        if pod.scheduler_name != SCHEDULER_NAME:
            return f"its schedulerName is {pod.scheduler_name}, not {SCHEDULER_NAME}"
        if pod.group is None:
            return "it is not a member of a gang"
        if pod.group_error is not None:
            return f"its group is misdeclared: {pod.group_error}"
        if pod.group not in specs:
            specs[pod.group] = self.shared.snapshot.group_spec(pod.group)
        spec = specs[pod.group]
        if spec is None:
            if waited < SPEC_GRACE_SECONDS:
                return None
            return (
                f"gang {pod.group} has no PodGroup and no min-available annotation "
                f"after {SPEC_GRACE_SECONDS:g}s"
            )
        if spec.error is not None:
            return f"gang {pod.group} is misdeclared: {spec.error}"
        return None


def admission_window_full(shared: SharedState, members: Sequence[PodInfo]) -> int | None:
    """How many planned members are not bound yet, when that holds a gang behind the
    admission gate back (`ADMISSION_WINDOW_MEMBERS`); None when it may be planned now:
    not gated, or the window has room, or nothing else is in flight."""
    if not any(m.admission_gated and not m.is_bound for m in members):
        return None
    in_flight = sum(len(plan.unbound) for plan in shared.ledger.plans.values())
    if in_flight == 0 or in_flight + len(members) <= ADMISSION_WINDOW_MEMBERS:
        return None
    return in_flight
