"""PodGroup status as the core sees it: phase, counts, and the condition a user reads.

Pure: computed from the snapshot, the ledger and the group's last message.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from extender.domain.gang.core_api import SchedulingCore
from extender.domain.objects.membership import MIN_AVAILABLE_ANNOTATION, SCHEDULER_NAME, GroupKey
from extender.domain.objects.model import (
    UPSTREAM_PODGROUP_SOURCE,
    UPSTREAM_WORKLOAD_SOURCE,
    GroupSpec,
    PodInfo,
)
from extender.domain.state.gang_state import HoldReason


@dataclass(frozen=True)
class GroupStatus:
    phase: str
    min_member: int
    members: int
    scheduled: int
    running: int
    succeeded: int
    failed: int
    condition_status: str  # "True" when minMember members are bound
    reason: str
    message: str

    def as_api(self, transition_time: str) -> dict[str, Any]:
        return {
            "phase": self.phase,
            "scheduled": self.scheduled,
            "running": self.running,
            "succeeded": self.succeeded,
            "failed": self.failed,
            "conditions": [
                {
                    "type": "Scheduled",
                    "status": self.condition_status,
                    "reason": self.reason,
                    "message": self.message,
                    "lastTransitionTime": transition_time,
                }
            ],
        }


@dataclass(frozen=True)
class MemberCounts:
    """How many of a group's members (of this scheduler) are where, as status counts them."""

    active: int  # not being deleted, not Succeeded or Failed
    scheduled: int  # bound to a node
    running: int  # active and Running
    succeeded: int
    failed: int

    @classmethod
    def of(cls, pods: list[PodInfo]) -> MemberCounts:
        active = [p for p in pods if p.is_active_member]
        return cls(
            active=len(active),
            scheduled=sum(1 for p in pods if p.is_bound),
            running=sum(1 for p in active if p.phase == "Running"),
            succeeded=sum(1 for p in pods if p.phase == "Succeeded"),
            failed=sum(1 for p in pods if p.phase == "Failed"),
        )

    def phase(self, min_member: int | None, *, planned: bool = False) -> str:
        """The phase ladder, the first that applies (no minMember known: Pending).

        The service writes it on its PodGroups (`group_status`); `gang-extender status`
        shows it for groups whose PodGroup has no status of ours.
        """
        if min_member is None:
            return "Pending"
        if self.succeeded >= min_member:
            return "Succeeded"
        if self.failed and not self.active:
            return "Failed"
        if self.succeeded and not self.active:
            # Finished: a Job whose successPolicy is met removes the members still
            # running, so fewer than minMember may be left, all Succeeded.
            return "Succeeded"
        if self.running >= min_member:
            return "Running"
        if self.scheduled >= min_member:
            return "Scheduled"
        return "Scheduling" if planned else "Pending"


# The Scheduled condition's reason of each phase but Pending (whose reason says why).
PHASE_REASONS = {
    "Succeeded": "Succeeded",
    "Failed": "MembersFailed",
    "Running": "Running",
    "Scheduled": "Scheduled",
    "Scheduling": "Binding",
}

# Names listed in a message before it says "..." instead.
MAX_NAMED = 5

# What to change when kube-scheduler's own filters refuse a member, by a piece of
# its reason (heuristic: the reasons of the filters a GPU job meets most).
# "Insufficient <resource>" gets its own message (INSUFFICIENT_FIX), naming the resources.
KUBE_SCHEDULER_FIXES = (
    ("node affinity/selector", "fix the member's nodeSelector or affinity, or label nodes"),
    ("untolerated taint", "add the toleration to the member's pod template"),
)
INSUFFICIENT = re.compile(r"\bInsufficient ([^\s,]+)")
KUBE_SCHEDULER_FIX_DEFAULT = "see the member's FailedScheduling events"


def _names(pods: list[PodInfo]) -> str:
    names = sorted(p.name for p in pods)
    return ", ".join(names[:MAX_NAMED] + (["..."] if len(names) > MAX_NAMED else []))


def other_scheduler_message(key: GroupKey, pods: list[PodInfo], *, upstream: bool = False) -> str:
    """Name the group's pods that another scheduler places, and what to set.

    Such pods are not held, counted or given Events: kube-scheduler's default
    profile placed them one by one. A group sized by Kubernetes' own PodGroup
    (`upstream`) is one that scheduler gang-schedules itself when its GenericWorkload
    gate is on: gang-extender stands aside and says so, rather than asking for its
    own schedulerName. Pure, shared with `gang-extender status`.
    """
    by_scheduler: dict[str, list[PodInfo]] = {}
    for pod in pods:
        by_scheduler.setdefault(pod.scheduler_name, []).append(pod)
    parts = []
    for scheduler, mine in sorted(by_scheduler.items()):
        count = len(mine)
        noun, verb = ("pod", "uses") if count == 1 else ("pods", "use")
        names = _names(mine)
        if upstream:
            parts.append(
                f"gang {key}: {count} {noun} of this group {verb} schedulerName {scheduler} "
                f"({names}), which gang-schedules Kubernetes' PodGroups itself where its "
                f"GenericWorkload gate is on: gang-extender only wires them (for "
                f"gang-extender to place the gang, set schedulerName: {SCHEDULER_NAME} in "
                f"their pod template)"
            )
            continue
        parts.append(
            f"gang {key}: {count} {noun} of this group {verb} schedulerName {scheduler} "
            f"({names}): set schedulerName: {SCHEDULER_NAME} in their pod template"
        )
    return "; ".join(parts)


def kube_scheduler_refusal(key: GroupKey, pod: PodInfo) -> str | None:
    """kube-scheduler's own reason for refusing `pod` (not this extender's), cut short."""
    said = pod.unschedulable_message
    if not said or f"gang {key}:" in said:
        return None
    return said.partition(". ")[0].rstrip(".")


def _refusal_message(key: GroupKey, refused: list[tuple[PodInfo, str]]) -> str:
    pods = [p for p, _ in refused]
    reason = refused[0][1]
    count = len(pods)
    noun = "member" if count == 1 else "members"
    names = _names(pods)
    short = sorted({r.rstrip(".") for r in INSUFFICIENT.findall(reason)})
    if short:
        resources = ", ".join(short)
        return (
            f"gang {key}: kube-scheduler's own filters refuse {count} {noun} ({names}): "
            f"Insufficient {resources}; lower the per-pod request, or add nodes that have "
            "that much free"
        )
    fix = next((f for piece, f in KUBE_SCHEDULER_FIXES if piece in reason), None)
    return (
        f"gang {key}: kube-scheduler's own filters refuse {count} {noun} ({names}): "
        f"{reason}; {fix or KUBE_SCHEDULER_FIX_DEFAULT}"
    )


def _waiting_message(key: GroupKey, spec: GroupSpec, members: int) -> str:
    m = spec.min_member
    if spec.source == "annotation":
        where = f"set {MIN_AVAILABLE_ANNOTATION} in the pod template to the number it creates"
    elif spec.source == UPSTREAM_PODGROUP_SOURCE:
        where = (
            f"set spec.schedulingPolicy.gang.minCount of PodGroup {key.name} "
            f"(scheduling.k8s.io) to the number it creates"
        )
    elif spec.source == UPSTREAM_WORKLOAD_SOURCE:
        where = (
            "set policy.gang.minCount of the pod group in the pods' scheduling.k8s.io "
            "Workload (spec.workloadRef) to the number it creates"
        )
    else:
        where = f"set spec.minMember of {spec.source} {key.name} to the number it creates"
    return (
        f"gang {key}: {members}/{m} members exist; waiting for the rest to be created "
        f"(if the job creates fewer than {m} pods, {where})"
    )


def _size_disagreement(key: GroupKey, spec: GroupSpec, members: list[PodInfo]) -> str | None:
    """A user's PodGroup wins over the members' min-available annotation: say so.

    An annotation spec, or a PodGroup gang-extender created, needs no guard here: the
    snapshot sizes either from these same members' annotation (ClusterSnapshot._sized_spec),
    so their sizes are [min_member], none, or disagree (an error, reported before this).
    """
    sizes = sorted({p.min_available for p in members if p.min_available is not None})
    if not sizes or sizes == [spec.min_member]:
        return None
    said = ", ".join(str(n) for n in sizes)
    return (
        f"{spec.source} {key.name} sets minMember {spec.min_member}, which wins over the "
        f"members' {MIN_AVAILABLE_ANNOTATION} ({said}): change its spec.minMember, or "
        f"delete it to let the annotation decide"
    )


def group_status(core: SchedulingCore, key: GroupKey) -> GroupStatus | None:
    """Phase, counts and the condition for `key`; None when nothing declares its size.

    Pending's reason, in this order (the first that applies):
     1. pods of the group placed by another scheduler, while ours are short of
        minMember -> OtherScheduler, naming them and the fix;
     2. a member kube-scheduler's own filters refuse (its PodScheduled condition),
        while no member has reached the extender (the core has no word on the group;
        its word is newer than such a condition, which lasts until the pod is tried
        again) -> Unschedulable, with that reason and the fix;
     3. fewer than minMember members -> WaitingForMembers, and how to lower the size;
        a task with fewer members than its minTaskMember -> WaitingForMembers, naming it;
     4. else why the core holds the gang -> Unschedulable.
    A gang whose planning raised (`GroupState.fault`, for its current version) is
    InvalidSpec with that error, as a spec the core cannot use is.
    An Unschedulable gang with a held gang ahead of it in the queue that wants the
    same nodes (`GangCore.gang_ahead_of`) also says it waits behind that gang.
    A user's PodGroup whose minMember differs from the members' annotation adds
    which wins and what to change.
    """
    spec = core.snapshot.group_spec(key)
    if spec is None:
        return None
    every = [core.snapshot.pods[uid] for uid in core.snapshot.member_uids(key)]
    pods = [p for p in every if p.scheduler_name == SCHEDULER_NAME]
    foreign = [p for p in every if p.scheduler_name != SCHEDULER_NAME and p.is_active_member]
    active = [p for p in pods if p.is_active_member]
    counts = MemberCounts.of(pods)
    scheduled = counts.scheduled
    # The core's word (domain/state/gang_state.py `HoldReason`): mapped here, not re-derived.
    word = core.word_on(key)
    message = word.message if word is not None else ""
    planned = key in core.ledger.plans
    refused = [
        (p, reason)
        for p in active
        if not p.is_bound and (reason := kube_scheduler_refusal(key, p)) is not None
    ]
    phase = counts.phase(spec.min_member, planned=planned)
    if spec.error:
        phase, reason, message = "Pending", "InvalidSpec", f"gang {key}: {spec.error}"
    elif phase == "Pending" and word is not None and word.reason is HoldReason.FAULTED:
        # Planning it raised (GangPlanning.try_plan): held until its members or PodGroup
        # change; not planned again here either (gang_ahead_of would).
        reason = word.reason.condition_reason
    elif phase != "Pending":
        reason = PHASE_REASONS[phase]
    else:
        if foreign and len(active) < spec.min_member:
            reason, message = (
                "OtherScheduler",
                other_scheduler_message(
                    key,
                    foreign,
                    upstream=spec.source in (UPSTREAM_PODGROUP_SOURCE, UPSTREAM_WORKLOAD_SOURCE),
                ),
            )
        elif refused and not message:
            reason, message = "Unschedulable", _refusal_message(key, refused)
        elif len(active) < spec.min_member:
            reason, message = "WaitingForMembers", _waiting_message(key, spec, len(active))
        elif (short := core.members_short(key)) is not None:
            reason, message = short.reason.condition_reason, short.message
        else:
            reason = "Unschedulable"
        if reason == "Unschedulable" and (
            word is None or word.reason is not HoldReason.BEHIND_GANG
        ):
            # Also when kube-scheduler never asked (its own filters refuse every node):
            # the gang ahead goes first when room appears.
            ahead = core.gang_ahead_of(key)
            if ahead is not None:
                said = message or f"gang {key}: waiting to be scheduled"
                message = f"{said}; waiting behind {ahead.key} (priority {ahead.priority})"
        disagreement = _size_disagreement(key, spec, active)
        if disagreement:
            message = f"{message or f'gang {key}: waiting to be scheduled'}; {disagreement}"
    if scheduled >= spec.min_member and not spec.error:
        message = f"gang {key}: {scheduled}/{spec.min_member} members bound"
    elif phase == "Succeeded" and not spec.error:
        message = (
            f"gang {key}: finished: {counts.succeeded} member(s) succeeded, none left to run "
            f"(the others were removed, as a Job does once its successPolicy is met)"
        )
    return GroupStatus(
        phase=phase,
        min_member=spec.min_member,
        members=len(active),
        scheduled=scheduled,
        running=counts.running,
        succeeded=counts.succeeded,
        failed=counts.failed,
        condition_status=(
            "True"
            if (scheduled >= spec.min_member or phase == "Succeeded") and not spec.error
            else "False"
        ),
        reason=reason,
        message=message or f"gang {key}: waiting to be scheduled",
    )
