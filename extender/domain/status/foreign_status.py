"""Status of other gang schedulers' PodGroups, in their own schema, from ours.

`domain.status.status` computes phase, counts and the condition for any group; here
they are put in the words of scheduler-plugins' `scheduling.x-k8s.io/v1alpha1`
PodGroup (`coscheduling_status`), Volcano's `scheduling.volcano.sh/v1beta1`
PodGroup (`volcano_status`) and Kubernetes' own `scheduling.k8s.io/v1beta1`
PodGroup (`upstream_condition`), so `kubectl get podgroups.scheduling.x-k8s.io`
(or `.scheduling.volcano.sh`, `.scheduling.k8s.io`) shows a gang moving. Field names and phases are
those of the real API types (scheduler-plugins `apis/scheduling/v1alpha1/types.go`,
Volcano `pkg/apis/scheduling/v1beta1/types.go`).

Pure: no I/O; times are passed in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from extender.domain.status.status import GroupStatus

# Our phase -> scheduler-plugins' (PodGroupPhase in their v1alpha1 types.go). Their
# Scheduling is "at least minMember scheduled, fewer running": our Scheduling
# (planned, binding) and Scheduled (bound, not yet running) both. Their Unknown is
# never written: a gang here is bound whole or not at all.
COSCHEDULING_PHASES = {
    "Pending": "Pending",
    "Scheduling": "Scheduling",
    "Scheduled": "Scheduling",
    "Running": "Running",
    "Succeeded": "Finished",
    "Failed": "Failed",
}

# Our phase -> Volcano's (PodGroupPhase in its v1beta1 types.go: Pending, Inqueue,
# Running, Unknown, Completed). Volcano's scheduler calls a gang Running once
# minMember members are allocated (bound or running), and Inqueue when it may
# start; it has no Failed: its scheduler shows a gang with too few live members
# as Pending, the failed count says why.
VOLCANO_PHASES = {
    "Pending": "Pending",
    "Scheduling": "Inqueue",
    "Scheduled": "Running",
    "Running": "Running",
    "Succeeded": "Completed",
    "Failed": "Pending",
}


def occupied_by(namespace: str, owner_names: Iterable[str]) -> str:
    """scheduler-plugins' `status.occupiedBy`: `<namespace>/<owner>` of the members' owners,
    sorted, comma-separated ("" when the members have no owner)."""
    return ",".join(sorted({f"{namespace}/{name}" for name in owner_names if name}))


def coscheduling_status(status: GroupStatus, *, occupied: str) -> dict[str, Any]:
    """A `scheduling.x-k8s.io/v1alpha1` PodGroup's status from ours, without its start time.

    Its schema has phase, occupiedBy, running, succeeded, failed and
    scheduleStartTime (added by `with_schedule_start`); no scheduled count and no
    conditions, so the reason a gang waits is in the members' GangWaiting Events.
    """
    body: dict[str, Any] = {
        "phase": COSCHEDULING_PHASES[status.phase],
        "running": status.running,
        "succeeded": status.succeeded,
        "failed": status.failed,
    }
    if occupied:
        body["occupiedBy"] = occupied
    return body


def with_schedule_start(
    body: Mapping[str, Any], *, current: Mapping[str, Any], remembered: str | None, now: str
) -> dict[str, Any]:
    """`body` plus `scheduleStartTime`: when the gang first left Pending, kept once set.

    `current` is the object's status as last seen, `remembered` what this replica
    wrote last (the watch may not have shown it yet). Left out while Pending, so a
    merge patch keeps what is there.
    """
    out = dict(body)
    if out.get("phase") != "Pending":
        out["scheduleStartTime"] = str(current.get("scheduleStartTime") or remembered or now)
    return out


def volcano_status(status: GroupStatus, *, transition_time: str) -> dict[str, Any]:
    """A `scheduling.volcano.sh/v1beta1` PodGroup's status from ours.

    Volcano's condition types are Unschedulable and Scheduled; the one written
    carries our reason and message (what is missing, and the fix).
    """
    placed = status.condition_status == "True"
    return {
        "phase": VOLCANO_PHASES[status.phase],
        "running": status.running,
        "succeeded": status.succeeded,
        "failed": status.failed,
        "conditions": [
            {
                "type": "Scheduled" if placed else "Unschedulable",
                "status": "True",
                "reason": status.reason,
                "message": status.message,
                "lastTransitionTime": transition_time,
            }
        ],
    }


# Kubernetes' PodGroup condition (k8s.io/api scheduling/v1beta1 PodGroupStatus): whether
# the gang's scheduling requirement was met; True is terminal (never False again, even
# once members are evicted). Reasons: upstream's Unschedulable for a gang held; for a
# gang placed upstream names none, so ours says Scheduled.
UPSTREAM_SCHEDULED_CONDITION = "PodGroupInitiallyScheduled"
UPSTREAM_UNSCHEDULABLE = "Unschedulable"
UPSTREAM_SCHEDULED = "Scheduled"
# metav1.Condition's limit on message, in characters.
CONDITION_MESSAGE_LIMIT = 32768


def upstream_condition(
    status: GroupStatus, *, current: Mapping[str, Any], transition_time: str
) -> dict[str, Any] | None:
    """The `PodGroupInitiallyScheduled` condition to write on a `scheduling.k8s.io`
    PodGroup whose status is `current`, or None when there is nothing to write: it is
    True already (terminal), or says what it would say now.

    `lastTransitionTime` is `transition_time` when the status value changes, else kept.
    """
    found = next(
        (
            c
            for c in current.get("conditions") or []
            if isinstance(c, Mapping) and c.get("type") == UPSTREAM_SCHEDULED_CONDITION
        ),
        None,
    )
    if found is not None and found.get("status") == "True":
        return None
    placed = status.condition_status == "True"
    value = "True" if placed else "False"
    condition = {
        "type": UPSTREAM_SCHEDULED_CONDITION,
        "status": value,
        "reason": UPSTREAM_SCHEDULED if placed else UPSTREAM_UNSCHEDULABLE,
        "message": status.message[:CONDITION_MESSAGE_LIMIT],
    }
    if found is not None and all(found.get(k) == v for k, v in condition.items()):
        return None
    kept = found is not None and found.get("status") == value and found.get("lastTransitionTime")
    condition["lastTransitionTime"] = str(kept) if kept else transition_time
    return condition
