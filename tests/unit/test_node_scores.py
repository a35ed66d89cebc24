"""Prioritize scores: a node's GPU fill, 0..10, kept on a board (pure).

The contract a user sees in kube-scheduler's scores: binpack scores a fuller node
higher, spread inverts it; bound pods and reservations both count as used; a node
without GPUs, or unknown, scores 0; the board rescores a node whenever its
capacity or reservations change and forgets nodes that fall to 0.
"""

from __future__ import annotations

import pytest

from extender.domain.cluster.ledger import Ledger
from extender.domain.cluster.snapshot import ClusterSnapshot
from extender.domain.objects.model import NodeInfo, PodInfo
from extender.domain.objects.policy import Policy, Strategy
from extender.domain.planning.scoring import MAX_SCORE, NodeScoreBoard, node_score
from tests.builders import make_node, make_pod
from tests.builders import reserve_gpus as reserve

BINPACK = Policy()
SPREAD = Policy(name="spread", strategy=Strategy.SPREAD)


def cluster(gpus: int, used: int) -> ClusterSnapshot:
    snapshot = ClusterSnapshot()
    snapshot.upsert_node(NodeInfo.from_api(make_node("n0").gpus(gpus).obj()))
    if used:
        snapshot.upsert_pod(PodInfo.from_api(make_pod("busy").gpus(used).node("n0").obj()))
    return snapshot


@pytest.mark.parametrize(
    ("gpus", "used", "reserved", "binpack", "spread"),
    [
        pytest.param(8, 0, 0, 0, MAX_SCORE, id="empty node"),
        pytest.param(8, 8, 0, MAX_SCORE, 0, id="full node"),
        pytest.param(8, 2, 0, 2, 8, id="a quarter used: 2.5 rounds to even"),
        pytest.param(8, 3, 0, 4, 6, id="3 of 8 used"),
        pytest.param(8, 2, 4, 8, 2, id="reservations count as used"),
        pytest.param(4, 2, 4, MAX_SCORE, 0, id="over-committed counts as full, not more"),
        pytest.param(0, 0, 0, 0, 0, id="a node with no GPUs scores 0 either way"),
    ],
)
def test_a_nodes_score_is_its_gpu_fill(
    gpus: int, used: int, reserved: int, binpack: int, spread: int
) -> None:
    snapshot, ledger = cluster(gpus, used), Ledger()
    if reserved:
        reserve(ledger, "n0", reserved)
    assert node_score("n0", snapshot, ledger, BINPACK) == binpack
    assert node_score("n0", snapshot, ledger, SPREAD) == spread


def test_an_unknown_node_scores_0() -> None:
    assert node_score("gone", ClusterSnapshot(), Ledger(), SPREAD) == 0


def test_the_board_rescores_a_node_when_its_reservations_change() -> None:
    snapshot, ledger, board = cluster(8, 4), Ledger(), NodeScoreBoard()
    assert board.scores_for(["n0", "n1"], snapshot, ledger, BINPACK) == {"n0": 5, "n1": 0}
    reserve(ledger, "n0", 4)
    assert board.scores_for(["n0"], snapshot, ledger, BINPACK) == {"n0": MAX_SCORE}
    assert snapshot.capacity_changed == set() and ledger.capacity_changed == set()


def test_the_board_rescores_a_node_when_a_pod_on_it_finishes_and_forgets_it_at_0() -> None:
    snapshot, ledger, board = cluster(8, 4), Ledger(), NodeScoreBoard()
    assert board.refresh(snapshot, ledger, BINPACK) == {"n0": 5}
    snapshot.delete_pod("uid-default-busy")
    assert board.refresh(snapshot, ledger, BINPACK) == {}
    assert board.scores_for(["n0"], snapshot, ledger, BINPACK) == {"n0": 0}


def test_the_board_keeps_a_score_until_that_node_changes() -> None:
    snapshot, ledger, board = cluster(8, 8), Ledger(), NodeScoreBoard()
    board.refresh(snapshot, ledger, BINPACK)
    snapshot.upsert_node(NodeInfo.from_api(make_node("n1").gpus(8).obj()))
    assert board.refresh(snapshot, ledger, BINPACK) == {"n0": MAX_SCORE}
