"""kube-scheduler's last word on a member covers the nodes that existed when it said it.

A node that joins later was never judged by kube-scheduler's filters, so it is not
refused: the seed gang (a master without GPU and three 1-GPU workers), held on a
2-GPU node, goes whole onto a 4-GPU node that joins, instead of being split
because three of its members were last asked before that node existed.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from extender.domain.cluster.snapshot import ClusterSnapshot, fits
from extender.domain.gang.gang import GangCore
from extender.domain.objects.membership import GroupKey
from extender.domain.objects.model import NodeInfo, PodInfo
from extender.domain.objects.policy import Policy
from extender.domain.planning.planner import NodeRestriction, Placement, plan_gang
from extender.domain.planning.restrictions import (
    CurrentRestrictions,
    admitting_preemption_nodes,
    learnt_now,
)
from extender.domain.state.decisions import PlanDropped, Verdict
from tests.builders import make_node, make_pod, make_podgroup
from tests.unit.test_gang_core import T0, core_with, pod_info, seed_job


def snapshot_of(*names: str) -> ClusterSnapshot:
    snapshot = ClusterSnapshot()
    for name in names:
        snapshot.upsert_node(NodeInfo.from_api(make_node(name).gpus(1).obj()))
    return snapshot


def add(snapshot: ClusterSnapshot, name: str, gpus: int = 1) -> None:
    snapshot.upsert_node(NodeInfo.from_api(make_node(name).gpus(gpus).obj()))


# ---- the snapshot's node news order ----


def test_nodes_that_joined_since_a_news_count_are_named_newest_first() -> None:
    snapshot = snapshot_of("a", "b")
    assert snapshot.node_news == 2
    add(snapshot, "c")
    add(snapshot, "d")
    assert snapshot.news_since(2) == ["d", "c"]
    assert snapshot.news_since(4) == []
    assert snapshot.news_since(0) == ["d", "c", "b", "a"]


def test_a_node_changed_in_place_is_news_again_and_a_heartbeat_is_not() -> None:
    snapshot = snapshot_of("a", "b")
    add(snapshot, "a", gpus=1)  # the same node again (a status heartbeat)
    assert snapshot.node_news == 2
    assert snapshot.news_since(2) == []
    add(snapshot, "a", gpus=8)  # resized (or relabelled, untainted): judged anew
    assert snapshot.node_news == 3
    assert snapshot.news_since(2) == ["a"]
    assert snapshot.news_since(0) == ["a", "b"]


def test_a_node_deleted_and_added_again_joins_anew_and_a_gone_one_is_not_named() -> None:
    snapshot = snapshot_of("a", "b", "c")
    snapshot.delete_node("a")
    snapshot.delete_node("c")
    assert snapshot.news_since(0) == ["b"]
    add(snapshot, "a")
    assert snapshot.node_news == 4
    assert snapshot.news_since(3) == ["a"]


def test_a_relist_keeps_the_place_of_the_nodes_listed_again_unchanged() -> None:
    snapshot = snapshot_of("a", "b", "c")
    relisted = [
        NodeInfo.from_api(make_node("b").gpus(1).obj()),
        NodeInfo.from_api(make_node("c").gpus(4).obj()),  # changed while unwatched
        NodeInfo.from_api(make_node("new").gpus(1).obj()),
    ]
    snapshot.replace_all(relisted, [], [])
    assert snapshot.news_since(3) == ["new", "c"]  # b is no news; a is gone
    assert snapshot.news_since(0) == ["new", "c", "b"]


# ---- reading a kept restriction now ----


def view_of(snapshot: ClusterSnapshot, **kept: NodeRestriction) -> CurrentRestrictions:
    return CurrentRestrictions(dict(kept), snapshot)


def test_an_allow_list_admits_the_nodes_that_joined_after_it_was_learnt() -> None:
    snapshot = snapshot_of("a", "b", "c")
    kept = {"m": learnt_now(snapshot, allowed=frozenset({"a"}))}
    view = CurrentRestrictions(kept, snapshot)
    assert view.get("m") == NodeRestriction(allowed=frozenset({"a"}))
    add(snapshot, "d")
    widened = view.get("m")
    assert widened is not None and widened.allowed == frozenset({"a", "d"})
    assert widened.permits("d") and not widened.permits("b")
    assert kept["m"] is widened and widened.learnt_at == snapshot.node_news  # kept once


def test_a_deny_list_and_a_restriction_of_unknown_age_are_read_as_given() -> None:
    snapshot = snapshot_of("a", "b")
    denied = learnt_now(snapshot, denied=frozenset({"a"}))
    unknown = NodeRestriction(allowed=frozenset({"a"}))
    view = view_of(snapshot, d=denied, u=unknown)
    add(snapshot, "c")
    assert view.get("d") is denied and view["d"].permits("c")
    assert view.get("u") is unknown and not view["u"].permits("c")


def test_the_word_of_the_filter_being_answered_comes_first_and_is_not_kept() -> None:
    snapshot = snapshot_of("a", "b")
    kept = {"m": learnt_now(snapshot, allowed=frozenset({"a"}))}
    asked = learnt_now(snapshot, allowed=frozenset({"b"}))
    view = CurrentRestrictions(kept, snapshot).with_asked("n", asked).with_asked("m", asked)
    assert view.get("m") is asked and view["n"] is asked
    assert kept == {"m": NodeRestriction(allowed=frozenset({"a"}))}
    assert sorted(view) == ["m", "n"] and len(view) == 2
    assert "n" in view and "x" not in view and view.get("x") is None


# ---- kube-scheduler's preemption proposes nodes: the word admits them ----

ALLOW_A = NodeRestriction(allowed=frozenset({"a"}))
DENY_BC = NodeRestriction(denied=frozenset({"b", "c"}))


@pytest.mark.parametrize(
    ("kept", "proposed", "limit", "changed", "after"),
    [
        # an allow-list gains the proposed nodes; one unknown to the snapshot is not kept
        (ALLOW_A, ["b", "x"], 8, True, NodeRestriction(allowed=frozenset({"a", "b"}))),
        # nothing new proposed: the word stays as it was
        (ALLOW_A, ["a"], 8, False, ALLOW_A),
        (ALLOW_A, [], 8, False, ALLOW_A),
        # past the memory limit the word is dropped: every node admitted
        (ALLOW_A, ["b", "c"], 2, True, None),
        (ALLOW_A, ["b"], 2, True, NodeRestriction(allowed=frozenset({"a", "b"}))),
        # a deny-list stops refusing what is proposed, and is dropped once it refuses none
        (DENY_BC, ["b"], 8, True, NodeRestriction(denied=frozenset({"c"}))),
        (DENY_BC, ["b", "c"], 8, True, None),
        (DENY_BC, ["a"], 8, False, DENY_BC),
        # no word kept: nothing to widen
        (None, ["a"], 8, False, None),
    ],
)
def test_a_preemption_proposal_widens_a_members_kept_word(
    kept: NodeRestriction | None,
    proposed: list[str],
    limit: int,
    changed: bool,
    after: NodeRestriction | None,
) -> None:
    snapshot = snapshot_of("a", "b", "c", "d")
    words = (
        {}
        if kept is None
        else {"m": learnt_now(snapshot, allowed=kept.allowed, denied=kept.denied)}
    )
    assert admitting_preemption_nodes(words, snapshot, "m", proposed, memory_limit=limit) is changed
    assert words.get("m") == after
    assert words.get("m") is None or words["m"].learnt_at == snapshot.node_news


def test_a_proposal_widens_the_word_as_read_now_with_the_nodes_that_joined_since() -> None:
    snapshot = snapshot_of("a", "b")
    words = {"m": learnt_now(snapshot, allowed=frozenset({"a"}))}
    add(snapshot, "c")  # joined after the word: admitted, and kept so after widening
    assert admitting_preemption_nodes(words, snapshot, "m", ["b"], memory_limit=8)
    assert words["m"] == NodeRestriction(allowed=frozenset({"a", "b", "c"}))


# ---- the core: the seed gang and a node that joins ----


def offered(core: GangCore, member: PodInfo) -> list[str]:
    """What kube-scheduler's own filters offer a member before asking the extender:
    the nodes whose free capacity holds its request (NodeResourcesFit), in name order."""
    return sorted(
        name
        for name, node in core.snapshot.nodes.items()
        if fits(member.requests, core.snapshot.free(name))
    )


def held_seed_gang() -> GangCore:
    """The seed job on a cluster of a CPU node and gpu-small-0 (2 GPUs): every member
    asked once and held, the workers offered only the GPU node (so that word is kept)."""
    nodes = [make_node("cpu-0").cpu_only().obj(), make_node("gpu-small-0").gpus(2).obj()]
    core = core_with(nodes, seed_job(), [make_podgroup("job", 4)])
    for name in ("job-master", "job-worker-0", "job-worker-1", "job-worker-2"):
        member = pod_info(core, name)
        assert core.filter(member, offered(core, member), T0).verdict is not Verdict.PLANNED
    assert core.restrictions[pod_info(core, "job-worker-0").uid].allowed == {"gpu-small-0"}
    core.apply_node(NodeInfo.from_api(make_node("gpu-big-0").gpus(4).obj()))
    return core


def test_a_gang_held_on_a_small_node_goes_whole_onto_a_bigger_node_that_joins() -> None:
    core = held_seed_gang()
    # kube-scheduler tries one member again (the node's arrival moved it).
    worker = pod_info(core, "job-worker-2")
    assert core.filter(worker, offered(core, worker), T0 + 1).verdict is Verdict.PLANNED
    plan = core.ledger.plans[GroupKey("default", "job")]
    assert set(plan.placements.values()) == {"gpu-big-0"}


def test_a_node_kube_scheduler_refused_a_member_after_it_saw_the_node_stays_refused() -> None:
    core = held_seed_gang()
    # The master is offered the new node (kube-scheduler has seen it) and its gang is
    # planned there. Worker 0 is then asked and its filters refuse it the node (say,
    # an anti-affinity): the plan is dropped, and that word holds in the next one.
    master = pod_info(core, "job-master")
    assert core.filter(master, offered(core, master), T0 + 1).verdict is Verdict.PLANNED
    core.filter(pod_info(core, "job-worker-0"), ["gpu-small-0"], T0 + 1)
    assert GroupKey("default", "job") not in core.ledger.plans
    worker = pod_info(core, "job-worker-2")
    core.filter(worker, offered(core, worker), T0 + 1 + core.timeouts.replan_backoff_seconds)
    plan = core.ledger.plans[GroupKey("default", "job")]
    assert plan.placements[pod_info(core, "job-worker-0").uid] == "gpu-small-0"


# ---- the core: kube-scheduler checks a member's nominated node alone, first ----


def planned_seed_gang() -> tuple[GangCore, PodInfo]:
    """The held seed gang planned whole onto gpu-big-0; and its master, asked before."""
    core = held_seed_gang()
    worker = pod_info(core, "job-worker-2")
    assert core.filter(worker, offered(core, worker), T0 + 1).verdict is Verdict.PLANNED
    assert set(core.ledger.plans[GroupKey("default", "job")].placements.values()) == {"gpu-big-0"}
    return core, pod_info(core, "job-master")


def test_a_member_asked_about_its_nominated_planned_node_alone_is_planned_and_keeps_its_word() -> (
    None
):
    core, master = planned_seed_gang()
    kept = core.restrictions.get(master.uid)
    # The planned-node write nominated gpu-big-0: kube-scheduler checks that node first
    # and, as it passes, asks the extender with that one name. The other nodes were not
    # judged, so the master's word is what it was.
    decision = core.filter(master, ["gpu-big-0"], T0 + 2, nominated="gpu-big-0")
    assert decision.verdict is Verdict.PLANNED and decision.nodes == ["gpu-big-0"]
    assert core.restrictions.get(master.uid) == kept
    assert kept is None or kept.permits("cpu-0")


def test_a_stale_nomination_is_refused_without_touching_the_plan_or_the_word() -> None:
    core, master = planned_seed_gang()
    key = GroupKey("default", "job")
    plan, kept = core.ledger.plans[key], core.restrictions.get(master.uid)
    # Nominated on gpu-small-0 by an older plan: kube-scheduler checks it alone first.
    decision = core.filter(master, ["gpu-small-0"], T0 + 2, nominated="gpu-small-0")
    assert decision.verdict is Verdict.WAIT and decision.nodes == []
    assert decision.unresolvable == {"gpu-small-0": decision.message}
    assert "nominated on gpu-small-0 but planned on gpu-big-0" in decision.message
    assert core.ledger.plans[key] is plan
    assert core.restrictions.get(master.uid) == kept
    # ...then asks about every node in the same attempt, and that answer decides.
    decision = core.filter(master, offered(core, master), T0 + 2, nominated="gpu-small-0")
    assert decision.verdict is Verdict.PLANNED and decision.nodes == ["gpu-big-0"]


def test_a_plan_on_a_new_node_outlives_the_grace_while_every_filter_is_a_one_node_ask() -> None:
    # With members nominated on their planned nodes (gated ones are, before kube-scheduler
    # sees them) a filter can name one node and say nothing of any other. The gang is
    # planned onto gpu-big-0 before any filter named it; its grace runs out with only
    # the clock and a one-node ask since: no refusal, the plan waits for its members
    # (counting the clock alone dropped 2 of 20 gangs' plans at 40 nodes).
    core = held_seed_gang()
    key = GroupKey("default", "job")
    worker = pod_info(core, "job-worker-2")
    core.filter(worker, ["cpu-0", "gpu-small-0"], T0 + 1)
    plan = core.ledger.plans[key]
    assert set(plan.placements.values()) == {"gpu-big-0"}
    later = T0 + 1 + core.unseen_nodes.grace_seconds + 1
    master = pod_info(core, "job-master")
    core.filter(master, ["gpu-small-0"], later, nominated="gpu-small-0")
    core.expire(later + 1)
    assert core.ledger.plans.get(key) is plan
    assert not [e for e in core.drain_effects() if isinstance(e, PlanDropped)]
    decision = core.filter(master, ["gpu-big-0"], later + 2, nominated="gpu-big-0")
    assert decision.verdict is Verdict.PLANNED and decision.nodes == ["gpu-big-0"]


def test_a_nomination_with_no_plan_neither_plans_nor_narrows_the_word() -> None:
    core = held_seed_gang()
    key = GroupKey("default", "job")
    worker = pod_info(core, "job-worker-0")
    kept = core.restrictions.get(worker.uid)
    decision = core.filter(worker, ["gpu-big-0"], T0 + 1, nominated="gpu-big-0")
    assert decision.verdict is Verdict.WAIT and "not planned there" in decision.message
    assert key not in core.ledger.plans
    assert core.restrictions.get(worker.uid) == kept


def test_one_offered_node_that_is_not_a_nomination_is_kube_schedulers_word() -> None:
    core, master = planned_seed_gang()
    # Its filters passed only cpu-0 (say, a node affinity): the plan goes, the word stays.
    assert core.filter(master, ["cpu-0"], T0 + 2).verdict is Verdict.WAIT
    assert GroupKey("default", "job") not in core.ledger.plans
    assert core.restrictions[master.uid].allowed == {"cpu-0"}


# ---- the core: kube-scheduler has not seen the node yet (its informer lags ours) ----


def test_members_asked_before_kube_scheduler_saw_a_node_do_not_refuse_it() -> None:
    core = held_seed_gang()
    # kube-scheduler tries members again from its older view: the new node is not
    # among their candidates, and no filter has named it yet.
    # The gang is planned whole onto it at the first of them; each waits for the node.
    for name in ("job-master", "job-worker-0", "job-worker-1"):
        decision = core.filter(pod_info(core, name), ["cpu-0", "gpu-small-0"], T0 + 1)
        assert decision.verdict is Verdict.WAIT and decision.nodes == []
        plan = core.ledger.plans[GroupKey("default", "job")]
        assert set(plan.placements.values()) == {"gpu-big-0"}
    worker = pod_info(core, "job-worker-2")
    assert core.filter(worker, offered(core, worker), T0 + 2).verdict is Verdict.PLANNED
    plan = core.ledger.plans[GroupKey("default", "job")]
    assert set(plan.placements.values()) == {"gpu-big-0"}


def test_a_member_asked_from_the_older_view_is_planned_with_its_gang_and_waits_for_the_node() -> (
    None
):
    core = held_seed_gang()
    worker = pod_info(core, "job-worker-2")
    held = core.filter(worker, ["cpu-0", "gpu-small-0"], T0 + 1)
    plan = core.ledger.plans[GroupKey("default", "job")]
    assert set(plan.placements.values()) == {"gpu-big-0"}
    # Its answer names only candidates (kube-scheduler refuses any other node name).
    assert held.verdict is Verdict.WAIT and held.nodes == []
    assert "gpu-big-0" in held.message and "has not offered yet" in held.message
    # Asked again before kube-scheduler sees the node: still waiting, plan kept.
    assert core.filter(worker, ["cpu-0", "gpu-small-0"], T0 + 2).verdict is Verdict.WAIT
    assert core.ledger.plans[GroupKey("default", "job")] is plan
    # kube-scheduler sees the node: every member goes there.
    for name in ("job-master", "job-worker-0", "job-worker-1", "job-worker-2"):
        member = pod_info(core, name)
        decision = core.filter(member, offered(core, member), T0 + 3)
        assert decision.verdict is Verdict.PLANNED and decision.nodes == ["gpu-big-0"]


def test_a_node_no_filter_names_within_the_grace_counts_as_refused_and_its_plan_is_dropped() -> (
    None
):
    core = held_seed_gang()
    key = GroupKey("default", "job")
    worker = pod_info(core, "job-worker-2")
    core.filter(worker, ["cpu-0", "gpu-small-0"], T0 + 1)
    assert key in core.ledger.plans
    core.drain_effects()
    grace = core.unseen_nodes.grace_seconds
    core.filter(worker, ["cpu-0", "gpu-small-0"], T0 + 1 + grace - 0.5)
    assert key in core.ledger.plans  # still within the grace
    # The clock alone is no refusal: a filter that scanned the nodes has to leave it out.
    core.expire(T0 + 1 + grace + 0.5)
    assert key in core.ledger.plans
    core.filter(worker, ["cpu-0", "gpu-small-0"], T0 + 1 + grace + 0.6)
    assert key not in core.ledger.plans
    (dropped,) = [e for e in core.drain_effects() if isinstance(e, PlanDropped)]
    assert "offered node gpu-big-0 to no pod within" in dropped.reason
    # From now on its absence from a member's candidates is a refusal: once each member
    # was asked again, every one's word refuses it, and the gang (3 GPUs) waits.
    later = T0 + 1 + core.unseen_nodes.grace_seconds + 5
    members = [pod_info(core, n) for n in ("job-master", "job-worker-0", "job-worker-1")]
    for _ in range(2):
        for member in [*members, worker]:
            later += core.timeouts.replan_backoff_seconds
            core.filter(member, ["cpu-0", "gpu-small-0"], later)
    assert not any(core.restrictions[m.uid].permits("gpu-big-0") for m in [*members, worker])
    assert key not in core.ledger.plans


def test_members_asked_while_the_node_was_not_ready_do_not_refuse_it_once_ready() -> None:
    """The demo's own sequence: the node joins with the not-ready taint (refused by
    kube-scheduler and the planner alike), members are asked, the taint goes."""
    core = held_seed_gang()
    core.snapshot.upsert_node(
        NodeInfo.from_api(
            make_node("gpu-big-0").gpus(4).taint("node.kubernetes.io/not-ready", "").obj()
        )
    )
    master = pod_info(core, "job-master")
    core.filter(master, ["cpu-0", "gpu-small-0"], T0 + 1)  # the taint refuses gpu-big-0
    for name in ("job-worker-0", "job-worker-1"):
        core.filter(pod_info(core, name), ["gpu-small-0"], T0 + 1)
    # A pod that tolerates the taint is offered the node: kube-scheduler has seen it.
    core.unseen_nodes.saw(["gpu-big-0"])
    core.filter(pod_info(core, "job-worker-0"), ["gpu-small-0"], T0 + 2)
    assert GroupKey("default", "job") not in core.ledger.plans
    core.snapshot.upsert_node(NodeInfo.from_api(make_node("gpu-big-0").gpus(4).obj()))
    worker = pod_info(core, "job-worker-2")
    assert core.filter(worker, offered(core, worker), T0 + 3).verdict is Verdict.PLANNED
    plan = core.ledger.plans[GroupKey("default", "job")]
    assert set(plan.placements.values()) == {"gpu-big-0"}


# ---- property: stale words never cost a gang a node ----


def one_gpu_gang(size: int) -> list[dict[str, Any]]:
    return [make_pod(f"g-{i}").group("g").min_available(size).gpus(1).obj() for i in range(size)]


@settings(max_examples=60, deadline=None)
@given(
    before=st.lists(st.integers(0, 4), min_size=1, max_size=4),
    after=st.lists(st.integers(0, 8), min_size=1, max_size=4),
    size=st.integers(2, 8),
    asked=st.integers(0, 7),
)
def test_nodes_joining_after_members_were_asked_span_no_more_nodes_than_a_fresh_plan(
    before: list[int], after: list[int], size: int, asked: int
) -> None:
    """Members asked (each offered what kube-scheduler's resource filter offers) while
    the first nodes were all there are; more nodes join and one member is asked again:
    its gang spans no more nodes than a plan of the same gang on the same cluster with
    no word from kube-scheduler, and is planned whenever that plan fits."""
    old = [
        make_node(f"old-{i}").gpus(g).obj() if g else make_node(f"old-{i}").cpu_only().obj()
        for i, g in enumerate(before)
    ]
    core = core_with(old, one_gpu_gang(size))
    key = GroupKey("default", "g")
    members = sorted(core.snapshot.members(key), key=lambda p: p.name)
    for member in members:
        if key in core.ledger.plans:
            return  # it fitted on the first nodes: nothing joins in time to matter
        core.filter(member, offered(core, member), T0)
    for i, gpus in enumerate(after):
        node = make_node(f"new-{i}").gpus(gpus) if gpus else make_node(f"new-{i}").cpu_only()
        core.apply_node(NodeInfo.from_api(node.obj()))
    again = members[asked % size]
    core.filter(again, offered(core, again), T0 + 1)

    free = {name: core.snapshot.free(name) for name in core.snapshot.nodes}
    fresh = plan_gang(members, free, core.snapshot.nodes, Policy(), allowed={})
    plan = core.ledger.plans.get(key)
    if not isinstance(fresh, Placement):
        assert plan is None
        return
    assert plan is not None, "a plan with no word from kube-scheduler fits; the gang stayed held"
    assert len(set(plan.placements.values())) <= len(set(fresh.nodes.values()))
