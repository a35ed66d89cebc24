"""The held-gang queue view answers as asking every gang afresh would.

domain/queue/held_queue.py is built once per change and caches wanted nodes per member
shape; the oracle here recomputes every gang's wanted nodes per question, as
`GangCore.gang_ahead_of` and the starvation check did before.
"""

from __future__ import annotations

from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from extender.domain.cluster.snapshot import fits
from extender.domain.gang.gang import GangCore, Timeouts
from extender.domain.objects.membership import GroupKey
from extender.domain.objects.model import NodeInfo, PodInfo
from extender.domain.planning.planner import NodeRestriction, node_accepts
from extender.domain.planning.queue import QueueRank
from extender.domain.queue.gang_queue import QueueOrder
from extender.domain.queue.held_queue import WantedNodes, held_queue
from tests.builders import make_node, make_pod
from tests.core_builder import make_core

NODE_SHAPES = [(8, "a", False), (4, "a", True), (2, "b", False), (8, "b", False), (0, "a", False)]


def nodes_of(count: int) -> dict[str, NodeInfo]:
    found = {}
    for i in range(count):
        gpus, pool, tainted = NODE_SHAPES[i % len(NODE_SHAPES)]
        built = make_node(f"n{i}").gpus(gpus).label("pool", pool)
        if tainted:
            built = built.taint("dedicated", "x")
        found[f"n{i}"] = NodeInfo.from_api(built.obj())
    return found


def member(gang: int, index: int, gpus: int, pool: str | None, bound: bool) -> PodInfo:
    built = make_pod(f"g{gang}-{index}").group(f"g{gang}").gpus(gpus)
    if bound:
        built = built.node("n0")
    obj: dict[str, Any] = built.obj()
    if pool is not None:
        obj["spec"]["nodeSelector"] = {"pool": pool}
    return PodInfo.from_api(obj)


def oracle_wanted(members, nodes, restrictions) -> set[str]:
    wanted: set[str] = set()
    for m in members:
        if m.is_bound or m.gated:
            continue
        restriction = restrictions.get(m.uid)
        wanted.update(
            name
            for name, node in nodes.items()
            if (restriction is None or restriction.permits(name))
            and node_accepts(node, m)
            and fits(m.requests, node.allocatable)
        )
    return wanted


gangs = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=2),  # priority
        st.integers(min_value=0, max_value=5),  # age
        st.lists(
            st.tuples(
                st.integers(min_value=1, max_value=9),
                st.sampled_from([None, "a", "b"]),
                st.booleans(),
            ),
            min_size=1,
            max_size=3,
        ),
    ),
    min_size=1,
    max_size=7,
)


@given(
    gangs,
    st.integers(min_value=1, max_value=7),
    st.sets(st.integers(min_value=0, max_value=6)),
    st.lists(
        st.tuples(st.integers(0, 6), st.integers(0, 2), st.integers(0, 6), st.booleans()),
        max_size=4,
    ),
)
@settings(max_examples=400, deadline=None)
def test_queue_view_answers_as_asking_afresh(spec, node_count, starving, restricted) -> None:
    nodes = nodes_of(node_count)
    held = []
    for g, (priority, age, members) in enumerate(spec):
        pods = [member(g, i, gpus, pool, bound) for i, (gpus, pool, bound) in enumerate(members)]
        held.append((QueueRank(GroupKey("default", f"g{g}"), priority, float(age)), pods))
    restrictions = {}
    for g, i, n, deny in restricted:
        if g < len(held) and i < len(held[g][1]):
            one = frozenset({f"n{n}"})
            restriction = NodeRestriction(denied=one) if deny else NodeRestriction(allowed=one)
            restrictions[held[g][1][i].uid] = restriction
    queue = held_queue(held, nodes, restrictions)
    wanted = {rank.key: oracle_wanted(pods, nodes, restrictions) for rank, pods in held}
    ordered = sorted(held, key=lambda h: h[0].order)
    for rank, pods in held:
        assert queue.wanted.of_gang(pods) == wanted[rank.key]
        expected = next(
            (
                other
                for other, _ in ordered
                if other.is_ahead_of(rank) and wanted[other.key] & wanted[rank.key]
            ),
            None,
        )
        assert queue.first_ahead_wanting(rank, wanted[rank.key]) == expected
    candidates = {held[g][0].key for g in starving if g < len(held)}
    expected_heads = [
        rank.key
        for rank, _ in ordered
        if rank.key in candidates
        and wanted[rank.key]
        and not any(o.is_ahead_of(rank) and wanted[o.key] & wanted[rank.key] for o, _ in ordered)
    ]
    assert queue.heads(candidates, len(nodes)) == expected_heads


def test_wanted_nodes_are_computed_once_per_member_shape() -> None:
    nodes = nodes_of(5)
    wanted = WantedNodes(nodes, {})
    first = wanted.of_member(member(0, 0, 1, None, False), {})
    assert first == {"n0", "n2", "n3"}  # n1 tainted, n4 has no GPU
    assert wanted.shapes_scanned() == 1
    wanted.of_member(member(1, 0, 1, None, False), {})  # same template, another gang
    assert wanted.shapes_scanned() == 1
    # A restricted member gets its shape's nodes narrowed by the restriction.
    pod = member(2, 0, 1, None, False)
    assert wanted.of_member(pod, {pod.uid: NodeRestriction(allowed=frozenset({"n2"}))}) == {"n2"}
    assert wanted.of_member(pod, {pod.uid: NodeRestriction(denied=frozenset({"n2"}))}) == {
        "n0",
        "n3",
    }
    assert wanted.shapes_scanned() == 1


def test_heads_stop_once_the_gangs_ahead_want_every_node() -> None:
    nodes = nodes_of(2)  # n0 (8 GPUs), n1 (4, tainted): a 1-GPU member wants n0 only
    first = QueueRank(GroupKey("default", "first"), 5, 0.0)
    later = QueueRank(GroupKey("default", "later"), 0, 0.0)
    held = [(first, [member(0, 0, 1, None, False)]), (later, [member(1, 0, 1, None, False)])]
    queue = held_queue(held, nodes, {})
    assert queue.heads({first.key, later.key}, node_count=1) == [first.key]
    assert not queue.asked(later.key)  # never looked at: n0 was taken


def test_a_member_event_recomputes_only_its_groups_entry_in_the_queue_view(monkeypatch) -> None:
    core, looked_at = twenty_held_gangs(monkeypatch)
    core.queue.held_queue_view()
    looked_at.clear()
    core.snapshot.upsert_pod(sized_member(7, 2))  # a third member of g7
    queue = core.queue.held_queue_view()
    assert looked_at == [GroupKey("default", "g7")]
    assert [rank.key.name for rank, _ in queue.order][:3] == ["g0", "g1", "g10"]
    looked_at.clear()
    assert core.queue.held_queue_view() is queue and looked_at == []  # nothing changed: same view


def test_kube_schedulers_new_word_keeps_the_node_scans_and_a_node_change_drops_them(
    monkeypatch,
) -> None:
    core, _ = twenty_held_gangs(monkeypatch)
    core.apply_node(NodeInfo.from_api(make_node("n1").gpus(8).obj()))
    core.observe_pod(PodInfo.from_api(make_pod("busy-1").gpus(8).node("n1").obj()), 0.0)
    core.filter(core.snapshot.pods[sized_member(3, 0).uid], ["n0", "n1"], 1.5)  # n1 seen
    g3 = GroupKey("default", "g3")
    first = core.queue.held_queue_view()
    assert first.wanted_by(g3, core.snapshot.members(g3)) == {"n0", "n1"}
    assert first.wanted.shapes_scanned() == 1
    # A filter moves kube-scheduler's word (the restrictions version) and nothing else.
    version = core.restrictions_version
    core.filter(core.snapshot.pods[sized_member(3, 1).uid], ["n0"], 2.0)
    assert core.restrictions_version > version
    second = core.queue.held_queue_view()
    assert second is not first and second.wanted is not first.wanted
    assert second.wanted.shapes_scanned() == 1  # the scan of every node is kept
    # g3's first member may use both nodes, so the gang still wants both.
    assert second.wanted_by(g3, core.snapshot.members(g3)) == {"n0", "n1"}
    assert second.wanted.shapes_scanned() == 1
    # A node joins: what each shape may use is scanned again, the new node included.
    core.apply_node(NodeInfo.from_api(make_node("n9").gpus(8).obj()))
    third = core.queue.held_queue_view()
    assert third.wanted.shapes_scanned() == 0
    assert "n9" in third.wanted_by(g3, core.snapshot.members(g3))


def test_the_view_looks_at_every_group_that_moved_past_the_planned_ones(monkeypatch) -> None:
    """Groups with a plan are looked at on every ask and are mostly unchanged; the
    groups after them (in name order) that moved are recomputed all the same."""
    core, looked_at = twenty_held_gangs(monkeypatch)
    core.apply_node(NodeInfo.from_api(make_node("n1").gpus(8).obj()))
    for g in (0, 1):  # room for two gangs: planned
        core.filter(core.snapshot.pods[sized_member(g, 0).uid], ["n1"], 2.0)
    assert {GroupKey("default", "g0"), GroupKey("default", "g1")} <= core.ledger.plans.keys()
    core.queue.held_queue_view()
    looked_at.clear()
    core.snapshot.upsert_pod(sized_member(7, 2))  # g7 sorts after g0 and g1
    queue = core.queue.held_queue_view()
    assert looked_at == [GroupKey("default", "g7")]
    assert [m.uid for rank, members in queue.order if rank.key.name == "g7" for m in members] == [
        sized_member(7, i).uid for i in range(3)
    ]


def test_a_podgroup_status_write_changes_nothing_a_plan_reads() -> None:
    from extender.domain.cluster.snapshot import ClusterSnapshot
    from extender.domain.objects.model import GroupSpec

    snapshot = ClusterSnapshot()
    key = GroupKey("default", "job")
    assert snapshot.upsert_podgroup(GroupSpec(key=key, min_member=2, source="PodGroup"))
    before = (snapshot.planning_generation, snapshot.group_version(key))
    assert not snapshot.upsert_podgroup(GroupSpec(key=key, min_member=2, source="PodGroup"))
    assert (snapshot.planning_generation, snapshot.group_version(key)) == before
    assert snapshot.upsert_podgroup(GroupSpec(key=key, min_member=3, source="PodGroup"))
    assert snapshot.group_version(key) == before[1] + 1


class CountingNodes(dict):  # type: ignore[type-arg]
    """Nodes that count how often they are scanned."""

    scans = 0

    def items(self):  # type: ignore[no-untyped-def, override]
        self.scans += 1
        return super().items()


def test_a_shape_is_scanned_once_and_a_gang_asked_once() -> None:
    nodes = CountingNodes(nodes_of(5))
    wanted = WantedNodes(nodes, {})
    wanted.of_member(member(0, 0, 1, None, False), {})
    wanted.of_member(member(1, 0, 1, None, False), {})
    assert nodes.scans == 1
    rank = QueueRank(GroupKey("default", "g0"), 0, 0.0)
    queue = held_queue([(rank, [member(0, 0, 2, None, False)])], nodes, {}, wanted=wanted)
    assert queue.wanted is wanted  # the shapes' cache carried over
    asked: list[GroupKey] = []

    class CountingWanted(WantedNodes):
        def of_gang(self, members, allowed=None):  # type: ignore[no-untyped-def]
            asked.append(members[0].group)
            return super().of_gang(members, allowed)

    queue.wanted = CountingWanted(nodes, {})
    queue.wanted_by(rank.key, [member(0, 0, 2, None, False)])
    queue.wanted_by(rank.key, [member(0, 0, 2, None, False)])
    assert nodes.scans == 2  # one new shape
    assert asked == [rank.key]  # and the gang's answer kept


def test_a_gangs_wanted_nodes_follow_the_restrictions_it_is_given() -> None:
    nodes = nodes_of(5)
    pod = member(0, 0, 1, None, False)
    wanted = WantedNodes(nodes, {})
    only = {pod.uid: NodeRestriction(allowed=frozenset({"n3"}))}
    assert wanted.of_gang([pod], only) == {"n3"}
    assert wanted.of_gang([pod]) == {"n0", "n2", "n3"}


def test_the_look_for_starving_gangs_rereads_only_groups_whose_version_moved(monkeypatch) -> None:
    """Once a second every held gang is looked at for starvation; what it reads (held,
    starvationSeconds) comes from the group's members and PodGroup only, so it is kept
    per group version: 20 held gangs and two member events re-read two groups."""
    core, looked_at = twenty_held_gangs(monkeypatch, starvation_seconds=600)
    assert core.starvation.starving_heads(10.0) == []
    assert len(core.starvation.held_since) == 20
    looked_at.clear()
    assert core.starvation.starving_heads(11.0) == []
    assert looked_at == []  # nothing changed
    core.snapshot.upsert_pod(sized_member(7, 2))  # a third member of g7
    core.forget_pod(sized_member(3, 0).uid, 12.0)  # g3 is one short: no longer held
    assert core.starvation.starving_heads(12.0) == []
    assert sorted(k.name for k in looked_at) == ["g3", "g7"]
    assert GroupKey("default", "g3") not in core.starvation.held_since
    # Past starvationSeconds every held gang starves: the kept figures still count.
    assert core.starvation.starving_heads(10.0 + 600.5) != []


def sized_member(gang: int, index: int) -> PodInfo:
    """Member `index` of gang g<gang>: two 1-GPU members make it whole."""
    return PodInfo.from_api(
        make_pod(f"g{gang}-{index}").group(f"g{gang}").min_available(2).gpus(1).obj()
    )


def twenty_held_gangs(monkeypatch, **timeouts: float) -> tuple[GangCore, list[GroupKey]]:
    """A full 8-GPU node and 20 held gangs of two 1-GPU members, each asked about once;
    the returned list collects the groups `_is_held` looks at from then on."""
    core = make_core(timeouts=Timeouts(60, 30, 2, **timeouts))
    core.apply_node(nodes_of(1)["n0"])
    core.observe_pod(PodInfo.from_api(make_pod("busy").gpus(8).node("n0").obj()), 0.0)
    for g in range(20):
        for i in range(2):
            core.observe_pod(sized_member(g, i), 0.0)
        core.filter(core.snapshot.pods[sized_member(g, 0).uid], ["n0"], 1.0)
    looked_at: list[GroupKey] = []
    real = QueueOrder.is_held

    def counted(self, key, members):  # type: ignore[no-untyped-def]
        looked_at.append(key)
        return real(self, key, members)

    monkeypatch.setattr(QueueOrder, "is_held", counted)
    return core, looked_at


def view_of(core: GangCore) -> list[tuple[QueueRank, tuple[str, ...]]]:
    return [
        (rank, tuple(m.uid for m in members))
        for rank, members in core.queue.held_queue_view().order
    ]


def view_afresh(core: GangCore) -> list[tuple[QueueRank, tuple[str, ...]]]:
    """The view from no kept entry at all; the core's own kept state is put back."""
    kept = (
        dict(core.queue.held_entries),
        set(core.queue.held_planned),
        core.queue.held_view,
        core.queue.held_view_inputs,
    )
    core.queue.held_entries.clear()
    core.queue.held_planned.clear()
    core.queue.held_view = None
    try:
        return view_of(core)
    finally:
        entries, planned, core.queue.held_view, core.queue.held_view_inputs = kept
        core.queue.held_entries.clear()
        core.queue.held_entries.update(entries)
        core.queue.held_planned.clear()
        core.queue.held_planned.update(planned)


events = st.lists(
    st.tuples(
        st.sampled_from(
            ["join", "leave", "vanish", "bind", "ask", "arrive", "node", "podgroup", "drop"]
        ),
        st.integers(min_value=0, max_value=2),  # gang
        st.integers(min_value=0, max_value=2),  # member / node / size
    ),
    min_size=1,
    max_size=25,
)


@given(events)
@example(  # a released plan dropped, nothing else moved: the gang is held again
    [("join", 0, 0), ("join", 0, 1), ("ask", 0, 0), ("arrive", 0, 0), ("drop", 0, 0)]
)
@example(  # a planned gang gone at once: neither kept nor looked at again
    [("join", 0, 0), ("join", 0, 1), ("ask", 0, 0), ("vanish", 0, 0)]
)
@settings(max_examples=300, deadline=None)
def test_the_kept_queue_view_is_the_view_built_afresh_after_any_events(steps) -> None:
    """The view recomputes only groups the snapshot says moved and those with a plan;
    after any sequence of member, node, PodGroup and plan events (made, released at
    the barrier, dropped; a whole gang deleted at once) it is the view built from
    nothing."""
    from extender.domain.objects.model import GroupSpec
    from tests.builders import make_podgroup

    core = make_core()
    for node in nodes_of(4).values():
        core.apply_node(node)
    now = 1.0
    for kind, g, i in steps:
        now += 1.0
        pod = PodInfo.from_api(
            make_pod(f"g{g}-{i}").group(f"g{g}").min_available(2).gpus(1 + i % 2).obj()
        )
        if kind == "join":
            core.observe_pod(pod, now)
        elif kind == "leave":
            core.forget_pod(pod.uid, now)
        elif kind == "vanish":  # every member deleted between two looks at the view
            for uid in [m.uid for m in core.snapshot.members(GroupKey("default", f"g{g}"))]:
                core.forget_pod(uid, now)
        elif kind == "bind" and pod.uid in core.snapshot.pods:
            bound = make_pod(f"g{g}-{i}").group(f"g{g}").min_available(2).gpus(1 + i % 2)
            core.observe_pod(PodInfo.from_api(bound.node(f"n{i}").obj()), now)
        elif kind == "ask" and pod.uid in core.snapshot.pods:
            core.filter(core.snapshot.pods[pod.uid], list(core.snapshot.nodes), now)
        elif kind == "node":
            core.apply_node(
                NodeInfo.from_api(make_node(f"n{i}").gpus(2 * g).label("pool", "a").obj())
            )
        elif kind == "podgroup":
            spec = GroupSpec.from_podgroup(make_podgroup(f"g{g}", 1 + i), source="PodGroup")
            core.apply_group_spec(spec)
            core.group_changed(spec.key, now)
        elif kind == "arrive":  # every planned member at bind: the barrier releases the plan
            plan = core.ledger.plans.get(GroupKey("default", f"g{g}"))
            for uid, node in (plan.placements if plan is not None else {}).items():
                core.arrive(uid, node, now)
        elif kind == "drop":
            plan = core.ledger.plans.get(GroupKey("default", f"g{g}"))
            if plan is not None:
                core.shared.drop(plan, "test: dropped", now)
        assert view_of(core) == view_afresh(core), (kind, g, i)
        # What it looks at each time besides moved groups: the groups it knows with a plan.
        assert core.queue.held_planned == core.ledger.plans.keys() & core.queue.held_entries.keys()
