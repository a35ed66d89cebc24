"""Best-fit decreasing (`_place`: spread's planner and binpack's fallback) and the
shortfall messages, contract by contract."""

from __future__ import annotations

from typing import Any

import pytest

from extender.domain.objects.model import NodeInfo, PodInfo
from extender.domain.objects.policy import GroupTopology, Policy, Strategy
from extender.domain.planning.planner import NodeRestriction, Placement, Shortfall, plan_gang
from tests.builders import make_node, make_pod

GPU = "nvidia.com/gpu"
SPREAD = Policy(name="spread", strategy=Strategy.SPREAD)
BOTH = [pytest.param(Policy(), id="binpack"), pytest.param(SPREAD, id="spread")]


def nodes_and_free(*objs: dict[str, Any]) -> tuple[dict[str, NodeInfo], dict[str, dict[str, int]]]:
    nodes = [NodeInfo.from_api(o) for o in objs]
    return {n.name: n for n in nodes}, {n.name: dict(n.allocatable) for n in nodes}


def member(name: str, gpus: int = 0, planned: str | None = None) -> PodInfo:
    builder = make_pod(name).group("g")
    if gpus:
        builder = builder.gpus(gpus)
    if planned:
        builder = builder.annotation("gang-extender.io/planned-node", planned)
    return PodInfo.from_api(builder.obj())


def placed_on(outcome: Placement | Shortfall) -> dict[str, str]:
    assert isinstance(outcome, Placement), outcome
    return {uid.removeprefix("uid-default-"): node for uid, node in outcome.nodes.items()}


# ----------------------------------------------------------------------- spread
def test_spread_puts_a_member_on_the_node_with_most_free_gpus_whatever_its_name() -> None:
    nodes, free = nodes_and_free(make_node("a").gpus(2).obj(), make_node("b").gpus(8).obj())
    assert placed_on(plan_gang([member("m0", 1)], free, nodes, SPREAD)) == {"m0": "b"}


def test_spread_places_several_members_on_one_node_when_only_it_has_room() -> None:
    nodes, free = nodes_and_free(make_node("n").gpus(4).obj())
    outcome = plan_gang([member("m0", 2), member("m1", 2)], free, nodes, SPREAD)
    assert placed_on(outcome) == {"m0": "n", "m1": "n"}


def test_spread_deals_members_out_evenly_when_nodes_are_otherwise_equal() -> None:
    nodes, free = nodes_and_free(make_node("n0").obj(), make_node("n1").obj())
    outcome = plan_gang([member(f"m{i}") for i in range(4)], free, nodes, SPREAD)
    counts = sorted(list(placed_on(outcome).values()).count(n) for n in ("n0", "n1"))
    assert counts == [2, 2]


def test_members_after_one_that_does_not_fit_are_still_counted_as_placeable() -> None:
    nodes, free = nodes_and_free(make_node("a").gpus(2).obj(), make_node("b").gpus(2).obj())
    outcome = plan_gang([member("big", 4), member("m1", 1), member("m2", 1)], free, nodes, SPREAD)
    assert isinstance(outcome, Shortfall)
    assert (outcome.placeable, outcome.total) == (2, 3)
    assert outcome.unplaced == ("uid-default-big",)


# ------------------------------------------- restrictions and earlier plans, both
@pytest.mark.parametrize("policy", BOTH)
def test_a_member_goes_only_to_a_node_kube_scheduler_left_for_it(policy: Policy) -> None:
    nodes, free = nodes_and_free(make_node("a").gpus(4).obj(), make_node("b").gpus(4).obj())
    pods = [member("m0", 2), member("m1", 2)]
    allowed = {p.uid: NodeRestriction(allowed=frozenset({"b"})) for p in pods}
    assert placed_on(plan_gang(pods, free, nodes, policy, allowed=allowed)) == {
        "m0": "b",
        "m1": "b",
    }


@pytest.mark.parametrize("policy", BOTH)
def test_a_member_never_goes_to_a_node_kube_scheduler_refused_it(policy: Policy) -> None:
    nodes, free = nodes_and_free(make_node("a").gpus(4).obj(), make_node("b").gpus(4).obj())
    pods = [member("m0", 2), member("m1", 2)]
    allowed = {p.uid: NodeRestriction(denied=frozenset({"a"})) for p in pods}
    assert placed_on(plan_gang(pods, free, nodes, policy, allowed=allowed)) == {
        "m0": "b",
        "m1": "b",
    }


@pytest.mark.parametrize("policy", BOTH)
def test_an_earlier_plans_node_is_kept_only_while_kube_scheduler_still_allows_it(
    policy: Policy,
) -> None:
    nodes, free = nodes_and_free(make_node("a").gpus(4).obj(), make_node("b").gpus(4).obj())
    pod = member("m0", 2, planned="a")
    assert placed_on(plan_gang([pod], free, nodes, policy)) == {"m0": "a"}
    only_b = {pod.uid: NodeRestriction(allowed=frozenset({"b"}))}
    assert placed_on(plan_gang([pod], free, nodes, policy, allowed=only_b)) == {"m0": "b"}


@pytest.mark.parametrize("policy", BOTH)
def test_an_earlier_plans_node_that_is_gone_is_planned_afresh(policy: Policy) -> None:
    nodes, free = nodes_and_free(make_node("b").gpus(4).obj())
    pod = member("m0", 2, planned="gone")
    assert placed_on(plan_gang([pod], free, nodes, policy)) == {"m0": "b"}


@pytest.mark.parametrize("policy", BOTH)
def test_an_earlier_plans_node_is_kept_even_when_another_ranks_better(policy: Policy) -> None:
    # binpack would pick "tight", spread "roomy": the planned "middle" wins for both.
    nodes, free = nodes_and_free(
        make_node("tight").gpus(2).obj(),
        make_node("middle").gpus(4).obj(),
        make_node("roomy").gpus(8).obj(),
    )
    assert placed_on(plan_gang([member("m0", 2, planned="middle")], free, nodes, policy)) == {
        "m0": "middle"
    }


def test_a_rack_that_holds_the_gang_only_on_paper_is_skipped_for_the_next_one() -> None:
    # Rack "a" has the GPUs but its node is tainted; rack "b" holds the gang on two
    # nodes: the gang stays in rack "b" rather than spilling into rack "c".
    rack = "example.com/rack"
    nodes, free = nodes_and_free(
        make_node("a1").gpus(4).label(rack, "a").taint("k", "v").obj(),
        make_node("b1").gpus(2).label(rack, "b").obj(),
        make_node("b2").gpus(2).label(rack, "b").obj(),
        make_node("c1").gpus(2).label(rack, "c").obj(),
    )
    outcome = plan_gang(
        [member("m0", 2), member("m1", 2)],
        free,
        nodes,
        Policy(),
        topology=GroupTopology(preferred=(rack,)),
    )
    assert set(placed_on(outcome).values()) == {"b1", "b2"}


# ------------------------------------------------------------------- messages
def test_an_empty_cluster_is_a_gpu_shortfall_with_zeros() -> None:
    outcome = plan_gang([member("m0", 1)], {}, {}, Policy())
    assert isinstance(outcome, Shortfall)
    assert outcome.message == (
        f"0/1 members placeable: needs 1 {GPU} in all (1 for m0), 0 free, largest free node has 0"
    )


def test_nodes_without_gpus_count_as_no_free_gpus_in_a_shortfall() -> None:
    nodes, free = nodes_and_free(make_node("full").gpus(0).obj(), make_node("cpu").cpu_only().obj())
    outcome = plan_gang([member("w", 1), member("c")], free, nodes, Policy())
    assert isinstance(outcome, Shortfall)
    assert outcome.message == (
        f"1/2 members placeable: needs 1 {GPU} in all (1 for w), 0 free, largest free node has 0"
    )


def pool_member(name: str, gpus: int, pool: str) -> PodInfo:
    obj = make_pod(name).group("g").gpus(gpus).obj()
    obj["spec"]["nodeSelector"] = {"pool": pool}
    return PodInfo.from_api(obj)


def test_a_shortfall_counts_only_the_nodes_the_member_may_use() -> None:
    # A big node outside the members' pool is no room for them: the hold must not
    # say "6 free, largest free node has 4" when the pool has 2.
    nodes, free = nodes_and_free(
        make_node("pool-0").gpus(2).label("pool", "a").obj(),
        make_node("other-0").gpus(4).label("pool", "b").obj(),
        make_node("tainted").gpus(8).label("pool", "a").taint("dedicated", "x").obj(),
    )
    outcome = plan_gang(
        [pool_member("m0", 2, "a"), pool_member("m1", 2, "a")], free, nodes, Policy()
    )
    assert isinstance(outcome, Shortfall)
    assert outcome.message == (
        f"1/2 members placeable: needs 4 {GPU} in all (2 for m1), 2 free, largest free node has 2"
    )


def test_a_shortfall_counts_only_the_nodes_kube_scheduler_left_the_member() -> None:
    nodes, free = nodes_and_free(make_node("n1").gpus(4).obj(), make_node("n2").gpus(1).obj())
    m0 = member("m0", 2)
    outcome = plan_gang(
        [m0], free, nodes, Policy(), allowed={m0.uid: NodeRestriction(allowed=frozenset({"n2"}))}
    )
    assert isinstance(outcome, Shortfall)
    assert outcome.message == (
        f"0/1 members placeable: needs 2 {GPU} in all (2 for m0), 1 free, largest free node has 1"
    )


def test_nodes_that_no_member_may_use_make_a_no_eligible_node_shortfall() -> None:
    nodes, free = nodes_and_free(make_node("other-0").gpus(4).label("pool", "b").obj())
    outcome = plan_gang([pool_member("m0", 1, "a")], free, nodes, Policy())
    assert isinstance(outcome, Shortfall)
    assert outcome.message == (
        "0/1 members placeable: no eligible node left for m0 (taints, nodeSelector or cordoned nodes)"
    )


def test_an_empty_cluster_is_a_cpu_shortfall_with_zeros() -> None:
    pod = PodInfo.from_api(make_pod("m0").group("g").cpu("1").obj())
    outcome = plan_gang([pod], {}, {}, Policy())
    assert isinstance(outcome, Shortfall)
    assert outcome.message == "0/1 members placeable: m0 needs cpu 1000m, largest free node has 0m"


def test_a_node_that_does_not_advertise_memory_offers_none() -> None:
    nodes, _ = nodes_and_free(make_node("n").gpus(0).obj())
    free = {"n": {"cpu": 4000, "pods": 10}}
    pod = PodInfo.from_api(make_pod("m0").group("g").memory("1Gi").obj())
    outcome = plan_gang([pod], free, nodes, Policy())
    assert isinstance(outcome, Shortfall)
    assert outcome.message == (
        f"0/1 members placeable: m0 needs memory {2**30}, largest free node has 0"
    )


def test_a_node_with_no_pod_slots_left_is_named_as_the_shortfall() -> None:
    # The member asks for no cpu or memory; a node with no cpu and no pod slot left.
    nodes, _ = nodes_and_free(make_node("n").gpus(0).obj())
    free = {"n": {"cpu": 0, "memory": 2**30, "pods": 0}}
    outcome = plan_gang([member("m0")], free, nodes, Policy())
    assert isinstance(outcome, Shortfall)
    assert outcome.message == "0/1 members placeable: m0 needs pods 1, largest free node has 0"


def test_a_resource_that_fits_exactly_is_not_named_as_the_shortfall() -> None:
    nodes, _ = nodes_and_free(make_node("n").gpus(0).obj())
    free = {"n": {"cpu": 4000, "memory": 2**30, "pods": 10}}
    pod = PodInfo.from_api(make_pod("m0").group("g").cpu("4").memory("2Gi").obj())
    outcome = plan_gang([pod], free, nodes, Policy())
    assert isinstance(outcome, Shortfall)
    assert outcome.message == (
        f"0/1 members placeable: m0 needs memory {2 * 2**30}, largest free node has {2**30}"
    )


def test_a_soft_taint_listed_first_does_not_hide_a_hard_one_after_it() -> None:
    node = make_node("n").taint("a", "x", "PreferNoSchedule").taint("b", "y", "NoSchedule").obj()
    nodes, free = nodes_and_free(node)
    assert isinstance(plan_gang([member("m0", 1)], free, nodes, Policy()), Shortfall)


def test_spread_sends_a_member_to_the_node_with_most_free_cpu_when_gpus_tie() -> None:
    nodes, free = nodes_and_free(
        make_node("big").gpus(0).cpu("64").obj(), make_node("small").gpus(0).cpu("4").obj()
    )
    pods = [PodInfo.from_api(make_pod(f"m{i}").group("g").cpu("1").obj()) for i in range(3)]
    assert placed_on(plan_gang(pods, free, nodes, SPREAD)) == {
        "m0": "big",
        "m1": "small",
        "m2": "big",
    }


def test_the_member_asking_more_cpu_is_placed_first() -> None:
    nodes, free = nodes_and_free(
        make_node("four").gpus(0).cpu("4").obj(), make_node("two").gpus(0).cpu("2").obj()
    )
    small = PodInfo.from_api(make_pod("a-small").group("g").cpu("1").obj())
    big = PodInfo.from_api(make_pod("b-big").group("g").cpu("4").obj())
    assert placed_on(plan_gang([small, big], free, nodes, SPREAD)) == {
        "a-small": "two",
        "b-big": "four",
    }


def test_the_member_asking_more_memory_is_placed_first() -> None:
    roomy, tight = make_node("roomy").gpus(0).obj(), make_node("tight").gpus(0).obj()
    roomy["status"]["allocatable"]["memory"] = "4Gi"
    tight["status"]["allocatable"]["memory"] = "2Gi"
    nodes, free = nodes_and_free(roomy, tight)
    small = PodInfo.from_api(make_pod("a-small").group("g").memory("1Gi").obj())
    big = PodInfo.from_api(make_pod("b-big").group("g").memory("4Gi").obj())
    assert placed_on(plan_gang([small, big], free, nodes, SPREAD)) == {
        "a-small": "tight",
        "b-big": "roomy",
    }


@pytest.mark.parametrize("policy", BOTH)
def test_equally_good_nodes_are_chosen_by_name_so_plans_are_reproducible(policy: Policy) -> None:
    nodes, free = nodes_and_free(make_node("b").gpus(4).obj(), make_node("a").gpus(4).obj())
    assert placed_on(plan_gang([member("m0", 1)], free, nodes, policy)) == {"m0": "a"}
