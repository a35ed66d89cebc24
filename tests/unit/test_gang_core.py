"""The gang core's decisions, named after the situation (pure: no cluster, no clock)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from extender.domain.gang.gang import GangCore
from extender.domain.objects.membership import GroupKey
from extender.domain.objects.model import PodInfo
from extender.domain.objects.policy import Policy, Strategy
from extender.domain.state.decisions import (
    BindVerdict,
    GangBound,
    PlanCreated,
    PlanDropped,
    Verdict,
)
from tests.builders import make_node, make_pod, make_podgroup
from tests.core_builder import make_core

T0 = 1_000_000.0


def core_with(
    nodes: list[dict[str, Any]], pods: list[dict[str, Any]] = (), groups: list[dict[str, Any]] = ()
) -> GangCore:
    return make_core(nodes, pods, groups, now=T0)


def names(nodes: list[dict[str, Any]]) -> list[str]:
    return [n["metadata"]["name"] for n in nodes]


def pod_info(core: GangCore, name: str) -> PodInfo:
    return next(p for p in core.snapshot.pods.values() if p.name == name)


def seed_job(worker_gpus: int = 1) -> list[dict[str, Any]]:
    """The seed Horovod job: 1 master (500m, 1Gi) + 3 workers (1 CPU, 2Gi, 1 GPU)."""
    master = make_pod("job-master").group("job").task("master").cpu("500m").memory("1Gi").obj()
    workers = [
        make_pod(f"job-worker-{i}")
        .group("job")
        .task("worker")
        .cpu("1")
        .memory("2Gi")
        .gpus(worker_gpus)
        .obj()
        for i in range(3)
    ]
    return [master, *workers]


def test_pod_without_group_passes_all_candidates_when_nothing_is_reserved() -> None:
    nodes = [make_node("n1").obj(), make_node("n2").obj()]
    plain = make_pod("plain").gpus(1).obj()
    core = core_with(nodes, [plain])
    decision = core.filter(pod_info(core, "plain"), ["n1", "n2"], T0)
    assert decision.verdict is Verdict.NOT_A_GANG
    assert decision.nodes == ["n1", "n2"]


def test_gang_with_three_of_four_members_is_held_and_says_so() -> None:
    nodes = [make_node("n1").gpus(8).obj()]
    pods = seed_job()[:3]
    core = core_with(nodes, pods, [make_podgroup("job", 4)])
    decision = core.filter(pod_info(core, "job-master"), ["n1"], T0)
    assert decision.verdict is Verdict.WAIT
    assert decision.nodes == []
    assert decision.failed == {}
    assert "3/4 members exist" in decision.unresolvable["n1"]


def test_gang_that_does_not_fit_is_held_with_what_is_missing() -> None:
    nodes = [make_node("n1").gpus(2).obj()]
    core = core_with(nodes, seed_job(), [make_podgroup("job", 4)])
    decision = core.filter(pod_info(core, "job-worker-0"), ["n1"], T0)
    assert decision.verdict is Verdict.WAIT
    message = decision.unresolvable["n1"]
    assert "3/4 members placeable" in message
    assert "needs 3 nvidia.com/gpu" in message
    assert "largest free node has 2" in message
    assert core.ledger.plans == {}


def test_gang_that_fits_is_planned_and_each_member_gets_only_its_node() -> None:
    nodes = [make_node("n1").gpus(2).obj(), make_node("n2").gpus(4).obj()]
    core = core_with(nodes, seed_job(), [make_podgroup("job", 4)])
    decision = core.filter(pod_info(core, "job-worker-0"), ["n1", "n2"], T0)
    assert decision.verdict is Verdict.PLANNED
    assert len(decision.nodes) == 1
    plan = core.ledger.plans[pod_info(core, "job-worker-0").group]
    assert len(plan.placements) == 4
    effects = core.drain_effects()
    assert [type(e) for e in effects] == [PlanCreated]
    for pod in ("job-master", "job-worker-1", "job-worker-2"):
        d = core.filter(pod_info(core, pod), ["n1", "n2"], T0 + 1)
        assert d.verdict is Verdict.PLANNED
        assert d.nodes == [plan.placements[pod_info(core, pod).uid]]


def test_members_that_disagree_on_min_available_are_rejected() -> None:
    pods = [
        make_pod("a").group("g").min_available(2).obj(),
        make_pod("b").group("g").min_available(3).obj(),
    ]
    core = core_with([make_node("n1").obj()], pods)
    decision = core.filter(pod_info(core, "a"), ["n1"], T0)
    assert decision.verdict is Verdict.REJECT
    assert "disagree" in decision.unresolvable["n1"]


def test_pod_claiming_two_groups_is_rejected() -> None:
    pod = make_pod("a").group("g1").label("scheduling.x-k8s.io/pod-group", "g2").obj()
    core = core_with([make_node("n1").obj()], [pod])
    decision = core.filter(pod_info(core, "a"), ["n1"], T0)
    assert decision.verdict is Verdict.REJECT
    assert "two groups" in decision.unresolvable["n1"]


def test_group_without_podgroup_or_annotation_waits_with_instructions() -> None:
    core = core_with([make_node("n1").obj()], [make_pod("a").group("g").obj()])
    decision = core.filter(pod_info(core, "a"), ["n1"], T0)
    assert decision.verdict is Verdict.WAIT
    assert "create the PodGroup or annotate" in decision.unresolvable["n1"]


def test_plain_pod_cannot_take_capacity_reserved_for_a_gang() -> None:
    nodes = [make_node("n1").gpus(4).obj()]
    pods = [make_pod(f"w{i}").group("g").min_available(4).gpus(1).obj() for i in range(4)]
    plain = make_pod("plain").gpus(1).obj()
    core = core_with(nodes, [*pods, plain])
    assert core.filter(pod_info(core, "w0"), ["n1"], T0).verdict is Verdict.PLANNED
    decision = core.filter(pod_info(core, "plain"), ["n1"], T0)
    assert decision.nodes == []
    assert "reserved for gang default/g" in decision.failed["n1"]


def test_plain_pod_that_passed_filter_before_a_gang_reserved_its_node_is_refused_at_bind() -> None:
    nodes = [make_node("n1").gpus(4).obj(), make_node("n2").gpus(4).obj()]
    pods = [make_pod(f"w{i}").group("g").min_available(4).gpus(1).obj() for i in range(4)]
    plain = make_pod("plain").gpus(1).obj()
    core = core_with(nodes, [*pods, plain])
    assert core.filter(pod_info(core, "plain"), ["n1"], T0).nodes == ["n1"]
    # The gang is planned onto n1 (binpack) before the plain pod's bind arrives.
    assert core.filter(pod_info(core, "w0"), ["n1", "n2"], T0).nodes == ["n1"]
    refused = core.arrive(pod_info(core, "plain").uid, "n1", T0 + 1)
    assert refused.verdict is BindVerdict.ERROR
    assert "reserved for gang default/g after default/plain passed filter" in refused.message
    # Beside the reservation there is room: n2 is not reserved.
    assert core.arrive(pod_info(core, "plain").uid, "n2", T0 + 1).verdict is BindVerdict.BIND_NOW


def test_the_member_that_completes_a_held_gang_gets_it_planned_when_the_watch_delivers_it() -> None:
    # kube-scheduler parked the held members; a gated last member is never filtered.
    nodes = [make_node("n1").gpus(4).obj()]
    pods = [make_pod(f"w{i}").group("g").min_available(4).gpus(1).obj() for i in range(3)]
    core = core_with(nodes, pods)
    held = core.filter(pod_info(core, "w0"), ["n1"], T0)
    assert held.verdict is Verdict.WAIT and "3/4 members exist" in held.message
    core.drain_effects()
    last = make_pod("w3").group("g").min_available(4).gpus(1).obj()
    core.observe_pod(PodInfo.from_api(last), T0 + 1)
    created = [e for e in core.drain_effects() if isinstance(e, PlanCreated)]
    assert [sorted(e.plan.names.values()) for e in created] == [
        ["default/w0", "default/w1", "default/w2", "default/w3"]
    ]


def test_a_group_kube_scheduler_never_asked_about_is_not_planned_from_the_watch() -> None:
    nodes = [make_node("n1").gpus(4).obj()]
    pods = [make_pod(f"w{i}").group("g").min_available(2).gpus(1).obj() for i in range(2)]
    core = core_with(nodes, pods)
    assert core.ledger.plans == {}
    assert not any(isinstance(e, PlanCreated) for e in core.drain_effects())


def test_bind_waits_for_every_member_then_releases() -> None:
    nodes = [make_node("n1").gpus(4).obj()]
    pods = [make_pod(f"w{i}").group("g").min_available(3).gpus(1).obj() for i in range(3)]
    core = core_with(nodes, pods)
    for p in ("w0", "w1", "w2"):
        assert core.filter(pod_info(core, p), ["n1"], T0).verdict is Verdict.PLANNED
    first = core.arrive(pod_info(core, "w0").uid, "n1", T0 + 1)
    second = core.arrive(pod_info(core, "w1").uid, "n1", T0 + 1)
    last = core.arrive(pod_info(core, "w2").uid, "n1", T0 + 2)
    assert (first.verdict, second.verdict, last.verdict) == (
        BindVerdict.WAIT,
        BindVerdict.WAIT,
        BindVerdict.RELEASE,
    )
    assert core.barrier_state(first.plan_id, first.group) is BindVerdict.RELEASE


def test_barrier_timeout_drops_the_plan_and_frees_the_capacity() -> None:
    nodes = [make_node("n1").gpus(4).obj()]
    pods = [make_pod(f"w{i}").group("g").min_available(2).gpus(2).obj() for i in range(2)]
    core = core_with(nodes, pods)
    assert core.filter(pod_info(core, "w0"), ["n1"], T0).verdict is Verdict.PLANNED
    arrived = core.arrive(pod_info(core, "w0").uid, "n1", T0 + 1)
    assert arrived.verdict is BindVerdict.WAIT
    message = core.barrier_timed_out(arrived.plan_id, arrived.group, T0 + 31)
    assert "timed out waiting for default/w1" in message
    assert core.ledger.plans == {}
    assert core.ledger.reserved("n1").get("nvidia.com/gpu", 0) == 0
    dropped = [e for e in core.drain_effects() if isinstance(e, PlanDropped)]
    assert dropped and dropped[0].timed_out


def test_plan_nobody_acts_on_expires_after_the_schedule_timeout() -> None:
    nodes = [make_node("n1").gpus(4).obj()]
    pods = [make_pod(f"w{i}").group("g").min_available(2).gpus(1).obj() for i in range(2)]
    core = core_with(nodes, pods)
    core.filter(pod_info(core, "w0"), ["n1"], T0)
    core.expire(T0 + 59)
    assert core.ledger.plans
    core.expire(T0 + 61)
    assert not core.ledger.plans


def test_bound_members_settle_the_plan_and_count_as_used() -> None:
    nodes = [make_node("n1").gpus(4).obj()]
    pods = [make_pod(f"w{i}").group("g").min_available(2).gpus(2).obj() for i in range(2)]
    core = core_with(nodes, pods)
    core.filter(pod_info(core, "w0"), ["n1"], T0)
    core.drain_effects()
    for name in ("w0", "w1"):
        core.observe_pod(dataclasses.replace(pod_info(core, name), node_name="n1"), T0 + 2)
    assert not core.ledger.plans
    assert any(isinstance(e, GangBound) for e in core.drain_effects())
    assert core.snapshot.free_gpus("n1") == 0
    assert core.free_after_reservations("n1")["nvidia.com/gpu"] == 0


def test_second_gang_waits_while_the_first_holds_the_capacity() -> None:
    nodes = [make_node("n1").gpus(8).obj()]
    a = [make_pod(f"a{i}").group("a").min_available(2).gpus(3).obj() for i in range(2)]
    b = [make_pod(f"b{i}").group("b").min_available(2).gpus(3).obj() for i in range(2)]
    core = core_with(nodes, [*a, *b])
    assert core.filter(pod_info(core, "a0"), ["n1"], T0).verdict is Verdict.PLANNED
    held = core.filter(pod_info(core, "b0"), ["n1"], T0)
    assert held.verdict is Verdict.WAIT
    assert "largest free node has 2" in held.unresolvable["n1"]
    assert set(core.ledger.plans) == {pod_info(core, "a0").group}


def test_planned_node_withdrawn_by_the_scheduler_drops_the_plan() -> None:
    nodes = [make_node("n1").gpus(4).obj(), make_node("n2").gpus(4).obj()]
    pods = [make_pod(f"w{i}").group("g").min_available(2).gpus(4).obj() for i in range(2)]
    core = core_with(nodes, pods)
    core.filter(pod_info(core, "w0"), ["n1", "n2"], T0)
    plan = next(iter(core.ledger.plans.values()))
    w1_node = plan.placements[pod_info(core, "w1").uid]
    others = [n for n in ("n1", "n2") if n != w1_node]
    decision = core.filter(pod_info(core, "w1"), others, T0 + 1)
    assert decision.verdict is Verdict.WAIT
    assert not core.ledger.plans
    assert "no longer offers planned node" in decision.message


@pytest.mark.parametrize(
    ("node_gpus", "expected"),
    [
        pytest.param(8, 10, id="full node scores highest under binpack"),
        pytest.param(0, 0, id="empty node scores lowest under binpack"),
    ],
)
def test_prioritize_binpacks_plain_pods(node_gpus: int, expected: int) -> None:
    nodes = [make_node("n1").gpus(8).obj()]
    pods = [
        make_pod(f"p{i}").scheduler("default-scheduler").gpus(1).node("n1").obj()
        for i in range(node_gpus)
    ]
    plain = make_pod("plain").obj()
    core = core_with(nodes, [*pods, plain])
    assert core.prioritize(pod_info(core, "plain"), ["n1"]) == {"n1": expected}


@pytest.mark.parametrize("strategy", [Strategy.BINPACK, Strategy.SPREAD], ids=str)
def test_a_node_without_gpus_scores_0_under_every_strategy(strategy: Strategy) -> None:
    """Only GPU fill is scored: a CPU-only node, or one the snapshot does not know, scores 0."""
    core = core_with([make_node("cpu").cpu_only().obj(), make_node("gpu").gpus(4).obj()])
    core.shared.policy = Policy(strategy=strategy)
    core.observe_pod(PodInfo.from_api(make_pod("plain").obj()), T0)
    scores = core.prioritize(pod_info(core, "plain"), ["cpu", "gpu", "unknown"])
    assert scores["cpu"] == 0
    assert scores["unknown"] == 0
    # An empty 4-GPU node: lowest under binpack, highest under spread.
    assert scores["gpu"] == (10 if strategy is Strategy.SPREAD else 0)


def test_plan_respects_nodes_kube_scheduler_refused_a_member_earlier() -> None:
    # kube-scheduler's own filters (affinity, host ports...) refused n1 to w1 when it
    # last filtered w1; the plan made at w0's filter must not put w1 on n1.
    nodes = [make_node("n1").gpus(8).obj(), make_node("n2").gpus(8).obj()]
    pods = [make_pod(f"w{i}").group("g").min_available(3).gpus(1).obj() for i in range(2)]
    core = core_with(nodes, pods)
    assert core.filter(pod_info(core, "w1"), ["n2"], T0).verdict is Verdict.WAIT  # 2/3 exist
    core.observe_pod(PodInfo.from_api(make_pod("w2").group("g").min_available(3).gpus(1).obj()), T0)
    decision = core.filter(pod_info(core, "w0"), ["n1", "n2"], T0 + 1)
    assert decision.verdict is Verdict.PLANNED
    plan = next(iter(core.ledger.plans.values()))
    assert plan.placements[pod_info(core, "w1").uid] == "n2"
    assert plan.placements[pod_info(core, "w0").uid] == "n1"  # binpack still fills n1 first


# ---- the pods kube-scheduler asks about ----
def test_a_request_pod_that_claims_a_node_is_never_recorded() -> None:
    # Only the watch may say what holds capacity.
    core = core_with([make_node("n1").gpus(4).obj()])
    claims = make_pod("claims").gpus(3).node("n1").obj()
    info = core.asked_about(claims)
    assert info.node_name == "n1"
    assert claims["metadata"]["uid"] not in core.snapshot.pods
    assert core.snapshot.free_gpus("n1") == 4


def test_a_gang_member_known_only_from_a_request_is_held_and_not_recorded() -> None:
    core = core_with([make_node("n1").gpus(4).obj()], [make_pod("w0").group("g").obj()])
    early = make_pod("w1").group("g").gpus(1).obj()
    info = core.asked_about(early)
    held = core.filter(info, ["n1"], T0)
    assert held.verdict is Verdict.WAIT and "not in gang-extender's watch cache" in held.message
    assert early["metadata"]["uid"] not in core.snapshot.pods
    assert [p.name for p in core.snapshot.members(info.group)] == ["w0"]


def test_a_member_the_watch_delivers_after_it_was_held_completes_the_quorum() -> None:
    # The request-only member is held; its arrival from the watch re-plans the group
    # (kube-scheduler asked about it, so the group is planned without a new filter).
    nodes = [make_node("n1").gpus(4).obj()]
    core = core_with(nodes, [make_pod("w0").group("g").min_available(2).gpus(1).obj()])
    late = make_pod("w1").group("g").min_available(2).gpus(1).obj()
    assert core.filter(core.asked_about(late), ["n1"], T0).verdict is Verdict.WAIT
    core.observe_pod(PodInfo.from_api(late), T0 + 1)
    assert [
        sorted(e.plan.names.values()) for e in core.drain_effects() if isinstance(e, PlanCreated)
    ] == [["default/w0", "default/w1"]]


def test_our_copy_of_a_pod_wins_over_the_requests() -> None:
    core = core_with([make_node("n1").obj()], [make_pod("p").gpus(1).obj()])
    ours = pod_info(core, "p")
    assert core.asked_about(make_pod("p").gpus(3).obj()) is ours
    assert ours.requests["nvidia.com/gpu"] == 1


# ---- counting a pod on its node around the binding call ----
def test_a_plain_pods_assumption_counts_it_on_its_node_before_the_binding_returns() -> None:
    core = core_with([make_node("n1").gpus(4).obj()], [make_pod("plain").gpus(3).obj()])
    uid = pod_info(core, "plain").uid
    assumption = core.assume_bound(uid, "n1", T0)
    assert assumption is not None
    assert assumption.before.node_name is None
    assert assumption.assumed.node_name == "n1"
    assert core.snapshot.pods[uid] is assumption.assumed
    assert core.snapshot.free_gpus("n1") == 1


@pytest.mark.parametrize("planned", [True, False], ids=["gang member", "plain pod"])
def test_a_watch_copy_older_than_a_successful_binding_does_not_free_its_room(
    planned: bool,
) -> None:
    """A pod's nodeName is never unset: a copy without it that the watch delivers after
    our binding succeeded (a write made before the binding, delivered late under load)
    is older than what the binding said. Counting it as unbound offered its GPUs to the
    next gang, a plan kube-scheduler's own cache then refused (round 11 of
    docs/benchmarks.md: a dropped plan, the replan backoff and the scheduler's backoff)."""
    if planned:
        pods = [make_pod(f"w{i}").group("g").min_available(2).gpus(2).obj() for i in range(2)]
    else:
        pods = [make_pod("w0").gpus(2).obj()]
    core = core_with([make_node("n1").gpus(4).obj()], pods)
    stale = pod_info(core, "w0")
    if planned:
        assert core.filter(stale, ["n1"], T0).verdict is Verdict.PLANNED
        assert core.binding_succeeded(stale.uid, "n1", T0 + 1) is True
    else:
        assert core.assume_bound(stale.uid, "n1", T0) is not None
        assert core.binding_succeeded(stale.uid, "n1", T0 + 1) is False  # counted already
    core.observe_pod(dataclasses.replace(stale, planned_node="n1"), T0 + 2)
    assert core.snapshot.pods[stale.uid].node_name == "n1"
    assert core.snapshot.pods[stale.uid].planned_node == "n1"  # the rest of the copy is news
    assert core.snapshot.free_gpus("n1") == 2
    # The watch catching up ends the correction; the pod's deletion forgets it.
    core.observe_pod(dataclasses.replace(stale, node_name="n1"), T0 + 3)
    core.forget_pod(stale.uid, T0 + 4)
    core.observe_pod(stale, T0 + 5)  # nothing of the binding is kept after the deletion
    assert core.snapshot.pods[stale.uid].node_name is None


@pytest.mark.parametrize(
    "pods",
    [
        pytest.param([], id="a pod the watch never delivered"),
        pytest.param(
            [make_pod("plain").gpus(3).node("n1").obj()], id="a pod the watch says is bound"
        ),
    ],
)
def test_nothing_is_assumed_for(pods: list[dict[str, Any]]) -> None:
    core = core_with([make_node("n1").gpus(4).obj(), make_node("n2").gpus(4).obj()], pods)
    before = dict(core.snapshot.pods)
    assert core.assume_bound("uid-default-plain", "n2", T0) is None
    assert core.snapshot.pods == before
    assert core.snapshot.free_gpus("n2") == 4


def _nothing_happened(core: GangCore, uid: str) -> None:
    pass


def _watch_saw_it_bound(core: GangCore, uid: str) -> None:
    seen = dataclasses.replace(core.snapshot.pods[uid], node_name="n1", phase="Running")
    core.observe_pod(seen, T0 + 1)


def _watch_saw_it_deleted(core: GangCore, uid: str) -> None:
    core.forget_pod(uid, T0 + 1)


@pytest.mark.parametrize(
    ("meanwhile", "undone", "free_gpus", "node_after"),
    [
        pytest.param(_nothing_happened, True, 4, None, id="still ours: the room comes back"),
        pytest.param(_watch_saw_it_bound, False, 1, "n1", id="the watch saw it bound: its word"),
        pytest.param(_watch_saw_it_deleted, False, 4, "gone", id="the watch saw it deleted"),
    ],
)
def test_a_plain_pods_assumption_is_undone_only_while_it_is_still_ours(
    meanwhile: Any, undone: bool, free_gpus: int, node_after: str | None
) -> None:
    core = core_with([make_node("n1").gpus(4).obj()], [make_pod("plain").gpus(3).obj()])
    uid = pod_info(core, "plain").uid
    assumption = core.assume_bound(uid, "n1", T0)
    assert assumption is not None
    meanwhile(core, uid)
    assert core.undo_assumption(assumption, T0 + 2) is undone
    pod = core.snapshot.pods.get(uid)
    assert (pod.node_name if pod else "gone") == node_after
    if undone:
        assert pod is assumption.before
    assert core.snapshot.free_gpus("n1") == free_gpus


def test_a_planned_member_is_counted_once_its_binding_succeeded_which_ends_its_reservation() -> (
    None
):
    pods = [make_pod(f"w{i}").group("g").min_available(2).gpus(2).obj() for i in range(2)]
    core = core_with([make_node("n1").gpus(4).obj()], pods)
    assert core.filter(pod_info(core, "w0"), ["n1"], T0).verdict is Verdict.PLANNED
    assert core.reserved_placements() == 2
    uid = pod_info(core, "w0").uid
    assert core.binding_succeeded(uid, "n1", T0 + 1) is True
    assert core.snapshot.pods[uid].node_name == "n1"
    assert core.snapshot.free_gpus("n1") == 2
    assert core.ledger.reserved("n1")["nvidia.com/gpu"] == 2
    assert core.reserved_placements() == 1
    # The second word on the same binding changes nothing.
    assert core.binding_succeeded(uid, "n1", T0 + 2) is False
    assert core.snapshot.free_gpus("n1") == 2


@pytest.mark.parametrize(
    "pods",
    [
        pytest.param([], id="a pod the watch never delivered"),
        pytest.param([make_pod("w0").gpus(2).node("n1").obj()], id="the watch saw it bound first"),
    ],
)
def test_a_successful_binding_counts_nothing_for(pods: list[dict[str, Any]]) -> None:
    core = core_with([make_node("n1").gpus(4).obj(), make_node("n2").gpus(4).obj()], pods)
    generation = core.snapshot.generation
    assert core.binding_succeeded("uid-default-w0", "n2", T0) is False
    assert core.snapshot.generation == generation
    assert core.snapshot.free_gpus("n2") == 4


def test_a_failed_binding_drops_the_members_plan_and_its_waiters_are_told_why() -> None:
    pods = [make_pod(f"w{i}").group("g").min_available(2).gpus(2).obj() for i in range(2)]
    core = core_with([make_node("n1").gpus(4).obj()], pods)
    core.filter(pod_info(core, "w0"), ["n1"], T0)
    arrived = core.arrive(pod_info(core, "w0").uid, "n1", T0 + 1)
    assert arrived.plan_id is not None and arrived.group is not None
    core.bind_failed(pod_info(core, "w1").uid, 'pods "w1" is forbidden', T0 + 2)
    assert core.barrier_state(arrived.plan_id, arrived.group) is BindVerdict.ERROR
    assert core.dropped_plan_message(arrived.plan_id, arrived.group) == (
        'gang default/g: plan dropped: binding default/w1 failed: pods "w1" is forbidden'
    )
    assert core.reserved_placements() == 0
    assert core.ledger.reserved("n1").get("nvidia.com/gpu", 0) == 0


def test_a_failed_binding_of_a_plain_pod_drops_nothing() -> None:
    pods = [make_pod(f"w{i}").group("g").min_available(2).gpus(2).obj() for i in range(2)]
    core = core_with([make_node("n1").gpus(4).obj()], [*pods, make_pod("plain").obj()])
    core.filter(pod_info(core, "w0"), ["n1"], T0)
    core.drain_effects()
    core.bind_failed(pod_info(core, "plain").uid, "forbidden", T0 + 1)
    assert core.drain_effects() == []
    assert core.reserved_placements() == 2


def test_a_barrier_whose_group_left_no_word_is_told_its_plan_id() -> None:
    core = core_with([make_node("n1").obj()])
    assert core.dropped_plan_message(7, GroupKey("default", "g")) == (
        "gang default/g: plan 7 was dropped"
    )
