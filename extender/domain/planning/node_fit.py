"""Whether a member may go to a node: its selector, its tolerations, the node's
cordon, and kube-scheduler's last word on it (`NodeRestriction`).

Pure; what the planner (domain/planning/planner.py, which re-exports these names) and the
queue's view of wanted nodes ask of one node and one member.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from extender.domain.objects.model import NodeInfo, PodInfo, Toleration


@dataclass(frozen=True)
class NodeRestriction:
    """Nodes a member may use, as kube-scheduler's own filters last said for it.

    Kept as whichever of allow-list or deny-list is smaller, so memory stays
    bounded on large clusters. `learnt_at` is the snapshot's node news count when
    kube-scheduler said it (None: not known, read as given): a node that joined or
    changed later was judged as it was, or not at all, so an allow-list does not
    refuse it (domain/planning/restrictions.py widens it, and reads a node kube-scheduler has
    not offered anyone since its news as not refused either).
    """

    allowed: frozenset[str] | None = None
    denied: frozenset[str] = frozenset()
    # Not compared: the same word said again after a node joined changes no memo that
    # the node's news (nodes_generation) did not already void.
    learnt_at: int | None = field(default=None, compare=False)

    def permits(self, node: str) -> bool:
        if self.allowed is not None:
            return node in self.allowed
        return node not in self.denied


def node_accepts(node: NodeInfo, pod: PodInfo) -> bool:
    """Static eligibility: cordon, taints, nodeSelector and the node a left-over claim
    ties the pod to (affinity is left to kube-scheduler)."""
    if pod.claims_pin is not None and node.name != pod.claims_pin:
        return False
    return node_admits(node, pod.node_selector, pod.tolerations)


def node_admits(
    node: NodeInfo, node_selector: Mapping[str, str], tolerations: Sequence[Toleration]
) -> bool:
    """`node_accepts` for a pod with this nodeSelector and these tolerations."""
    if node.unschedulable:
        return False
    for taint in node.taints:
        if taint.effect not in ("NoSchedule", "NoExecute"):
            continue
        if not any(t.tolerates(taint) for t in tolerations):
            return False
    return all(node.labels.get(k) == v for k, v in node_selector.items())
