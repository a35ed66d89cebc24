"""Where the planner may put a member at all, and in which order it fills nodes.

The hand-made mutation run of issue 13 found the suite passing with a planner that
ignored nodeSelector, taints or a cordon, ranked cpu before GPUs, or placed the
smallest members first. Each contract below fails on one of those.
"""

from __future__ import annotations

from typing import Any

import pytest

from extender.domain.objects.model import NodeInfo, PodInfo
from extender.domain.objects.policy import (
    KUEUE_PREFERRED_TOPOLOGY,
    KUEUE_REQUIRED_TOPOLOGY,
    Policy,
    Strategy,
)
from extender.domain.planning.planner import (
    NodeRestriction,
    Placement,
    Shortfall,
    node_accepts,
    plan_gang,
)
from tests.builders import make_node, make_pod

GPU = "nvidia.com/gpu"


def nodes_and_free(*objs: dict[str, Any]) -> tuple[dict[str, NodeInfo], dict[str, dict[str, int]]]:
    nodes = [NodeInfo.from_api(o) for o in objs]
    return {n.name: n for n in nodes}, {n.name: dict(n.allocatable) for n in nodes}


def member(name: str, gpus: int, **spec: Any) -> PodInfo:
    obj = make_pod(name).group("g").gpus(gpus).obj()
    obj["spec"].update(spec)
    return PodInfo.from_api(obj)


def placed_on(outcome: Placement | Shortfall) -> dict[str, str]:
    assert isinstance(outcome, Placement), outcome
    return {uid.removeprefix("uid-default-"): node for uid, node in outcome.nodes.items()}


# ------------------------------------------------------------ static eligibility
def test_a_cordoned_node_is_never_planned() -> None:
    cordoned = make_node("cordoned").gpus(8).obj()
    cordoned["spec"]["unschedulable"] = True
    nodes, free = nodes_and_free(cordoned, make_node("open").gpus(2).obj())
    assert placed_on(plan_gang([member("m0", 2)], free, nodes, Policy())) == {"m0": "open"}


@pytest.mark.parametrize("effect", ["NoSchedule", "NoExecute"])
def test_a_node_tainted_against_the_member_is_never_planned(effect: str) -> None:
    tainted = make_node("tainted").gpus(2).taint("dedicated", "infer", effect).obj()
    nodes, free = nodes_and_free(tainted, make_node("open").gpus(8).obj())
    assert placed_on(plan_gang([member("m0", 2)], free, nodes, Policy())) == {"m0": "open"}


def test_a_prefer_no_schedule_taint_does_not_keep_a_member_off_a_node() -> None:
    soft = make_node("soft").gpus(2).taint("dedicated", "infer", "PreferNoSchedule").obj()
    nodes, free = nodes_and_free(soft, make_node("open").gpus(8).obj())
    # Binpack takes the tighter node, soft taint or not.
    assert placed_on(plan_gang([member("m0", 2)], free, nodes, Policy())) == {"m0": "soft"}


@pytest.mark.parametrize(
    ("toleration", "tolerated"),
    [
        pytest.param({"key": "dedicated", "operator": "Equal", "value": "infer"}, True, id="equal"),
        pytest.param({"key": "dedicated", "operator": "Exists"}, True, id="key-exists"),
        pytest.param({"operator": "Exists"}, True, id="everything"),
        pytest.param(
            {"key": "dedicated", "operator": "Equal", "value": "infer", "effect": "NoSchedule"},
            True,
            id="same-effect",
        ),
        pytest.param(
            {"key": "dedicated", "operator": "Equal", "value": "train"}, False, id="value"
        ),
        pytest.param({"key": "other", "operator": "Exists"}, False, id="other-key"),
        pytest.param(
            {"key": "dedicated", "operator": "Exists", "effect": "NoExecute"},
            False,
            id="other-effect",
        ),
    ],
)
def test_a_tainted_node_is_planned_only_for_a_member_that_tolerates_the_taint(
    toleration: dict[str, str], tolerated: bool
) -> None:
    tainted = NodeInfo.from_api(make_node("tainted").taint("dedicated", "infer").obj())
    pod = member("m0", 1, tolerations=[toleration])
    assert node_accepts(tainted, pod) is tolerated


def test_a_taint_without_a_value_is_tolerated_by_equal_without_a_value() -> None:
    tainted = NodeInfo.from_api(make_node("tainted").taint("dedicated", "").obj())
    pod = member("m0", 1, tolerations=[{"key": "dedicated", "operator": "Equal"}])
    assert node_accepts(tainted, pod) is True


def test_a_member_with_a_node_selector_goes_only_to_nodes_with_those_labels() -> None:
    nodes, free = nodes_and_free(
        make_node("plain").gpus(2).obj(),
        make_node("a100").gpus(8).label("gpu", "a100").label("pool", "x").obj(),
        make_node("a100-other-pool").gpus(2).label("gpu", "a100").label("pool", "y").obj(),
    )
    pod = member("m0", 2, nodeSelector={"gpu": "a100", "pool": "x"})
    assert placed_on(plan_gang([pod], free, nodes, Policy())) == {"m0": "a100"}


def test_a_member_no_node_accepts_is_told_why() -> None:
    cordoned = make_node("cordoned").gpus(8).obj()
    cordoned["spec"]["unschedulable"] = True
    nodes, free = nodes_and_free(cordoned)
    cpu_pod = PodInfo.from_api(make_pod("m0").group("g").cpu("1").obj())
    outcome = plan_gang([cpu_pod], free, nodes, Policy())
    assert outcome == Shortfall(
        0,
        1,
        "0/1 members placeable: no eligible node left for m0 "
        "(taints, nodeSelector or cordoned nodes)",
        unplaced=(cpu_pod.uid,),
    )


def test_a_shortfall_asked_only_whether_the_gang_fits_is_not_worded() -> None:
    # A victim search's trial plans only ask whether the gang fits: wording the
    # shortfall reads every node's room, so they go without it; the rest is the same.
    nodes, free = nodes_and_free(make_node("a").gpus(2).obj(), make_node("b").gpus(1).obj())
    members = [member("m0", 2), member("m1", 2)]
    worded = plan_gang(members, free, nodes, Policy())
    bare = plan_gang(members, free, nodes, Policy(), explain=False)
    assert isinstance(worded, Shortfall) and worded.message.startswith("1/2 members placeable")
    assert bare == Shortfall(worded.placeable, 2, "", unplaced=worded.unplaced)
    fits = [member("m0", 2), member("m1", 1)]
    assert plan_gang(fits, free, nodes, Policy(), explain=False) == plan_gang(
        fits, free, nodes, Policy()
    )


# ------------------------------------------------------------------ fill order
def test_binpack_ranks_nodes_by_free_gpus_before_free_cpu() -> None:
    # "few-gpus" leaves 0 GPUs and lots of cpu; "few-cpus" leaves 2 GPUs and little cpu.
    nodes, free = nodes_and_free(
        make_node("few-gpus").gpus(2).cpu("64").obj(),
        make_node("few-cpus").gpus(4).cpu("2").obj(),
    )
    assert placed_on(plan_gang([member("m0", 2)], free, nodes, Policy())) == {"m0": "few-gpus"}


def test_binpack_breaks_a_gpu_tie_by_the_least_free_cpu() -> None:
    nodes, free = nodes_and_free(
        make_node("roomy").gpus(2).cpu("64").obj(),
        make_node("tight").gpus(2).cpu("4").obj(),
    )
    assert placed_on(plan_gang([member("m0", 2)], free, nodes, Policy())) == {"m0": "tight"}


def test_the_largest_member_is_placed_first_so_it_gets_the_node_that_holds_it() -> None:
    # One 6-GPU and one 2-GPU node: the 2-GPU member placed first would take the
    # 6-GPU node's room under best fit only if sizes were ignored; largest first
    # puts 6 on "six" and 2 on "two".
    nodes, free = nodes_and_free(make_node("six").gpus(6).obj(), make_node("two").gpus(2).obj())
    small, big = member("a-small", 2), member("b-big", 6)
    outcome = plan_gang([small, big], free, nodes, Policy(name="spread", strategy=Strategy.SPREAD))
    assert placed_on(outcome) == {"a-small": "two", "b-big": "six"}


def test_spread_puts_each_member_on_the_node_with_most_free_gpus() -> None:
    nodes, free = nodes_and_free(*(make_node(f"n{i}").gpus(4).obj() for i in range(3)))
    outcome = plan_gang(
        [member(f"m{i}", 1) for i in range(3)],
        free,
        nodes,
        Policy(name="spread", strategy=Strategy.SPREAD),
    )
    assert sorted(placed_on(outcome).values()) == ["n0", "n1", "n2"]


def test_a_member_keeps_the_node_of_its_earlier_plan_when_it_still_fits() -> None:
    # After a restart a member's planned-node annotation is honoured, even where binpack
    # alone would choose the tighter node.
    nodes, free = nodes_and_free(make_node("tight").gpus(2).obj(), make_node("big").gpus(8).obj())
    obj = make_pod("m0").group("g").gpus(2).annotation("gang-extender.io/planned-node", "big").obj()
    pod = PodInfo.from_api(obj)
    assert pod.planned_node == "big"
    assert placed_on(plan_gang([pod], free, nodes, Policy())) == {"m0": "big"}


def test_a_member_whose_earlier_node_is_now_too_full_is_planned_afresh() -> None:
    nodes, free = nodes_and_free(make_node("tight").gpus(2).obj(), make_node("big").gpus(8).obj())
    free["big"][GPU] = 1
    obj = make_pod("m0").group("g").gpus(2).annotation("gang-extender.io/planned-node", "big").obj()
    assert placed_on(plan_gang([PodInfo.from_api(obj)], free, nodes, Policy())) == {"m0": "tight"}


def test_a_member_too_big_in_cpu_is_told_the_largest_free_cpu() -> None:
    nodes, free = nodes_and_free(make_node("n").gpus(2).obj())
    pod = PodInfo.from_api(make_pod("m0").group("g").cpu("64").obj())
    outcome = plan_gang([pod], free, nodes, Policy())
    assert isinstance(outcome, Shortfall)
    assert outcome.message == (
        "0/1 members placeable: m0 needs cpu 64000m, largest free node has 32000m"
    )


def test_a_member_too_big_in_memory_is_told_the_largest_free_memory() -> None:
    nodes, free = nodes_and_free(make_node("n").gpus(2).obj())
    pod = PodInfo.from_api(make_pod("m0").group("g").memory("512Gi").obj())
    outcome = plan_gang([pod], free, nodes, Policy())
    assert isinstance(outcome, Shortfall)
    assert outcome.message == (
        f"0/1 members placeable: m0 needs memory {512 * 2**30}, largest free node has {256 * 2**30}"
    )


def test_a_gpu_shortfall_gives_the_gang_total_the_free_total_and_the_largest_node() -> None:
    nodes, free = nodes_and_free(make_node("a").gpus(3).obj(), make_node("b").gpus(2).obj())
    outcome = plan_gang([member("m0", 3), member("m1", 3)], free, nodes, Policy())
    assert isinstance(outcome, Shortfall)
    assert (outcome.placeable, outcome.total) == (1, 2)
    assert outcome.message == (
        f"1/2 members placeable: needs 6 {GPU} in all (3 for m1), 5 free, largest free node has 3"
    )


# ------------------------------------------------- kube-scheduler's own filters
def test_a_member_goes_only_to_nodes_kube_scheduler_left_for_it() -> None:
    nodes, free = nodes_and_free(make_node("tight").gpus(2).obj(), make_node("big").gpus(8).obj())
    pod = member("m0", 2)
    only_big = {pod.uid: NodeRestriction(allowed=frozenset({"big"}))}
    assert placed_on(plan_gang([pod], free, nodes, Policy(), allowed=only_big)) == {"m0": "big"}


def test_a_member_never_goes_to_a_node_kube_scheduler_refused_it() -> None:
    nodes, free = nodes_and_free(make_node("tight").gpus(2).obj(), make_node("big").gpus(8).obj())
    pod = member("m0", 2)
    not_tight = {pod.uid: NodeRestriction(denied=frozenset({"tight"}))}
    assert placed_on(plan_gang([pod], free, nodes, Policy(), allowed=not_tight)) == {"m0": "big"}


def test_a_restriction_on_one_member_does_not_restrict_the_others() -> None:
    nodes, free = nodes_and_free(make_node("a").gpus(2).obj(), make_node("b").gpus(2).obj())
    pods = [member("m0", 2), member("m1", 2)]
    only_b = {pods[0].uid: NodeRestriction(allowed=frozenset({"b"}))}
    outcome = plan_gang(pods, free, nodes, Policy(), allowed=only_b)
    assert placed_on(outcome) == {"m0": "b", "m1": "a"}


# ------------------------------------------------------ Kueue topology annotations
def test_members_that_disagree_on_their_kueue_topology_are_told_which_says_what() -> None:
    nodes, free = nodes_and_free(make_node("n").gpus(8).obj())
    zone, rack = "topology.kubernetes.io/zone", "example.com/rack"
    pods = [
        PodInfo.from_api(
            make_pod("m0").group("g").gpus(1).annotation(KUEUE_REQUIRED_TOPOLOGY, zone).obj()
        ),
        PodInfo.from_api(
            make_pod("m1").group("g").gpus(1).annotation(KUEUE_PREFERRED_TOPOLOGY, rack).obj()
        ),
    ]
    assert plan_gang(pods, free, nodes, Policy()) == Shortfall(
        0,
        2,
        f"members disagree on their Kueue topology annotations (m0: required {zone}, "
        f"m1: preferred {rack}); give every member the same",
    )


def test_members_agreeing_on_a_required_kueue_topology_stay_in_one_zone() -> None:
    zone = "topology.kubernetes.io/zone"
    nodes, free = nodes_and_free(
        make_node("a1").gpus(2).label(zone, "a").obj(),
        make_node("b1").gpus(1).label(zone, "b").obj(),
        make_node("b2").gpus(1).label(zone, "b").obj(),
    )
    pods = [
        PodInfo.from_api(
            make_pod(f"m{i}").group("g").gpus(1).annotation(KUEUE_REQUIRED_TOPOLOGY, zone).obj()
        )
        for i in range(3)
    ]
    outcome = plan_gang(pods, free, nodes, Policy())
    assert isinstance(outcome, Shortfall)
    assert outcome.message.startswith(f"no single {zone} domain fits all 3 members")
