"""A group's task layout: which tasks, how many members each, how many slots per member.

The layout decides every host list, the hostfile and the `VC_<TASK>_*` values.
Where it comes from, first match wins (DESIGN section 2):

1. the PodGroup's `spec.minTaskMember`;
2. the `gang-extender.io/tasks` annotation on the member pods;
3. counts derived from the member pods (per task: highest index + 1, or the
   number of active members when that is larger);
4. `{worker: spec.minMember}` when there are no pods to derive from.

Slots per member are the GPUs one pod of that task requests, at least 1, so the
hostfile and `host:slots` lists say how many ranks to start on each host.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from extender.domain.objects.accelerators import DEFAULT_ACCELERATORS, Accelerators
from extender.domain.objects.limits import MAX_GROUP_SIZE, max_task_index, quoted
from extender.domain.objects.membership import (
    DEFAULT_TASK,
    TASKS_ANNOTATION,
    IndexTooLarge,
    MembershipError,
    explicit_task_index,
    is_dns_label,
    task_layout,
    task_name,
)
from extender.domain.objects.quantity import pod_gpus
from extender.injection import names

# Pods in these phases have finished: they no longer hold a place in the layout.
FINISHED_PHASES = frozenset({"Succeeded", "Failed"})


class LayoutSource(StrEnum):
    """Where a layout came from; named in messages so users know what to edit."""

    PODGROUP_MIN_TASK_MEMBER = "PodGroup spec.minTaskMember"
    TASKS_ANNOTATION = f"annotation {TASKS_ANNOTATION}"
    MEMBER_PODS = "the member pods"
    PODGROUP_MIN_MEMBER = "PodGroup spec.minMember"


@dataclass(frozen=True)
class Member:
    task: str
    index: int
    hostname: str
    fqdn: str
    slots: int


@dataclass(frozen=True)
class TaskLayout:
    name: str
    count: int
    slots: int


@dataclass(frozen=True)
class GroupLayout:
    group: str
    tasks: tuple[TaskLayout, ...]
    source: LayoutSource

    def members(self) -> list[Member]:
        """Every member the layout names, task by task in layout order, index ascending."""
        return [
            Member(
                task=task.name,
                index=index,
                hostname=names.hostname(self.group, task.name, index),
                fqdn=names.fqdn(self.group, task.name, index),
                slots=task.slots,
            )
            for task in self.tasks
            for index in range(task.count)
        ]

    def task_names(self) -> list[str]:
        return [task.name for task in self.tasks]


@dataclass(frozen=True)
class DeclaredLayout:
    """Task counts the user declared (PodGroup or annotation): what the webhook validates."""

    counts: dict[str, int]
    source: LayoutSource

    def describe(self) -> str:
        listed = ",".join(f"{task}={count}" for task, count in self.counts.items())
        return f"{listed} (from {self.source})"


def podgroup_task_counts(podgroup: Mapping[str, Any]) -> dict[str, int] | None:
    """`spec.minTaskMember` as task counts, None when absent or empty."""
    raw = (podgroup.get("spec") or {}).get("minTaskMember")
    if not raw:
        return None
    where = f"PodGroup {_podgroup_name(podgroup)} spec.minTaskMember"
    if not isinstance(raw, Mapping):
        raise MembershipError(f"{where} must map task names to counts, got {quoted(raw)}")
    counts: dict[str, int] = {}
    for task, count in raw.items():
        if not isinstance(task, str) or not is_dns_label(task):
            raise MembershipError(f"{where}: task {quoted(task)} must be a lower-case DNS label")
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise MembershipError(f"{where}[{task}]={quoted(count)} must be a whole number >= 1")
        counts[task] = count
    return counts


def podgroup_min_member(podgroup: Mapping[str, Any]) -> int | None:
    raw = (podgroup.get("spec") or {}).get("minMember")
    if isinstance(raw, int) and not isinstance(raw, bool) and raw >= 1:
        return raw
    return None


def declared_layout(
    podgroup: Mapping[str, Any] | None, pod_meta: Mapping[str, Any]
) -> DeclaredLayout | None:
    """The layout a new pod must fit: the PodGroup's, else its own annotation, else None.

    The pod's annotation is parsed even when the PodGroup wins, so a malformed
    annotation is reported instead of lying unnoticed until the PodGroup goes away.
    """
    from_annotation = task_layout(pod_meta)
    if podgroup is not None:
        from_podgroup = podgroup_task_counts(podgroup)
        if from_podgroup is not None:
            return DeclaredLayout(from_podgroup, LayoutSource.PODGROUP_MIN_TASK_MEMBER)
    if from_annotation is not None:
        return DeclaredLayout(from_annotation, LayoutSource.TASKS_ANNOTATION)
    return None


def resolve_layout(
    *,
    group: str,
    podgroup: Mapping[str, Any] | None,
    pods: Sequence[Mapping[str, Any]],
    accelerators: Accelerators = DEFAULT_ACCELERATORS,
) -> GroupLayout:
    """The layout the controller renders for a group (see the module docstring for the order).

    Raises MembershipError, before naming any member, for a layout of more than
    MAX_GROUP_SIZE members or a member index past `max_task_index` of the group's size:
    a pod's index must not make the wiring render one entry per slot up to it.
    """
    counts, source = _resolve_counts(podgroup, pods)
    total = sum(counts.values())
    if total > MAX_GROUP_SIZE:
        raise MembershipError(
            f"the layout from {source} names {total} members; at most {MAX_GROUP_SIZE} "
            f"members in a group"
        )
    slots = _slots_per_task(pods, accelerators)
    tasks = tuple(
        TaskLayout(name=task, count=count, slots=slots.get(task, 1))
        for task, count in counts.items()
    )
    return GroupLayout(group=group, tasks=tasks, source=source)


def _resolve_counts(
    podgroup: Mapping[str, Any] | None, pods: Sequence[Mapping[str, Any]]
) -> tuple[dict[str, int], LayoutSource]:
    if podgroup is not None:
        from_podgroup = podgroup_task_counts(podgroup)
        if from_podgroup is not None:
            return from_podgroup, LayoutSource.PODGROUP_MIN_TASK_MEMBER
    from_annotation = _first_annotated_layout(pods)
    if from_annotation is not None:
        return from_annotation, LayoutSource.TASKS_ANNOTATION
    size = podgroup_min_member(podgroup) if podgroup is not None else None
    derived = _derive_counts(pods, max_task_index(size) if size is not None else MAX_GROUP_SIZE)
    if derived:
        return derived, LayoutSource.MEMBER_PODS
    min_member = podgroup_min_member(podgroup) if podgroup is not None else None
    return {DEFAULT_TASK: min_member or 1}, LayoutSource.PODGROUP_MIN_MEMBER


def _first_annotated_layout(pods: Sequence[Mapping[str, Any]]) -> dict[str, int] | None:
    # Pods are taken in name order so every reconcile picks the same one. A pod whose
    # annotation does not parse is passed over: the webhook denies such pods, so one
    # can only exist from before injection was enabled, and the scheduler already
    # reports it in an Event; it must not stop the rest of the group being wired.
    for pod in sorted(pods, key=_pod_name):
        try:
            layout = task_layout(pod.get("metadata") or {})
        except MembershipError:
            continue
        if layout is not None:
            return layout
    return None


def _derive_counts(pods: Sequence[Mapping[str, Any]], index_limit: int) -> dict[str, int]:
    """Per task, the highest index + 1 or the active members, whichever is more; an
    index at or past `index_limit` is a MembershipError naming the limit."""
    highest: dict[str, int] = {}
    active: dict[str, int] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        task = task_name(meta)
        highest.setdefault(task, -1)
        active.setdefault(task, 0)
        try:
            index = explicit_task_index(meta)
        except IndexTooLarge:
            index = MAX_GROUP_SIZE  # past every group's limit: refused just below
        except MembershipError:
            index = None  # unreadable: passed over, as `member_index` does
        if index is not None and index >= index_limit:
            raise MembershipError(
                f"pod {_pod_name(pod)} has task index {min(index, MAX_GROUP_SIZE)}"
                f"{'+' if index >= MAX_GROUP_SIZE else ''}, past what the group's size "
                f"allows: indexes below {index_limit} (4 times minMember, or minMember + "
                f"256, at most {MAX_GROUP_SIZE}); lower the index or raise minMember"
            )
        if index is not None:
            highest[task] = max(highest[task], index)
        if not is_finished(pod):
            active[task] += 1
    counts = {task: max(highest[task] + 1, active[task]) for task in sorted(highest)}
    return {task: count for task, count in counts.items() if count > 0}


def _slots_per_task(
    pods: Iterable[Mapping[str, Any]], accelerators: Accelerators
) -> dict[str, int]:
    """A task's slots: the accelerators its pods request (every accelerator resource)."""
    slots: dict[str, int] = {}
    for pod in pods:
        task = task_name(pod.get("metadata") or {})
        gpus = pod_gpus(pod.get("spec") or {}, accelerators)
        slots[task] = max(slots.get(task, 1), gpus)
    return slots


def member_index(meta: Mapping[str, Any]) -> int | None:
    """A pod's task index, or None when it has none or it does not parse.

    Used when reading other pods: one pod's bad index (possible only for pods admitted
    before injection was enabled) must not break the wiring of the whole group.
    """
    try:
        return explicit_task_index(meta)
    except MembershipError:
        return None


def is_finished(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in FINISHED_PHASES


def is_deleting(pod: Mapping[str, Any]) -> bool:
    """The pod is being deleted (terminating): its controller may already replace it."""
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def _pod_name(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("name") or "")


def _podgroup_name(podgroup: Mapping[str, Any]) -> str:
    meta = podgroup.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name') or '?'}"
