"""The records `GangCore` keeps: a group's state (`GroupState`) and the timeouts (`Timeouts`).

Pure. Apart from `GangCore` (domain/gang.py), so that a module of its own can make
them without importing it.
"""

from __future__ import annotations

from dataclasses import dataclass

from extender.domain.queue import QueueRank


@dataclass
class GroupState:
    message: str = ""
    retry_after: float = 0.0
    shortfall_generation: tuple[int, int] | None = None
    first_seen: float | None = None
    waiting: bool = True
    # Its place in the queue of held gangs (domain/queue.py), from its members the
    # last time it was tried; None before that.
    rank: QueueRank | None = None


@dataclass
class Timeouts:
    schedule_timeout_seconds: float
    bind_barrier_timeout_seconds: float
    replan_backoff_seconds: float
    # Starvation (domain/reservations.py): a gang at the head of the queue that has
    # waited this long reserves its nodes, for at most reservation_max_seconds at once.
    starvation_seconds: float = 60.0
    reservation_max_seconds: float = 300.0
    # How long a preemptor's plan holds the room its victims free (they get their
    # termination grace period), and how long a unit whose eviction the API server
    # refused (a PodDisruptionBudget) is left out of the next choice.
    preemption_hold_seconds: float = 120.0
