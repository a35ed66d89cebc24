"""The order held gangs are planned in: pod priority first, then age.

Pure. Before `GangPlanning.try_plan` (domain/gang/gang_planning.py) plans a gang, the core's queue
part (domain/queue/gang_queue.py) asks `gangs_ahead` and plans the held gangs ahead of
it first, so a lower gang only gets what the gangs ahead cannot use now (backfill).
Plain pods are not queued here: they keep kube-scheduler's own order.

A gang's place (`QueueRank`):
 - priority: the highest `spec.priority` of its active members (set by
   kube-scheduler's admission from the PriorityClass; 0 without one). The highest
   rather than the first member's because kube-scheduler pops a gang's
   highest-priority member first, so that member is the one asking for the gang;
   a Job's members share one template, so they normally agree anyway.
 - age: the creation time of its oldest active member (older first).
 - then namespace/name, so the order is total and the same on every replica.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from extender.domain.objects.membership import GroupKey
from extender.domain.objects.model import PodInfo


@dataclass(frozen=True)
class QueueRank:
    """Where a held gang stands in the queue."""

    key: GroupKey
    priority: int
    created: float

    @property
    def order(self) -> tuple[int, float, str, str]:
        """Sort key: higher priority first, then older, then by name."""
        return (-self.priority, self.created, self.key.namespace, self.key.name)

    def is_ahead_of(self, other: QueueRank) -> bool:
        return self.order < other.order


def rank_of(key: GroupKey, members: Sequence[PodInfo]) -> QueueRank:
    """A group's place from its members (none yet: priority 0, created at 0)."""
    if not members:
        return QueueRank(key, 0, 0.0)
    return QueueRank(
        key,
        priority=max(m.priority for m in members),
        created=min(m.created for m in members),
    )


def queue_order(ranks: Iterable[QueueRank]) -> list[QueueRank]:
    """The held gangs, first to be planned first."""
    return sorted(ranks, key=lambda r: r.order)


def gangs_ahead(rank: QueueRank, held: Iterable[QueueRank]) -> list[QueueRank]:
    """The held gangs planned before `rank`'s, in queue order (itself excluded)."""
    return queue_order(h for h in held if h.key != rank.key and h.is_ahead_of(rank))
