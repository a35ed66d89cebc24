"""Prioritize scores at their edges (domain/planning/scoring.py): nodes that advertise no GPUs,
1-GPU nodes, reservations of a resource a node lacks, and the board's journal as a
reader that keeps its own copy sees it."""

from __future__ import annotations

from extender.domain.cluster.ledger import Ledger
from extender.domain.cluster.snapshot import ClusterSnapshot
from extender.domain.objects.model import NodeInfo, PodInfo
from extender.domain.objects.policy import Policy, Strategy
from extender.domain.objects.quantity import GPU
from extender.domain.planning.scoring import (
    MAX_SCORE,
    NodeScoreBoard,
    free_after_reservations,
    node_score,
)
from tests.builders import make_node, make_pod
from tests.builders import reserve_gpus as reserve

BINPACK = Policy()
SPREAD = Policy(name="spread", strategy=Strategy.SPREAD)


def with_node(builder_gpus: int | None) -> ClusterSnapshot:
    snapshot = ClusterSnapshot()
    node = make_node("n0")
    node = node.cpu_only() if builder_gpus is None else node.gpus(builder_gpus)
    snapshot.upsert_node(NodeInfo.from_api(node.obj()))
    return snapshot


def test_a_node_advertising_no_gpus_scores_0_even_with_gpus_reserved_on_it() -> None:
    snapshot, ledger = with_node(None), Ledger()
    assert node_score("n0", snapshot, ledger, BINPACK) == 0
    reserve(ledger, "n0", 1)
    assert node_score("n0", snapshot, ledger, BINPACK) == 0
    assert node_score("n0", snapshot, ledger, SPREAD) == 0


def test_a_one_gpu_node_scores_by_its_one_gpu() -> None:
    snapshot, ledger = with_node(1), Ledger()
    assert node_score("n0", snapshot, ledger, BINPACK) == 0
    assert node_score("n0", snapshot, ledger, SPREAD) == MAX_SCORE
    snapshot.upsert_pod(PodInfo.from_api(make_pod("busy").gpus(1).node("n0").obj()))
    assert node_score("n0", snapshot, ledger, BINPACK) == MAX_SCORE
    assert node_score("n0", snapshot, ledger, SPREAD) == 0


def test_a_reservation_of_a_resource_the_node_lacks_leaves_it_short_by_that_much() -> None:
    snapshot, ledger = with_node(None), Ledger()
    reserve(ledger, "n0", 2)
    free = free_after_reservations("n0", snapshot, ledger)
    assert free[GPU] == -2


def test_a_reader_at_the_journals_start_or_end_catches_up_from_it() -> None:
    snapshot, ledger, board = with_node(8), Ledger(), NodeScoreBoard()
    start = board.position
    assert board.changed_since(start) == []  # nothing changed yet: no full read
    reserve(ledger, "n0", 4)
    board.refresh(snapshot, ledger, BINPACK)
    assert board.changed_since(start) == ["n0"]
    now = board.position
    assert board.changed_since(now) == []
    assert board.changed_since(now + 1) is None  # a position the board never had


def test_the_priorities_answer_carries_its_board_so_readers_can_catch_up() -> None:
    snapshot, ledger, board = with_node(8), Ledger(), NodeScoreBoard()
    reserve(ledger, "n0", 4)
    answer = board.priorities(snapshot, ledger, BINPACK)
    assert answer.board is board
    assert dict(answer.scores) == {"n0": 5}


def test_the_journal_starts_over_only_past_twice_the_nodes_that_score() -> None:
    # One node scores, so the limit is max(2, 2 * 1) = 2 entries.
    snapshot, ledger = with_node(8), Ledger()
    board = NodeScoreBoard(journal_min_limit=2)
    start = board.position
    for name, gpus, score in (("g1", 4, 5), ("g2", 2, 8)):
        reserve(ledger, "n0", gpus, name)
        assert board.refresh(snapshot, ledger, BINPACK) == {"n0": score}
    assert board.changed_since(start) == ["n0", "n0"]  # at the limit: still reachable
    reserve(ledger, "n0", 2, "g3")
    assert board.refresh(snapshot, ledger, BINPACK) == {"n0": MAX_SCORE}
    assert board.changed_since(start) is None  # past it: read every score
    # Positions only grow: a start-over keeps counting from the changes journaled.
    assert board.position == start + 3
    assert board.changed_since(board.position) == []


def test_the_board_scores_a_full_one_gpu_node_as_full() -> None:
    snapshot, ledger = with_node(1), Ledger()
    board = NodeScoreBoard()
    assert board.refresh(snapshot, ledger, BINPACK) == {}
    snapshot.upsert_pod(PodInfo.from_api(make_pod("busy").gpus(1).node("n0").obj()))
    assert board.refresh(snapshot, ledger, BINPACK) == {"n0": MAX_SCORE}


def test_the_room_journal_overflows_only_past_twice_the_nodes() -> None:
    # One node, so the limit is max(2, 2 * 1) = 2 room changes between drains.
    snapshot, ledger = with_node(8), Ledger()
    board = NodeScoreBoard(journal_min_limit=2)
    board.refresh(snapshot, ledger, BINPACK)
    board.drain_room_changes()
    for name in ("g1", "g2"):
        reserve(ledger, "n0", 1, name)
        board.refresh(snapshot, ledger, BINPACK)
    assert board.rooms_overflowed is False
    reserve(ledger, "n0", 1, "g3")
    board.refresh(snapshot, ledger, BINPACK)
    assert board.drain_room_changes() is None  # past it: every node may have changed


def test_a_new_strategy_orders_the_nodes_afresh() -> None:
    snapshot, ledger = with_node(8), Ledger()
    board = NodeScoreBoard()
    board.refresh(snapshot, ledger, BINPACK)
    assert board.order is not None and board.order.strategy is Strategy.BINPACK
    board.refresh(snapshot, ledger, SPREAD)
    assert board.order is not None and board.order.strategy is Strategy.SPREAD
