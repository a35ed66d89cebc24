"""The records `GangCore` keeps per group, and what one of its parts may use of another.

Pure. `GangCore` (domain/gang.py) is one object composed of parts, one module a
concern (domain/gang_*.py). Each part subclasses `GangParts`, which declares the
state the parts read and the verbs one part asks of another, so mypy checks every
part against them; `GangCore` is the one class that has them all.

Two verbs are not declared here (a declaration would repeat their long signatures):
their callers reach them on `GangCore` itself, a `cast` that always holds. They are
the filter's steps 4-7 (`GangCore._try_plan`), which the queue runs for the gangs
ahead, a starving gang once its GPUs are free and the watch for a held group a
change completes, and `_new_plan`, which a preemptor's hold shares with a plain plan.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING

from extender.domain.decisions import Effect, PlaceholderCreate
from extender.domain.held_queue import HeldEntry, HeldQueue
from extender.domain.ledger import Ledger, Plan
from extender.domain.membership import GroupKey
from extender.domain.model import PodInfo, Resources
from extender.domain.planner import NodeRestriction
from extender.domain.policy import Policy
from extender.domain.queue import QueueRank
from extender.domain.reservations import Reservation
from extender.domain.scoring import NodeScoreBoard
from extender.domain.shortfalls import ShortfallMemo
from extender.domain.snapshot import ClusterSnapshot


@dataclass
class GroupState:
    message: str = ""
    retry_after: float = 0.0
    shortfall_generation: tuple[int, int] | None = None
    waiting: bool = True
    # Its place in the queue of held gangs (domain/queue.py), from its members the
    # last time it was tried; None before that.
    rank: QueueRank | None = None
    # The gang its message says it waits behind, if any: the kept "does not fit" is
    # not answered once that gang stops holding a place (its message would be stale).
    behind: GroupKey | None = None


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
    # How long a unit whose eviction the API server forbade (403, 422) is left out.
    preemption_forbidden_seconds: float = 900.0


class GangParts:
    """The state and the verbs of `GangCore` its parts use; see `GangCore` for each field's reason.

    Declarations only: at run time the class is empty, and `GangCore` (a dataclass)
    has the fields. The verbs are declared for mypy alone, abstract, so it refuses to
    instantiate a `GangCore` that lacks one.
    """

    policy: Policy
    timeouts: Timeouts
    snapshot: ClusterSnapshot
    ledger: Ledger
    groups: dict[GroupKey, GroupState]
    effects: list[Effect]
    restrictions: dict[str, NodeRestriction]
    offered: dict[str, frozenset[str] | None]
    unasked: set[GroupKey]
    reservations: dict[GroupKey, Reservation]
    given_up: dict[GroupKey, tuple[str, ...]]
    touched: set[GroupKey]
    starvation_checked: float
    held_since: dict[GroupKey, float]
    starving_inputs: dict[GroupKey, tuple[int, bool, float | None]]
    preemption_enabled: bool
    refused_evictions: dict[str, float]
    evicting: set[str]
    placeholders: bool
    placeholder_requests: dict[tuple[str, str], float]
    placeholder_creating: dict[str, tuple[float, PlaceholderCreate]]
    fences: bool
    fence_requests: dict[tuple[str, str], float]
    fenced_plans: dict[GroupKey, tuple[Plan, frozenset[str]]]
    shortfalls: ShortfallMemo
    restrictions_version: int
    fits_when_empty: dict[GroupKey, tuple[tuple[int, int, int], bool]]
    held_view: HeldQueue | None
    held_view_inputs: tuple[int, int]
    held_entries: dict[GroupKey, tuple[tuple[int, int, bool], HeldEntry | None]]
    held_planned: set[GroupKey]
    fits_by_shape: dict[object, bool]
    fits_by_shape_nodes: int
    score_board: NodeScoreBoard
    lowest_priority_seen: int | None

    if TYPE_CHECKING:
        # The filter and expiry (domain/gang.py).
        @staticmethod
        @abstractmethod
        def _say(state: GroupState, message: str) -> str: ...
        @abstractmethod
        def _drop(
            self, plan: Plan, reason: str, now: float, *, timed_out: bool = False
        ) -> None: ...
        @abstractmethod
        def expire(self, now: float) -> None: ...
        @abstractmethod
        def holds_a_place(self, key: GroupKey) -> bool: ...

        # Capacity and the memo of shortfalls (domain/gang_room.py).
        @abstractmethod
        def _absorb_changes(self) -> None: ...
        @abstractmethod
        def free_after_reservations(self, node: str) -> Resources: ...

        # The watch's observations (domain/gang_watch.py).
        @abstractmethod
        def observe_pod(self, pod: PodInfo, now: float) -> None: ...
        @abstractmethod
        def group_changed(self, key: GroupKey, now: float) -> None: ...

        # Starvation reservations and placeholder pods (domain/gang_starvation.py).
        @abstractmethod
        def starving_holds(self) -> dict[str, tuple[GroupKey, int]]: ...
        @abstractmethod
        def _starving_refusal(self, pod: PodInfo, node: str, held: tuple[GroupKey, int]) -> str: ...
        @abstractmethod
        def _end_reservation(self, key: GroupKey) -> None: ...
        @abstractmethod
        def _placeholders_on(self, group: GroupKey, nodes: Collection[str]) -> bool: ...

        @abstractmethod
        def _freed_on(self, node: str | None, now: float) -> None: ...

        # The bind barrier (domain/gang_barrier.py).
        @abstractmethod
        def _placeholder_gone(self, group: GroupKey, now: float) -> None: ...
        @abstractmethod
        def _settle(self, plan: Plan, now: float) -> None: ...
        @abstractmethod
        def _member_gone(self, plan: Plan, uid: str, reason: str, now: float) -> None: ...
        @abstractmethod
        def _bound_member_gone(self, pod: PodInfo, reason: str, now: float) -> None: ...

        # Gang preemption (domain/gang_preemption.py).
        @abstractmethod
        def _complete_preempted_gang(self, pod: PodInfo, group: GroupKey) -> None: ...
