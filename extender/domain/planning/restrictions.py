"""kube-scheduler's last word on each member's nodes, as a plan should read it now.

The core keeps, per member, the nodes kube-scheduler's own filters offered it the
last time it asked (`NodeRestriction`, an allow- or a deny-list), so that a plan
avoids nodes those filters refuse (affinity, ports, volumes). That word is about
the nodes as kube-scheduler saw them then. Two ways it goes stale, both read here:

- A node joined, or changed in a way the core reads (became ready and lost its
  not-ready taint, was uncordoned, relabelled, resized), after the word was said:
  the word judged the old node or none. `CurrentRestrictions` reads the kept words
  through the snapshot's node news order: an allow-list learnt before some nodes'
  news is widened by them, once (the widened one is kept), so a node event costs
  nothing here and a read costs the nodes with news since. A deny-list already
  admits every node it does not name.
- kube-scheduler had not seen that news yet when it asked: its informer lags our
  watch, so a member asked just after a node's news is offered the candidates of
  kube-scheduler's older view, which omit the node. `UnseenNodes` keeps the nodes
  with news that no filter's candidates (anyone's) have named since: their absence
  from a member's candidates is not a refusal (`offered_or_unseen`), and a member
  planned on one waits for kube-scheduler to offer it rather than dropping the
  plan. A node named in any filter's candidates after its news is seen: from then
  on its absence is kube-scheduler's refusal, kept (kube-scheduler asks one pod at a
  time, so each later filter is answered from a view that has the node). A node that
  a broad filter (one that scanned the nodes: not a one-node ask on the pod's
  nominated node) leaves out once `UNSEEN_GRACE_SECONDS` have passed since its news
  counts as seen too (a node every pod's filters refuse, for reasons the planner
  does not model), and a plan still waiting for a member there is dropped and made
  again. A one-node ask says nothing of the other nodes: with members nominated on
  their planned nodes (and gated ones, nominated before kube-scheduler sees them)
  every filter of a run can be one, and counting the clock alone dropped plans on
  nodes kube-scheduler was never asked about (2 of 20 gangs at 40 nodes). A node
  still unnamed `UNSEEN_CEILING_SECONDS` after its news, with no broad filter since,
  counts as seen without dropping anything.

Without these, the demo's gang (held on a 2-GPU node, a 4-GPU node joining) was
split over both nodes: members asked while the new node was not ready, or before
kube-scheduler saw it ready, kept to the old node. Pure: no I/O; time is passed in.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field

from extender.domain.cluster.ledger import Plan
from extender.domain.cluster.snapshot import ClusterSnapshot
from extender.domain.planning.planner import NodeRestriction

# The most node names kept per member as kube-scheduler's word (an allow- or a
# deny-list); a longer word is dropped (every node admitted), so memory stays bounded.
RESTRICTION_MEMORY_LIMIT = 256


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
        news = self._snapshot.node_news
        if kept.allowed is None or kept.learnt_at is None or kept.learnt_at >= news:
            return kept
        newer = self._snapshot.news_since(kept.learnt_at)
        widened = NodeRestriction(
            allowed=kept.allowed.union(newer) if newer else kept.allowed, learnt_at=news
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
    return NodeRestriction(allowed=allowed, denied=denied, learnt_at=snapshot.node_news)


def admitting_preemption_nodes(
    kept: MutableMapping[str, NodeRestriction],
    snapshot: ClusterSnapshot,
    uid: str,
    nodes: Iterable[str],
    *,
    memory_limit: int,
) -> bool:
    """Widen `uid`'s kept word by the nodes kube-scheduler's preemption proposed for it.

    kube-scheduler runs preemption when no node passes its filters, and proposes the
    nodes its filters pass once their lower-priority pods are gone. A member's last
    filter, said while other nodes had room, named none of them (they were full), and
    with every node full kube-scheduler filters it no more: kept as it was, that word
    would refuse every node the gang could preempt on, until its starvation fence.
    An allow-list past `memory_limit` names is dropped (every node admitted), as a
    filter's would be. Whether the kept word changed.
    """
    current = CurrentRestrictions(kept, snapshot).get(uid)
    if current is None:
        return False
    proposed = frozenset(n for n in nodes if n in snapshot.nodes)
    if current.allowed is not None:
        if proposed <= current.allowed:
            return False
        allowed = current.allowed | proposed
        if len(allowed) <= memory_limit:
            kept[uid] = learnt_now(snapshot, allowed=allowed)
            return True
    else:
        denied = current.denied - proposed
        if denied == current.denied:
            return False
        if denied:
            kept[uid] = learnt_now(snapshot, denied=denied)
            return True
    del kept[uid]
    return True


# How long after a node's news (noticed on this service's clock) its absence from the
# filters' candidates is not read as a refusal, unless some filter names it first.
# kube-scheduler's informer lag is well under a second on a healthy control plane;
# the bound is what a node that no pod is ever offered costs a plan placed on it.
UNSEEN_GRACE_SECONDS = 10.0
# Past this, a node no filter named counts as seen even with no broad filter to say
# so: the noticed set stays bounded (after 5,000 nodes join, with members nominated).
UNSEEN_CEILING_SECONDS = 60.0


@dataclass
class UnseenNodes:
    """The nodes whose news (joining, a change) no filter's candidates have named yet.

    Read lazily: `catch_up` notes the snapshot's node news since the last call with
    the time it is called at (the reconcile tick and every filter call it), and takes
    out the nodes the filter's candidates name. Costs nothing while empty, which is
    all but the moments after a node's news.
    """

    grace_seconds: float = UNSEEN_GRACE_SECONDS
    ceiling_seconds: float = UNSEEN_CEILING_SECONDS
    # Node -> when its news was noticed, oldest first (news again moves it last).
    noticed: dict[str, float] = field(default_factory=dict)
    # The snapshot's node news read so far; None before the first look, which takes
    # the nodes there are then as seen (kube-scheduler schedules nothing before its
    # caches have synced, and this service starts beside it).
    news_read: int | None = None
    # When the last broad filter (one that scanned the nodes) was answered.
    last_broad_filter: float | None = None

    def catch_up(
        self,
        snapshot: ClusterSnapshot,
        now: float,
        *,
        seen: Sequence[str] = (),
        broad: bool = False,
    ) -> list[str]:
        """Note the news since the last call and the nodes a filter's candidates name
        (`seen`; `broad`: that filter scanned the nodes); return the nodes a broad
        filter left out past their grace. The candidates are taken first, so a node
        named by the call that would expire it is seen."""
        news = snapshot.node_news
        if self.news_read is None:
            self.news_read = news
        elif news != self.news_read:
            for name in reversed(snapshot.news_since(self.news_read)):
                self.noticed.pop(name, None)
                self.noticed[name] = now
            self.news_read = news
        if seen:
            self.saw(seen)
        if broad:
            self.last_broad_filter = now
        expired: list[str] = []
        forgotten: list[str] = []
        for name, since in self.noticed.items():
            if now - since < self.grace_seconds:
                break
            if self.last_broad_filter is not None and (
                self.last_broad_filter - since >= self.grace_seconds
            ):
                expired.append(name)
            elif now - since >= self.ceiling_seconds:
                forgotten.append(name)
        for name in (*expired, *forgotten):
            del self.noticed[name]
        return [name for name in expired if name in snapshot.nodes]

    def saw(self, candidates: Sequence[str]) -> None:
        """A filter's candidates: kube-scheduler has seen the news of every node named."""
        if self.noticed:
            # One C-level pass over the candidates, which stops once all are found.
            for name in set(self.noticed).intersection(candidates):
                del self.noticed[name]

    def unseen(self, node: str) -> bool:
        return node in self.noticed

    def offered_or_unseen(self, candidates: Sequence[str], nodes: Container[str]) -> Sequence[str]:
        """A member's candidates read as kube-scheduler's word: the nodes it offered and
        the ones (of `nodes`, the snapshot's) it has not seen yet (after
        `saw(candidates)`, none of them offered)."""
        if not self.noticed:
            return candidates
        return [*candidates, *(name for name in self.noticed if name in nodes)]


def waiting_on(plans: Iterable[Plan], node: str) -> list[Plan]:
    """The plans not released yet with a member planned on `node` that has not reached
    bind there: what a node kube-scheduler never offered holds up."""
    return [
        plan
        for plan in plans
        if not plan.released and any(plan.placements[uid] == node for uid in plan.waiting_for)
    ]
