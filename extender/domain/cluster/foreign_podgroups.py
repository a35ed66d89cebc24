"""PodGroups of other gang schedulers: Volcano's spec read, and which PodGroup of a name decides.

Users migrating from Volcano or scheduler-plugins keep the PodGroup objects their
tooling makes (docs/podgroup.md#migrating-from-volcano-or-scheduler-plugins):

- `scheduling.volcano.sh/v1beta1` PodGroup: `spec.minMember` and
  `spec.minTaskMember` are the group's size and task minimums (read by
  `volcano_group_spec`); `minResources`, `queue`, `priorityClassName` and every
  other field are not used (the members' own requests and priority are what is
  placed and ordered; there are no queues here).
- `scheduling.x-k8s.io/v1alpha1` PodGroup (scheduler-plugins' coscheduling):
  read by `GroupSpec.from_podgroup`.

- `scheduling.k8s.io` PodGroup (Kubernetes' Workload API): read by
  `model.upstream_podgroup_spec`; its status is never written.
- `scheduling.k8s.io/v1alpha1` Workload (the same API as Kubernetes 1.35 shipped it):
  one gang per pod group entry and replica key, read by `model.upstream_workload_spec`;
  it has no status to write.

Several PodGroups of one namespace/name (ours, Volcano's, scheduler-plugins', Kubernetes')
describe one group: `pick_podgroup` says which decides and makes a disagreement
an error the group's status and Events show.

Status goes back in each schema's own words: `domain.status.foreign_status`. Field
names are those of the real API types (Volcano `pkg/apis/scheduling/v1beta1/types.go`).
Kept apart from the status side so the snapshot can import this module.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from extender.domain.objects.limits import MAX_GROUP_SIZE, MAX_TASK_NAME, MAX_TASKS, listing, quoted
from extender.domain.objects.membership import GroupKey
from extender.domain.objects.model import (
    UPSTREAM_PODGROUP_SOURCE,
    UPSTREAM_WORKLOAD_SOURCE,
    GroupSpec,
)

VOLCANO_GROUP = "scheduling.volcano.sh"
VOLCANO_API = f"{VOLCANO_GROUP}/v1beta1"
COSCHEDULING_GROUP = "scheduling.x-k8s.io"
COSCHEDULING_API = f"{COSCHEDULING_GROUP}/v1alpha1"
OURS_GROUP = "scheduling.gang-extender.io"
UPSTREAM_GROUP = "scheduling.k8s.io"  # Kubernetes' Workload API (model.upstream_podgroup_spec)

# GroupSpec.source of each kind of PodGroup; the words messages use.
SOURCE_OURS = "PodGroup"
SOURCE_VOLCANO = "Volcano PodGroup"
SOURCE_COSCHEDULING = "coscheduling PodGroup"
# Which one decides when several of one name agree (pick_podgroup): ours is the
# one written for gang-extender; Volcano's carries task minimums, coscheduling's none.
# Kubernetes' own comes last: it states no task minimums.
PODGROUP_SOURCES = (
    SOURCE_OURS,
    SOURCE_VOLCANO,
    SOURCE_COSCHEDULING,
    UPSTREAM_PODGROUP_SOURCE,
    UPSTREAM_WORKLOAD_SOURCE,
)
API_GROUP_OF_SOURCE = {
    SOURCE_OURS: OURS_GROUP,
    SOURCE_VOLCANO: VOLCANO_GROUP,
    SOURCE_COSCHEDULING: COSCHEDULING_GROUP,
    UPSTREAM_PODGROUP_SOURCE: UPSTREAM_GROUP,
    UPSTREAM_WORKLOAD_SOURCE: UPSTREAM_GROUP,
}

# Volcano's int32 fields: a value past this is refused by the API server's schema;
# checked here too, so a PodGroup read from elsewhere cannot ask for more.
INT32_MAX = 2**31 - 1


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def volcano_group_spec(obj: Mapping[str, Any]) -> GroupSpec:
    """The size and task minimums of a `scheduling.volcano.sh/v1beta1` PodGroup.

    `minMember` is omitempty in Volcano's types: absent and 0 are the same value,
    which Volcano's gang plugin treats as "no minimum", so here as 1 (every member
    on its own). A field of the wrong type gives a spec with `error` set: the group
    is held and its status and Events say what to fix.
    """
    meta, spec = obj["metadata"], obj.get("spec") or {}
    key = GroupKey(meta.get("namespace") or "default", meta["name"])
    where = f"{SOURCE_VOLCANO} {key.name}"
    error: str | None = None
    raw_min = spec.get("minMember")
    min_member = 1
    if raw_min is not None:
        if not _whole(raw_min) or not 0 <= raw_min <= INT32_MAX:
            error = f"{where} spec.minMember={quoted(raw_min)} must be a whole number >= 0"
        elif raw_min > MAX_GROUP_SIZE:
            error = (
                f"{where} spec.minMember={raw_min} is more than this service accepts: at "
                f"most {MAX_GROUP_SIZE} members in a group"
            )
        else:
            min_member = max(1, raw_min)
    tasks: dict[str, int] = {}
    raw_tasks = spec.get("minTaskMember")
    if raw_tasks is not None:
        if not isinstance(raw_tasks, Mapping):
            error = error or f"{where} spec.minTaskMember must map task names to counts"
        elif len(raw_tasks) > MAX_TASKS:
            error = error or (
                f"{where} spec.minTaskMember names {len(raw_tasks)} tasks; at most {MAX_TASKS}"
            )
        else:
            for task, count in raw_tasks.items():
                if not isinstance(task, str) or not task:
                    error = error or f"{where} spec.minTaskMember: task {quoted(task)} has no name"
                elif len(task) > MAX_TASK_NAME:
                    error = error or (
                        f"{where} spec.minTaskMember: task {quoted(task)} is longer than "
                        f"{MAX_TASK_NAME} characters"
                    )
                elif not _whole(count) or not 0 <= count <= INT32_MAX:
                    error = error or (
                        f"{where} spec.minTaskMember[{task}]={quoted(count)} must be a whole "
                        "number >= 0"
                    )
                elif count > MAX_GROUP_SIZE:
                    error = error or (
                        f"{where} spec.minTaskMember[{task}]={count} is more than this service "
                        f"accepts: at most {MAX_GROUP_SIZE} members in a group"
                    )
                elif count > 0:  # a task whose minimum is 0 asks for nothing
                    tasks[task] = count
    return GroupSpec(
        key=key,
        min_member=min_member,
        source=SOURCE_VOLCANO,
        min_task_member=tasks or None,
        error=error,
    )


def _describe(spec: GroupSpec) -> str:
    upstream = (UPSTREAM_PODGROUP_SOURCE, UPSTREAM_WORKLOAD_SOURCE)
    size = "minCount" if spec.source in upstream else "minMember"
    said = f"{size} {spec.min_member}"
    if spec.min_task_member:
        tasks = listing((f"{t}={n}" for t, n in sorted(spec.min_task_member.items())), sep=",")
        said += f", minTaskMember {tasks}"
    kind = "Workload pod group" if spec.source == UPSTREAM_WORKLOAD_SOURCE else "PodGroup"
    # Every source pick_podgroup is given has an API group (PODGROUP_SOURCES).
    return f"{API_GROUP_OF_SOURCE[spec.source]} {kind} {spec.key.name} ({said})"


def pick_podgroup(specs: Sequence[GroupSpec]) -> GroupSpec | None:
    """The PodGroup that decides a group's size, given those of its name in `PODGROUP_SOURCES` order.

    1. One a user (or their tooling) made wins over one gang-extender created from
       the members' annotation (`managed`: that one follows its members).
    2. Of the users', the first in `PODGROUP_SOURCES` order gives the size; the
       task minimums come from the first that states any (scheduler-plugins'
       schema cannot, so its silence is no disagreement)...
    3. ...unless another gives a different minMember, or states different task
       minimums: then the first is returned with `error` naming all, and the
       group is held until one is deleted or they agree (guessing which the user
       meant would place a job of the wrong size).
    """
    if not specs:
        return None
    users = [s for s in specs if not s.managed]
    if not users:
        return specs[0]
    first = users[0]
    if first.error:
        return first
    tasks = next((s.min_task_member for s in users if s.min_task_member), None)
    others = [
        s
        for s in users[1:]
        if s.min_member != first.min_member
        or (s.min_task_member and dict(s.min_task_member) != dict(tasks or {}))
    ]
    if others:
        described = listing((_describe(s) for s in users), sep=" and ")
        return replace(
            first,
            error=f"{described} disagree; delete the one you do not use, or make them agree",
        )
    return first if first.min_task_member == tasks else replace(first, min_task_member=tasks)
