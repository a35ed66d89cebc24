"""kube-scheduler's informer lags the service's watch: property tests over node
arrivals and filter interleavings.

A model kube-scheduler sees the nodes that joined our snapshot some steps later (in
order), and asks about a gang's members from its own view: each is offered the nodes
it has seen where the member fits, less the ones its own filters refuse that member
(an anti-affinity, say). Whatever the interleaving, within the grace:
 - an answer names only nodes it was offered (kube-scheduler errors on any other);
 - with no such refusals, a plan spans no more nodes than a plan of the same gang on
   the same cluster with no word from kube-scheduler: a node it has not seen yet
   costs no gang a node;
 - a node kube-scheduler refused a member after any filter had named it (it had
   seen the node) stays refused: no plan places that member there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from extender.domain.cluster.snapshot import ClusterSnapshot, fits
from extender.domain.gang.gang import GangCore
from extender.domain.objects.membership import GroupKey
from extender.domain.objects.model import NodeInfo, PodInfo
from extender.domain.objects.policy import Policy
from extender.domain.objects.quantity import GPU
from extender.domain.planning.planner import Placement, plan_gang
from extender.domain.planning.restrictions import UNSEEN_GRACE_SECONDS, UnseenNodes
from tests.builders import make_node, make_pod
from tests.unit.test_gang_core import T0, core_with

KEY = GroupKey("default", "g")
# Steps of the model's clock: every run stays inside the grace, where a node's absence
# from candidates depends on whether kube-scheduler has seen it, not on time.
STEP_SECONDS = 0.5
MAX_EVENTS = int(UNSEEN_GRACE_SECONDS / STEP_SECONDS) - 2


def node_obj(name: str, gpus: int) -> dict[str, Any]:
    return make_node(name).gpus(gpus).obj() if gpus else make_node(name).cpu_only().obj()


def gang(workers: int) -> list[dict[str, Any]]:
    """A master without GPU and `workers` one-GPU workers, all needed."""
    size = workers + 1
    master = make_pod("g-master").group("g").min_available(size).cpu("500m").obj()
    return [master] + [
        make_pod(f"g-worker-{i}").group("g").min_available(size).gpus(1).obj()
        for i in range(workers)
    ]


@dataclass
class LaggingScheduler:
    """kube-scheduler beside the core: the nodes it has seen, in the order they joined."""

    core: GangCore
    refused: set[tuple[str, str]]  # (member name, node) its own filters refuse
    seen_by_it: list[str] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)
    # Nodes some filter's candidates named (so its later refusals are kept), and per
    # member the ones named before its last ask.
    named: set[str] = field(default_factory=set)
    named_at_last_ask: dict[str, set[str]] = field(default_factory=dict)

    def candidates(self, member: PodInfo) -> list[str]:
        return [
            name
            for name in self.seen_by_it
            if fits(member.requests, self.core.snapshot.free(name))
            and (member.name, name) not in self.refused
        ]

    def ask(self, member: PodInfo, now: float) -> None:
        offered = self.candidates(member)
        before = set(self.core.ledger.plans)
        decision = self.core.filter(member, offered, now)
        assert set(decision.nodes) <= set(offered), "answered a node kube-scheduler did not offer"
        self.named.update(offered)
        self.named_at_last_ask[member.name] = set(self.named)
        if KEY in self.core.ledger.plans and KEY not in before:
            self.check_new_plan()

    def check_new_plan(self) -> None:
        """Overridden per property."""


def run(scheduler: LaggingScheduler, old: list[str], events: list[tuple[str, int]]) -> None:
    core = scheduler.core
    scheduler.seen_by_it.extend(old)
    members = sorted(core.snapshot.members(KEY), key=lambda p: p.name)
    joined = 0
    for step, (kind, arg) in enumerate(events, start=1):
        now = T0 + step * STEP_SECONDS
        if kind == "join":
            name = f"new-{joined}"
            joined += 1
            core.snapshot.upsert_node(NodeInfo.from_api(node_obj(name, arg)))
            scheduler.pending.append(name)
        elif kind == "sees" and scheduler.pending:
            scheduler.seen_by_it.append(scheduler.pending.pop(0))
        elif kind == "ask":
            scheduler.ask(members[arg % len(members)], now)
        plan = core.ledger.plans.get(KEY)
        if plan is not None:
            used: dict[str, int] = {}
            for uid, node in plan.placements.items():
                used[node] = used.get(node, 0) + plan.requests[uid].get(GPU, 0)
            for node, gpus in used.items():
                assert gpus <= core.snapshot.nodes[node].allocatable.get(GPU, 0)


events_strategy = st.lists(
    st.one_of(
        st.tuples(st.just("join"), st.integers(0, 8)),
        st.tuples(st.just("sees"), st.just(0)),
        st.tuples(st.just("ask"), st.integers(0, 8)),
    ),
    min_size=1,
    max_size=MAX_EVENTS,
)


def start(before: list[int], workers: int) -> tuple[GangCore, list[str]]:
    old = [f"old-{i}" for i in range(len(before))]
    core = core_with([node_obj(n, g) for n, g in zip(old, before, strict=True)], gang(workers))
    core.expire(T0)  # the service's reconcile tick: the core has looked at the nodes
    return core, old


@settings(max_examples=150, deadline=None)
@given(
    before=st.lists(st.integers(0, 4), min_size=1, max_size=3),
    workers=st.integers(1, 6),
    events=events_strategy,
)
def test_a_node_kube_scheduler_has_not_seen_costs_no_gang_a_node(
    before: list[int], workers: int, events: list[tuple[str, int]]
) -> None:
    core, old = start(before, workers)

    class Spans(LaggingScheduler):
        def check_new_plan(self) -> None:
            plan = self.core.ledger.plans[KEY]
            members = sorted(self.core.snapshot.members(KEY), key=lambda p: p.name)
            free = {name: self.core.snapshot.free(name) for name in self.core.snapshot.nodes}
            fresh = plan_gang(members, free, self.core.snapshot.nodes, Policy(), allowed={})
            assert isinstance(fresh, Placement)
            assert len(set(plan.placements.values())) <= len(set(fresh.nodes.values()))

    run(Spans(core, refused=set()), old, events)


@settings(max_examples=150, deadline=None)
@given(
    before=st.lists(st.integers(0, 4), min_size=1, max_size=3),
    workers=st.integers(1, 6),
    events=events_strategy,
    refusals=st.sets(st.tuples(st.integers(0, 6), st.integers(0, 5)), min_size=1, max_size=8),
)
def test_a_node_refused_after_kube_scheduler_saw_it_stays_refused(
    before: list[int],
    workers: int,
    events: list[tuple[str, int]],
    refusals: set[tuple[int, int]],
) -> None:
    core, old = start(before, workers)
    names = sorted(p.name for p in core.snapshot.members(KEY))
    nodes = old + [f"new-{i}" for i in range(3)]  # the first few to join: dense refusals
    refused = {(names[m % len(names)], nodes[n % len(nodes)]) for m, n in refusals}

    class StaysRefused(LaggingScheduler):
        def ask(self, member: PodInfo, now: float) -> None:
            super().ask(member, now)
            self.check_plan()

        def check_plan(self) -> None:
            plan = self.core.ledger.plans.get(KEY)
            if plan is None:
                return
            for uid, node in plan.placements.items():
                name = self.core.snapshot.pods[uid].name
                if (name, node) in self.refused:
                    assert node not in self.named_at_last_ask.get(name, set()), (
                        f"{name} planned on {node}, refused after kube-scheduler saw it"
                    )

    scheduler = StaysRefused(core, refused=refused)
    run(scheduler, old, events)
    scheduler.check_plan()


# ---- UnseenNodes alone ----


def test_nodes_present_at_the_first_look_are_seen_and_later_news_is_not_until_named() -> None:
    snapshot = ClusterSnapshot()
    snapshot.upsert_node(NodeInfo.from_api(node_obj("a", 1)))
    unseen = UnseenNodes()
    assert unseen.catch_up(snapshot, 0.0) == [] and not unseen.unseen("a")
    snapshot.upsert_node(NodeInfo.from_api(node_obj("b", 1)))
    snapshot.upsert_node(NodeInfo.from_api(node_obj("a", 2)))  # a changed: news again
    unseen.catch_up(snapshot, 1.0)
    assert unseen.unseen("a") and unseen.unseen("b")
    assert list(unseen.offered_or_unseen(["x"], snapshot.nodes)) == ["x", "b", "a"]
    unseen.saw(["b", "x"])
    assert not unseen.unseen("b") and unseen.unseen("a")
    unseen.saw(["a"])
    assert unseen.offered_or_unseen(["a"], snapshot.nodes) == ["a"] and not unseen.noticed


def test_a_node_unnamed_for_the_grace_expires_and_a_gone_one_is_not_returned() -> None:
    snapshot = ClusterSnapshot()
    unseen = UnseenNodes(grace_seconds=10.0)
    unseen.catch_up(snapshot, 0.0)
    snapshot.upsert_node(NodeInfo.from_api(node_obj("a", 1)))
    unseen.catch_up(snapshot, 1.0)
    snapshot.upsert_node(NodeInfo.from_api(node_obj("b", 1)))
    snapshot.upsert_node(NodeInfo.from_api(node_obj("c", 1)))
    unseen.catch_up(snapshot, 5.0)
    snapshot.delete_node("c")
    assert unseen.catch_up(snapshot, 10.9, seen=["x"], broad=True) == []
    assert unseen.catch_up(snapshot, 11.0, seen=["x"], broad=True) == ["a"]
    assert unseen.catch_up(snapshot, 15.0, seen=["x"], broad=True) == ["b"]  # c is gone
    assert not unseen.noticed
    # A node absent from the snapshot is never added to a member's word.
    snapshot.upsert_node(NodeInfo.from_api(node_obj("d", 1)))
    unseen.catch_up(snapshot, 16.0)
    snapshot.delete_node("d")
    assert unseen.offered_or_unseen(["a"], snapshot.nodes) == ["a"]


def noticed_at_one(*names: str) -> tuple[ClusterSnapshot, UnseenNodes]:
    """Nodes `names` joining at t=1 after a first look at t=0 (grace 10 s, ceiling 60 s)."""
    snapshot = ClusterSnapshot()
    unseen = UnseenNodes(grace_seconds=10.0, ceiling_seconds=60.0)
    unseen.catch_up(snapshot, 0.0)
    for name in names:
        snapshot.upsert_node(NodeInfo.from_api(node_obj(name, 1)))
    unseen.catch_up(snapshot, 1.0)
    return snapshot, unseen


def test_only_a_broad_filter_past_the_grace_expires_a_node() -> None:
    """The clock alone, and one-node asks on a nominated node, say nothing of a node."""
    snapshot, unseen = noticed_at_one("a", "b")
    # A broad filter within a's grace is no evidence, nor is the clock after it.
    assert unseen.catch_up(snapshot, 5.0, seen=["x"], broad=True) == []
    assert unseen.catch_up(snapshot, 20.0) == []
    # A one-node ask names its node only, and expires nothing.
    assert unseen.catch_up(snapshot, 21.0, seen=["x"]) == []
    assert unseen.unseen("a") and unseen.unseen("b")
    # A broad filter that names b, past the grace: b is seen, a expires.
    assert unseen.catch_up(snapshot, 22.0, seen=["b"], broad=True) == ["a"]
    assert not unseen.noticed


def test_a_node_named_by_the_filter_that_would_expire_it_is_seen() -> None:
    snapshot, unseen = noticed_at_one("a")
    assert unseen.catch_up(snapshot, 30.0, seen=["a"]) == []
    assert not unseen.noticed


def test_a_node_past_the_ceiling_with_no_broad_filter_is_forgotten_not_expired() -> None:
    snapshot, unseen = noticed_at_one("a")
    assert unseen.catch_up(snapshot, 60.9) == [] and unseen.unseen("a")
    assert unseen.catch_up(snapshot, 61.0) == [] and not unseen.unseen("a")


def test_news_again_moves_a_node_behind_the_others_so_theirs_still_expire() -> None:
    snapshot, unseen = noticed_at_one("a")
    snapshot.upsert_node(NodeInfo.from_api(node_obj("b", 1)))
    unseen.catch_up(snapshot, 2.0)
    snapshot.upsert_node(NodeInfo.from_api(node_obj("a", 2)))  # a's news again, at 8
    unseen.catch_up(snapshot, 8.0)
    assert unseen.catch_up(snapshot, 12.0, seen=["x"], broad=True) == ["b"]
    assert unseen.unseen("a")
