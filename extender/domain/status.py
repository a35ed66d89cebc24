"""PodGroup status as the core sees it: phase, counts, and the condition a user reads.

Pure: computed from the snapshot, the ledger and the group's last message.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from extender.domain.gang import GangCore
from extender.domain.membership import SCHEDULER_NAME, GroupKey


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


def group_status(core: GangCore, key: GroupKey) -> GroupStatus | None:
    spec = core.snapshot.group_spec(key)
    if spec is None:
        return None
    pods = [
        core.snapshot.pods[uid]
        for uid in core.snapshot.member_uids(key)
        if core.snapshot.pods[uid].scheduler_name == SCHEDULER_NAME
    ]
    active = [p for p in pods if p.is_active_member]
    scheduled = sum(1 for p in pods if p.is_bound)
    running = sum(1 for p in active if p.phase == "Running")
    succeeded = sum(1 for p in pods if p.phase == "Succeeded")
    failed = sum(1 for p in pods if p.phase == "Failed")
    state = core.groups.get(key)
    message = state.message if state and state.message else ""
    planned = key in core.ledger.plans
    if spec.error:
        phase, reason, message = "Pending", "InvalidSpec", f"gang {key}: {spec.error}"
    elif succeeded >= spec.min_member:
        phase, reason = "Succeeded", "Succeeded"
    elif failed and not active:
        phase, reason = "Failed", "MembersFailed"
    elif running >= spec.min_member:
        phase, reason = "Running", "Running"
    elif scheduled >= spec.min_member:
        phase, reason = "Scheduled", "Scheduled"
    elif planned:
        phase, reason = "Scheduling", "Binding"
    else:
        phase = "Pending"
        reason = "WaitingForMembers" if len(active) < spec.min_member else "Unschedulable"
        if len(active) < spec.min_member:
            message = (
                f"gang {key}: {len(active)}/{spec.min_member} members exist; "
                "waiting for the rest to be created"
            )
    if scheduled >= spec.min_member and not spec.error:
        message = f"gang {key}: {scheduled}/{spec.min_member} members bound"
    return GroupStatus(
        phase=phase,
        min_member=spec.min_member,
        members=len(active),
        scheduled=scheduled,
        running=running,
        succeeded=succeeded,
        failed=failed,
        condition_status="True" if scheduled >= spec.min_member and not spec.error else "False",
        reason=reason,
        message=message or f"gang {key}: waiting to be scheduled",
    )
