"""Prioritize scores: how full of GPUs each node is, kept on a board.

A node's score is its GPU fill after bound pods and reservations, 0..MAX_SCORE
(binpack: fuller scores higher; spread: inverted). A node without GPUs scores 0.
Why a board: prioritize comes for every pod with every feasible node (5,000 on a
large cluster), while a bind changes one node; scoring all of them per request
was most of prioritize's cost. The snapshot and the ledger record which nodes'
capacity changed; only those are rescored.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

from extender.domain.ledger import Ledger
from extender.domain.policy import Policy, Strategy
from extender.domain.quantity import GPU
from extender.domain.snapshot import ClusterSnapshot

# kube-scheduler's extender scores run 0..10 (extenderv1.MaxExtenderPriority).
MAX_SCORE = 10


def node_score(node: str, snapshot: ClusterSnapshot, ledger: Ledger, policy: Policy) -> int:
    """GPU fill after bound pods and reservations, 0..MAX_SCORE (spread: inverted)."""
    info = snapshot.nodes.get(node)
    total = info.allocatable.get(GPU, 0) if info else 0
    if total <= 0:
        return 0
    free = total - snapshot.used(node).get(GPU, 0) - ledger.reserved(node).get(GPU, 0)
    used_fraction = (total - max(0, free)) / total
    if policy.strategy is Strategy.SPREAD:
        used_fraction = 1 - used_fraction
    return round(used_fraction * MAX_SCORE)


@dataclass
class NodeScoreBoard:
    """Node -> score for the nodes that score above 0; absent nodes score 0."""

    scores: dict[str, int] = field(default_factory=dict)

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
        for node in changed:
            score = node_score(node, snapshot, ledger, policy)
            if score:
                self.scores[node] = score
            else:
                self.scores.pop(node, None)
        return self.scores
