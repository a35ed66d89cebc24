"""Prioritize scores: how full of GPUs each node is, kept on a board.

A node's score is its GPU fill after bound pods and reservations, 0..MAX_SCORE
(binpack: fuller scores higher; spread: inverted). A node without GPUs scores 0.
"GPUs" are every accelerator resource the node offers (the snapshot's matcher,
domain/objects/accelerators.py), added up: a node offers one kind in practice.
Why a board: prioritize comes for every pod with every feasible node (5,000 on a
large cluster), while a bind changes one node; scoring all of them per request
was most of prioritize's cost. The snapshot and the ledger record which nodes'
capacity changed; only those are rescored.

The answer (`Priorities`) lists only the nodes that score above 0: kube-scheduler
adds nothing for a node an extender leaves out, so a zero need not travel. The
board keeps a journal of the nodes whose score changed, so a reader that keeps
its own per-node copy (the HTTP layer keeps each node's wire bytes) catches up on
what changed instead of reading every node per request.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

from extender.domain.cluster.ledger import Ledger
from extender.domain.cluster.snapshot import ClusterSnapshot
from extender.domain.objects.model import Resources
from extender.domain.objects.policy import Policy, Strategy
from extender.domain.planning.node_order import NodeOrder

# kube-scheduler's extender scores run 0..10 (extenderv1.MaxExtenderPriority).
MAX_SCORE = 10

# The journal starts over past this many entries (or twice the nodes that score, if
# more): a reader further behind than that reads every score once.
JOURNAL_MIN_LIMIT = 4096


def node_score(node: str, snapshot: ClusterSnapshot, ledger: Ledger, policy: Policy) -> int:
    """GPU fill after bound pods and reservations, 0..MAX_SCORE (spread: inverted)."""
    info = snapshot.nodes.get(node)
    if info is None:
        return 0
    offered = snapshot.accelerators.offered(info.allocatable)
    total = sum(info.allocatable[r] for r in offered)
    if total <= 0:
        return 0
    used, reserved = snapshot.used(node), ledger.reserved(node)
    free = total - sum(used.get(r, 0) + reserved.get(r, 0) for r in offered)
    return _score(total, free, policy)


def free_after_reservations(node: str, snapshot: ClusterSnapshot, ledger: Ledger) -> Resources:
    """What is free on `node` once bound pods and gang reservations are taken out."""
    free = snapshot.free(node)
    for name, value in ledger.reserved(node).items():
        free[name] = free.get(name, 0) - value
    return free


def _score(total: int, free: int, policy: Policy) -> int:
    used_fraction = (total - max(0, free)) / total
    if policy.strategy is Strategy.SPREAD:
        used_fraction = 1 - used_fraction
    return round(used_fraction * MAX_SCORE)


@dataclass
class NodeScoreBoard:
    """Node -> score for the nodes that score above 0; absent nodes score 0.

    Also each node's free capacity after bound pods and reservations (`free`), kept
    current the same way: the planner reads it for every gang it plans, and building
    it for every node per plan was most of a plan's cost on a large cluster.
    """

    scores: dict[str, int] = field(default_factory=dict)
    free: dict[str, Resources] = field(default_factory=dict)
    # Nodes whose score changed, oldest first (a node may repeat); `journal_start`
    # is the position of its first entry. Readers keep a position (`changed_since`).
    journal: list[str] = field(default_factory=list)
    journal_start: int = 0
    journal_min_limit: int = JOURNAL_MIN_LIMIT
    # Each refreshed node's free capacity before and after (None: absent), oldest
    # first, for the held gangs' memo (domain/planning/shortfalls.py), which drains it. Past
    # the journal's limit it starts over and `rooms_overflowed` says so: the reader
    # then treats every node as changed.
    room_changes: list[tuple[str, Resources | None, Resources | None]] = field(default_factory=list)
    rooms_overflowed: bool = False
    # Every node of `free` in the planner's order for the policy's strategy
    # (domain/planning/node_order.py), moved per refreshed node instead of sorted per plan.
    order: NodeOrder | None = None

    @property
    def position(self) -> int:
        """Where the journal ends now: pass it to `changed_since` later."""
        return self.journal_start + len(self.journal)

    def changed_since(self, position: int) -> list[str] | None:
        """Nodes whose score changed after `position` (repeats possible), or None when
        the journal no longer reaches back that far: then read every score."""
        if position < self.journal_start or position > self.position:
            return None
        return self.journal[position - self.journal_start :]

    def planning_order(
        self, snapshot: ClusterSnapshot, ledger: Ledger, policy: Policy
    ) -> NodeOrder:
        """Every node of `free_capacity` in the planner's order, after a refresh."""
        self.refresh(snapshot, ledger, policy)
        assert self.order is not None  # refresh keeps one
        return self.order

    def free_capacity(
        self, snapshot: ClusterSnapshot, ledger: Ledger, policy: Policy
    ) -> dict[str, Resources]:
        """Free capacity after reservations of every node, after a refresh.

        A new dict each call (adding or removing a node in it is the caller's own), but
        the per-node dicts are the board's: never mutate them (the planner copies on write).
        """
        self.refresh(snapshot, ledger, policy)
        return dict(self.free)

    def priorities(self, snapshot: ClusterSnapshot, ledger: Ledger, policy: Policy) -> Priorities:
        """The board's answer for a plain pod: every node that scores, after a refresh."""
        return Priorities(self.refresh(snapshot, ledger, policy), board=self)

    def scores_for(
        self,
        candidates: Collection[str],
        snapshot: ClusterSnapshot,
        ledger: Ledger,
        policy: Policy,
    ) -> dict[str, int]:
        """Each candidate's score, after rescoring the nodes whose capacity changed."""
        board = self.refresh(snapshot, ledger, policy)
        return {node: board.get(node, 0) for node in candidates}

    def refresh(self, snapshot: ClusterSnapshot, ledger: Ledger, policy: Policy) -> dict[str, int]:
        """Rescore the nodes whose capacity or reservations changed since the last call."""
        changed = snapshot.capacity_changed | ledger.capacity_changed
        snapshot.capacity_changed.clear()
        ledger.capacity_changed.clear()
        scores, journal, free, rooms = self.scores, self.journal, self.free, self.room_changes
        for node in changed:
            info = snapshot.nodes.get(node)
            before = free.get(node)
            if info is None:
                free.pop(node, None)
                rooms.append((node, before, None))
                score = 0
            else:
                room = free[node] = free_after_reservations(node, snapshot, ledger)
                rooms.append((node, before, room))
                offered = snapshot.accelerators.offered(info.allocatable)
                total = sum(info.allocatable[r] for r in offered)
                score = (
                    _score(total, sum(room.get(r, 0) for r in offered), policy) if total > 0 else 0
                )
            if score == scores.get(node, 0):
                continue
            if score:
                scores[node] = score
            else:
                del scores[node]
            journal.append(node)
        if self.order is None or self.order.strategy is not policy.strategy:
            # Kept for the default accelerator; a gang asking another sorts its own.
            self.order = NodeOrder.of(policy.strategy, free, snapshot.accelerators.default)
        else:
            for node in changed:
                self.order.update(node, free.get(node))
        if len(journal) > max(self.journal_min_limit, 2 * len(scores)):
            self.journal_start += len(journal)
            self.journal = []
        if len(rooms) > max(self.journal_min_limit, 2 * len(free)):
            self.room_changes = []
            self.rooms_overflowed = True
        return scores

    def drain_room_changes(
        self,
    ) -> list[tuple[str, Resources | None, Resources | None]] | None:
        """The room changes since the last drain, None when they overflowed (then
        every node may have changed)."""
        changes, self.room_changes = self.room_changes, []
        overflowed, self.rooms_overflowed = self.rooms_overflowed, False
        return None if overflowed else changes


@dataclass(frozen=True)
class Priorities:
    """Prioritize's answer for one pod: the nodes that score above 0, with their scores.

    A candidate missing from `scores` scores 0 (and a node in `scores` that is not a
    candidate is not answered). `board` is set when `scores` is the score board's own
    table, so a reader can catch up from its journal (see NodeScoreBoard).
    """

    scores: Mapping[str, int]
    board: NodeScoreBoard | None = None

    def for_candidates(self, candidates: Iterable[str]) -> dict[str, int]:
        """Every candidate's score, zeros included: the plain answer."""
        scores = self.scores
        return {node: scores.get(node, 0) for node in candidates}
