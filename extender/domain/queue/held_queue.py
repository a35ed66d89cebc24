"""The held gangs in queue order, with the nodes each could use: who waits behind whom.

Pure. `GangCore` builds one view per change of what it reads (pods, PodGroups, plans,
kube-scheduler's last word on members, the groups it knows) and asks it many
times: the starvation check asks which starving gangs are heads (no held gang
ahead of them wants any of their nodes, `heads`), the PodGroup status and the
hold message which gang a held one waits behind (`first_ahead_wanting`). Asking
every gang in turn used to rebuild the held list and every gang's wanted nodes
per question: O(held gangs x (held gangs + nodes)) once a second with many
starving gangs (9 s of CPU per pass at 200 held gangs on 1,000 nodes).

A gang's wanted nodes (those a pending member could ever use: cordon, taints,
selector, kube-scheduler's last word, a request within the node's allocatable)
are computed only when a question needs them, and once per member shape (a Job's
members share one), so the first gang ahead that wants every node answers for
all the gangs behind it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from extender.domain.objects.membership import GroupKey
from extender.domain.objects.model import NodeInfo, PodInfo
from extender.domain.planning.node_fill import fits_on
from extender.domain.planning.planner import NodeRestriction, node_accepts
from extender.domain.planning.queue import QueueRank
from extender.domain.planning.shortfalls import MemberShape


@dataclass
class WantedNodes:
    """The nodes each member could ever use, cached per member shape."""

    nodes: Mapping[str, NodeInfo]
    restrictions: Mapping[str, NodeRestriction]
    _by_shape: dict[MemberShape, frozenset[str]] = field(default_factory=dict)

    def of_member(self, member: PodInfo, allowed: Mapping[str, NodeRestriction]) -> frozenset[str]:
        """The shape's cached nodes (immutable, so handed out without a copy), narrowed
        by kube-scheduler's last word on this member when there is one."""
        shape = MemberShape.of(member)
        found = self._by_shape.get(shape)
        if found is None:
            found = self._by_shape[shape] = frozenset(self._scan(member))
        restriction = allowed.get(member.uid)
        if restriction is None:
            return found
        # kube-scheduler's last word narrows the shape's nodes: a set operation, not a
        # scan of every node per question (a filter asks it for its own member).
        if restriction.allowed is not None:
            return found & restriction.allowed
        return found - restriction.denied

    def with_restrictions(self, restrictions: Mapping[str, NodeRestriction]) -> WantedNodes:
        """The same nodes under kube-scheduler's new word: the per-shape scans depend
        on the nodes alone (cordon, taints, labels, allocatable), so they are kept. Each
        filter moves the word; scanning every node again per filter cost 8.5% of the
        service's CPU at 5,000 nodes (docs/benchmarks.md round 17)."""
        return WantedNodes(self.nodes, restrictions, self._by_shape)

    def shapes_scanned(self) -> int:
        """Member shapes whose nodes were scanned: one scan of the nodes each."""
        return len(self._by_shape)

    def _scan(self, member: PodInfo) -> set[str]:
        return {
            name
            for name, node in self.nodes.items()
            if node_accepts(node, member) and fits_on(member, node.allocatable, node)
        }

    def of_gang(
        self,
        members: Sequence[PodInfo],
        allowed: Mapping[str, NodeRestriction] | None = None,
    ) -> set[str]:
        """Nodes some pending (unbound, ungated) member could ever use."""
        allowed = self.restrictions if allowed is None else allowed
        wanted: set[str] = set()
        for member in members:
            if not member.is_bound and not member.gated:
                wanted |= self.of_member(member, allowed)
        return wanted


# A held gang's place in the queue and its members.
HeldEntry = tuple[QueueRank, Sequence[PodInfo]]


@dataclass
class HeldQueue:
    """Held gangs, first first, each with its members; wanted nodes asked lazily."""

    order: list[HeldEntry]
    wanted: WantedNodes
    _gang_wanted: dict[GroupKey, frozenset[str]] = field(default_factory=dict)

    def wanted_by(self, key: GroupKey, members: Sequence[PodInfo]) -> frozenset[str]:
        found = self._gang_wanted.get(key)
        if found is None:
            found = self._gang_wanted[key] = frozenset(self.wanted.of_gang(members))
        return found

    def asked(self, key: GroupKey) -> bool:
        """`key`'s wanted nodes were computed (they are asked for lazily)."""
        return key in self._gang_wanted

    def first_ahead_wanting(self, rank: QueueRank, nodes: Collection[str]) -> QueueRank | None:
        """The first held gang ahead of `rank` that wants one of `nodes`, or None."""
        if not nodes:
            return None
        for other, members in self.order:
            if not other.is_ahead_of(rank):
                return None
            if other.key != rank.key and not self.wanted_by(other.key, members).isdisjoint(nodes):
                return other
        return None

    def heads(self, candidates: Collection[GroupKey], node_count: int) -> list[GroupKey]:
        """Of `candidates`, in queue order, those that want some node and none that a
        held gang ahead wants (a gang that wants no node has nothing to reserve).

        Stops once the gangs looked at want every node: nobody behind is a head then.
        """
        found: list[GroupKey] = []
        taken: set[str] = set()
        for rank, members in self.order:
            if len(taken) >= node_count:
                break
            wanted = self.wanted_by(rank.key, members)
            if rank.key in candidates and wanted and taken.isdisjoint(wanted):
                found.append(rank.key)
            taken |= wanted
        return found


def held_queue(
    held: Sequence[HeldEntry],
    nodes: Mapping[str, NodeInfo],
    restrictions: Mapping[str, NodeRestriction],
    *,
    wanted: WantedNodes | None = None,
) -> HeldQueue:
    """The queue view of `held`; `wanted` carries the per-shape cache over from the last
    view when the nodes and kube-scheduler's restrictions did not change since."""
    return HeldQueue(
        order=sorted(held, key=lambda entry: entry[0].order),
        wanted=wanted if wanted is not None else WantedNodes(nodes, restrictions),
    )
