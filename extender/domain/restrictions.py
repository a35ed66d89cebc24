"""kube-scheduler's last word on each member's nodes, as a plan should read it now.

The core keeps, per member, the nodes kube-scheduler's own filters offered it the
last time it asked (`NodeRestriction`, an allow- or a deny-list), so that a plan
avoids nodes those filters refuse (affinity, ports, volumes). That word is about
the nodes that existed then: a node that joined the cluster afterwards was never
judged, so it is not refused. Reading an allow-list as given would refuse it, and a
gang whose members were last asked before a big node joined was split over the old
nodes instead of planned onto the new one (issue: the demo's gang over two nodes).

`CurrentRestrictions` reads the kept restrictions through the snapshot's arrival
order: an allow-list learnt before some nodes joined is widened by them, once (the
widened one is kept), so a node event costs nothing here and a read costs the
nodes that joined since. A deny-list already admits every node it does not name.
Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, MutableMapping

from extender.domain.planner import NodeRestriction
from extender.domain.snapshot import ClusterSnapshot


class CurrentRestrictions(Mapping[str, NodeRestriction]):
    """The restrictions kept in `kept`, each widened by the nodes that joined since."""

    __slots__ = ("_asked", "_kept", "_snapshot")

    def __init__(
        self,
        kept: MutableMapping[str, NodeRestriction],
        snapshot: ClusterSnapshot,
        asked: Mapping[str, NodeRestriction] | None = None,
    ) -> None:
        self._kept = kept
        self._snapshot = snapshot
        # The word of the filter being answered, over what was kept for that member.
        self._asked = asked or {}

    def with_asked(self, uid: str, restriction: NodeRestriction) -> CurrentRestrictions:
        """This view with the word of the filter being answered for `uid` (not kept)."""
        return CurrentRestrictions(self._kept, self._snapshot, {**self._asked, uid: restriction})

    def __getitem__(self, uid: str) -> NodeRestriction:
        found = self.get(uid)
        if found is None:
            raise KeyError(uid)
        return found

    def get(  # type: ignore[override]  # Mapping.get's overloads; same behaviour, no KeyError path
        self, uid: str, default: NodeRestriction | None = None
    ) -> NodeRestriction | None:
        asked = self._asked.get(uid)
        if asked is not None:
            return asked
        kept = self._kept.get(uid)
        return default if kept is None else self._current(uid, kept)

    def __iter__(self) -> Iterator[str]:
        yield from self._asked
        yield from (uid for uid in self._kept if uid not in self._asked)

    def __len__(self) -> int:
        return len(self._kept) + sum(1 for uid in self._asked if uid not in self._kept)

    def __contains__(self, uid: object) -> bool:
        return uid in self._asked or uid in self._kept

    def _current(self, uid: str, kept: NodeRestriction) -> NodeRestriction:
        arrivals = self._snapshot.node_arrivals
        if kept.allowed is None or kept.learnt_at is None or kept.learnt_at >= arrivals:
            return kept
        newer = self._snapshot.arrived_since(kept.learnt_at)
        widened = NodeRestriction(
            allowed=kept.allowed.union(newer) if newer else kept.allowed, learnt_at=arrivals
        )
        self._kept[uid] = widened
        return widened


def learnt_now(
    snapshot: ClusterSnapshot,
    *,
    allowed: frozenset[str] | None = None,
    denied: frozenset[str] = frozenset(),
) -> NodeRestriction:
    """kube-scheduler's word on a member as it says it, about the nodes there are now."""
    return NodeRestriction(allowed=allowed, denied=denied, learnt_at=snapshot.node_arrivals)
