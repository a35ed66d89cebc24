"""Which members a gang's plan takes: enough for minMember and for every task minimum.

`choose_members` is a pure function of the group's active members (oldest first)
and its size (`GroupSpec.min_member`, `GroupSpec.min_task_member`). A member's
task is its `gang-extender.io/task` label (default `worker`); bound members count
toward minMember and toward their task's minimum.

Decision order:
 1. Fewer members exist than minMember, or than some task's minimum (a task that
    no member carries has 0) -> `MembersMissing`: the group waits, and the hold
    message names what is short ("task master: 0/1 members exist").
 2. Else the member sets to try planning, in order (`MemberSets`), the first that
    fits is planned:
    a. every unbound member;
    b. when smaller, the fewest that still meet every task minimum and minMember:
       each task's missing members first (its oldest unbound ones), then the
       oldest others until minMember is reached (at least one member, so a group
       already at minMember still places one more).
    Creation order alone could plan four workers and no master for a group that
    needs {master: 1, worker: 3}: a job that never starts.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from extender.domain.objects.limits import listing
from extender.domain.objects.model import PodInfo


@dataclass(frozen=True)
class TaskShortage:
    """A task with fewer members in existence than its minimum."""

    task: str
    exist: int
    minimum: int

    def __str__(self) -> str:
        return f"task {self.task}: {self.exist}/{self.minimum} members exist"


@dataclass(frozen=True)
class MembersMissing:
    """The members that exist cannot make a plan: too few in all, or for some task."""

    exist: int
    min_member: int
    tasks: tuple[TaskShortage, ...] = ()

    def __str__(self) -> str:
        parts = (
            [f"{self.exist}/{self.min_member} members exist"]
            if self.exist < self.min_member
            else []
        )
        parts.append(listing((str(task) for task in self.tasks), sep="; "))
        return "; ".join(part for part in parts if part)


@dataclass(frozen=True)
class MemberSets:
    """Sets of unbound members to try planning, in order; the first that fits is planned."""

    attempts: tuple[tuple[PodInfo, ...], ...]


def choose_members(
    members: Sequence[PodInfo],
    *,
    min_member: int,
    task_minimums: Mapping[str, int] | None,
) -> MemberSets | MembersMissing:
    """The member sets to try for a group, or what it is missing (module docstring)."""
    minimums = task_minimums or {}
    exist_by_task = Counter(m.task for m in members)
    short = tuple(
        TaskShortage(task, exist_by_task[task], minimum)
        for task, minimum in minimums.items()
        if exist_by_task[task] < minimum
    )
    if len(members) < min_member or short:
        return MembersMissing(len(members), min_member, short)

    unbound = [m for m in members if not m.is_bound]
    bound_by_task = Counter(m.task for m in members if m.is_bound)
    chosen: set[str] = set()
    for task, minimum in minimums.items():
        missing = minimum - bound_by_task[task]
        for member in unbound:
            if missing <= 0:
                break
            if member.task == task:
                chosen.add(member.uid)
                missing -= 1
    need = max(1, min_member - (len(members) - len(unbound)))
    for member in unbound:
        if len(chosen) >= need:
            break
        chosen.add(member.uid)
    everyone = tuple(unbound)
    fewest = tuple(m for m in unbound if m.uid in chosen)
    if len(fewest) < len(everyone):
        return MemberSets((everyone, fewest))
    return MemberSets((everyone,))


def tasks_left_out(
    chosen: Sequence[PodInfo], unplaced: Collection[str], task_minimums: Mapping[str, int] | None
) -> str:
    """Which tasks with a minimum lost members in a failed placement ("" when none did).

    Says, beside the planner's shortfall, whose members do not fit:
    "task master (0/1 placeable), task worker (2/3 placeable)". Tasks without a
    minimum are not named.
    """
    left_out = set(unplaced)
    # One pass over the members, not one per task (20,000 tasks x members was the cost).
    of_task = Counter(m.task for m in chosen)
    lost = Counter(m.task for m in chosen if m.uid in left_out)
    return listing(
        f"task {task} ({of_task[task] - lost[task]}/{of_task[task]} placeable)"
        for task in task_minimums or {}
        if lost[task]
    )
