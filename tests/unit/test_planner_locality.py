"""Locality: a gang on the fewest nodes, then the smallest topology domain (issue 13 item 4)."""

from __future__ import annotations

from typing import Any

import pytest

from extender.domain.objects.model import GroupSpec, NodeInfo, PodInfo
from extender.domain.objects.policy import (
    KUEUE_PREFERRED_TOPOLOGY,
    KUEUE_REQUIRED_TOPOLOGY,
    GroupTopology,
    Policy,
    Strategy,
    Topology,
    TopologyMode,
    topology_from_spec,
)
from extender.domain.planning.planner import Placement, Shortfall, plan_gang
from extender.domain.state.decisions import Verdict
from tests.builders import (
    RACK,
    ZONE,
    cluster,
    gang,
    gpu_node,
    make_node,
    make_pod,
    nodes_used,
    racks,
    zones,
)
from tests.core_builder import make_core

GPU = "nvidia.com/gpu"


# ---------------------------------------------------------------- fewest nodes
def test_three_one_gpu_workers_share_the_four_gpu_node_not_the_two_gpu_one() -> None:
    nodes, free = cluster(gpu_node("two", 2), gpu_node("four", 4))
    assert nodes_used(plan_gang(gang(3, 1), free, nodes, Policy())) == {"four"}


def test_the_tightest_node_that_holds_the_whole_gang_is_chosen() -> None:
    nodes, free = cluster(gpu_node("a", 8), gpu_node("b", 4), gpu_node("c", 3), gpu_node("d", 2))
    assert nodes_used(plan_gang(gang(3, 1), free, nodes, Policy())) == {"c"}


def test_a_gang_bigger_than_any_node_fills_the_largest_then_the_tightest_for_the_rest() -> None:
    # 10 GPUs: no node holds them; 8 + 2 is two nodes (the 8 and the 2), leaving the 4 whole.
    nodes, free = cluster(gpu_node("a", 8), gpu_node("b", 4), gpu_node("c", 2))
    outcome = plan_gang(gang(5, 2), free, nodes, Policy())
    assert nodes_used(outcome) == {"a", "c"}


def test_eight_four_gpu_members_fill_four_whole_nodes() -> None:
    nodes, free = cluster(*(gpu_node(f"n{i}", 8) for i in range(6)))
    outcome = plan_gang(gang(8, 4), free, nodes, Policy())
    used = nodes_used(outcome)
    assert len(used) == 4
    assert isinstance(outcome, Placement)
    for name in used:
        assert sum(1 for n in outcome.nodes.values() if n == name) == 2


def test_members_without_gpus_go_beside_their_gang() -> None:
    # The cpu-only node is empty and would take a lone cpu pod; the gang's node has room.
    nodes, free = cluster(gpu_node("four", 4), gpu_node("cpu", 0))
    assert nodes_used(plan_gang(gang(2, 1, cpu_only=1), free, nodes, Policy())) == {"four"}


def test_a_node_the_member_may_not_use_is_never_chosen_for_locality() -> None:
    nodes, free = cluster(gpu_node("two", 2), gpu_node("four", 4))
    tainted = NodeInfo.from_api(make_node("four").gpus(4).taint("dedicated", "x").obj())
    nodes["four"] = tainted
    outcome = plan_gang(gang(2, 1), free, nodes, Policy())
    assert nodes_used(outcome) == {"two"}


def test_spread_still_spreads() -> None:
    nodes, free = cluster(gpu_node("a", 4), gpu_node("b", 4), gpu_node("c", 4))
    policy = Policy(name="spread", strategy=Strategy.SPREAD)
    assert len(nodes_used(plan_gang(gang(3, 1), free, nodes, policy))) == 3


def test_remaining_members_go_beside_the_bound_ones() -> None:
    nodes, free = cluster(gpu_node("a", 2), gpu_node("b", 4))
    free["b"][GPU] = 2  # one member is bound on b, which has room for the rest
    bound = PodInfo.from_api(make_pod("m9").group("g").gpus(2).node("b").obj())
    assert nodes_used(plan_gang(gang(2, 1), free, nodes, Policy(), bound=[bound])) == {"b"}


# ---------------------------------------------------------------- required topology
def test_a_required_zone_is_never_spanned_and_the_hold_names_it() -> None:
    nodes, free = cluster(*zones(a=(4, 2), b=(4,)))
    outcome = plan_gang(gang(4, 2), free, nodes, Policy(), topology=GroupTopology(required=ZONE))
    assert isinstance(outcome, Shortfall)
    assert outcome.message.startswith(
        f"no single {ZONE} domain fits all 4 members (needs 8 {GPU} in all;"
    )
    assert f"most free {GPU} in one {ZONE} domain: 6" in outcome.message
    # Without the requirement the gang does fit, across zones.
    assert isinstance(plan_gang(gang(4, 2), free, nodes, Policy()), Placement)


def test_a_required_zone_takes_the_zone_that_holds_the_gang() -> None:
    nodes, free = cluster(*zones(a=(2,), b=(2, 2)))
    outcome = plan_gang(gang(3, 1), free, nodes, Policy(), topology=GroupTopology(required=ZONE))
    assert nodes_used(outcome) <= {"b1", "b2"}


def test_nodes_without_the_required_label_are_not_a_domain() -> None:
    nodes, free = cluster(gpu_node("a1", 8))
    outcome = plan_gang(gang(2, 1), free, nodes, Policy(), topology=GroupTopology(required=ZONE))
    assert isinstance(outcome, Shortfall)
    assert "most free" in outcome.message


def test_bound_members_fix_the_required_domain() -> None:
    nodes, free = cluster(*zones(a=(1,), b=(8,)))
    bound = PodInfo.from_api(make_pod("m9").group("g").gpus(1).node("a1").obj())
    free["a1"][GPU] = 0
    outcome = plan_gang(
        gang(1, 1), free, nodes, Policy(), topology=GroupTopology(required=ZONE), bound=[bound]
    )
    assert isinstance(outcome, Shortfall)
    assert f"{ZONE}=a, where members are bound" in outcome.message


def test_the_policy_topology_is_the_default_and_a_group_topology_overrides_it() -> None:
    nodes, free = cluster(*zones(a=(2,), b=(2,)))
    required = Policy(name="zone", topology=Topology(key=ZONE, mode=TopologyMode.REQUIRED))
    assert isinstance(plan_gang(gang(3, 1), free, nodes, required), Shortfall)
    relaxed = plan_gang(
        gang(3, 1), free, nodes, required, topology=GroupTopology(preferred=(ZONE,))
    )
    assert len(nodes_used(relaxed)) == 2


# ---------------------------------------------------------------- preferred topology
def test_a_preferred_rack_uses_one_rack_when_one_fits() -> None:
    # Best fit per node alone would take a's 2-GPU node and b's 2-GPU node;
    # rack c holds the whole gang on two nodes.
    nodes, free = cluster(*racks(a=(2,), b=(2,), c=(3, 3)))
    outcome = plan_gang(
        gang(4, 1), free, nodes, Policy(), topology=GroupTopology(preferred=(RACK,))
    )
    assert {nodes[n].labels[RACK] for n in nodes_used(outcome)} == {"c"}


def test_preferred_labels_are_minimised_in_order_zone_then_rack() -> None:
    nodes, free = cluster(*racks(zone="a", p=(4,), q=(2,)), *racks(zone="b", r=(4, 4)))
    topology = GroupTopology(preferred=(ZONE, RACK))
    outcome = plan_gang(gang(3, 2), free, nodes, Policy(), topology=topology)
    # Zone a is the tighter fit but needs two racks; zone b holds the gang in one rack.
    assert nodes_used(outcome) == {"r1", "r2"}


def test_a_preferred_domain_gives_way_when_none_holds_the_gang() -> None:
    nodes, free = cluster(*racks(a=(2,), b=(2,), c=(1,)))
    outcome = plan_gang(
        gang(4, 1), free, nodes, Policy(), topology=GroupTopology(preferred=(RACK,))
    )
    assert nodes_used(outcome) == {"a1", "b1"}


# ---------------------------------------------------------------- parsing
@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, None),
        ({}, None),
        ({"required": ZONE}, GroupTopology(required=ZONE)),
        ({"preferred": [ZONE, RACK]}, GroupTopology(preferred=(ZONE, RACK))),
        ({"required": ZONE, "preferred": [RACK]}, GroupTopology(required=ZONE, preferred=(RACK,))),
    ],
)
def test_podgroup_topology_is_read(raw: Any, expected: GroupTopology | None) -> None:
    assert topology_from_spec(raw, where="PodGroup spec.topology") == (expected, None)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("zone", "PodGroup spec.topology must be a mapping"),
        (
            {"required": "no spaces"},
            "PodGroup spec.topology.required='no spaces' is not a node label key",
        ),
        ({"required": 3}, "spec.topology.required=3 is not a node label key"),
        ({"preferred": RACK}, "spec.topology.preferred must be a list of node label keys"),
        (
            {"preferred": [RACK, "-bad"]},
            "spec.topology.preferred[1]='-bad' is not a node label key",
        ),
        (
            {"preferred": [RACK, ZONE, RACK]},
            f"spec.topology.preferred names a label twice: {RACK}, {ZONE}, {RACK}",
        ),
        ({"required": RACK, "preferred": [RACK]}, f"{RACK} is both required and preferred"),
        ({"requried": ZONE}, "unknown field(s) requried"),
        (
            {"requried": ZONE, "prefered": [RACK]},
            "unknown field(s) prefered, requried; use required, preferred",
        ),
        ({"preferred": ["Bad_Prefix.io/rack"]}, "is not a node label key"),
    ],
)
def test_bad_podgroup_topology_is_a_clear_error(raw: Any, message: str) -> None:
    topology, error = topology_from_spec(raw, where="PodGroup spec.topology")
    assert topology is None
    assert error is not None and message in error


def podgroup(topology: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "g", "namespace": "default"},
        "spec": {"minMember": 2, "topology": topology},
    }


def test_a_podgroup_with_a_bad_topology_is_rejected_by_name() -> None:
    spec = GroupSpec.from_podgroup(podgroup({"preferred": "rack"}), source="PodGroup")
    assert spec.error == (
        "PodGroup spec.topology.preferred must be a list of node label keys, coarsest first"
    )
    good = GroupSpec.from_podgroup(podgroup({"required": ZONE}), source="PodGroup")
    assert good.error is None and good.topology == GroupTopology(required=ZONE)


def test_kueue_annotations_are_read() -> None:
    required = gang(1, 1, **{KUEUE_REQUIRED_TOPOLOGY: ZONE})[0]
    preferred = gang(1, 1, **{KUEUE_PREFERRED_TOPOLOGY: RACK})[0]
    assert required.topology == GroupTopology(required=ZONE)
    assert preferred.topology == GroupTopology(preferred=(RACK,))
    assert required.group_error is None and preferred.group_error is None


def test_both_kueue_annotations_or_a_bad_label_are_a_group_error() -> None:
    both = gang(1, 1, **{KUEUE_REQUIRED_TOPOLOGY: ZONE, KUEUE_PREFERRED_TOPOLOGY: RACK})[0]
    assert both.group_error is not None and "set only one" in both.group_error
    bad = gang(1, 1, **{KUEUE_REQUIRED_TOPOLOGY: "a b"})[0]
    assert bad.group_error == f"annotation {KUEUE_REQUIRED_TOPOLOGY}='a b' is not a node label key"
    # A pod outside any gang is not refused for an annotation only gangs use.
    plain = PodInfo.from_api(make_pod("p").annotation(KUEUE_REQUIRED_TOPOLOGY, "a b").obj())
    assert plain.group_error is None


def test_kueue_required_annotation_keeps_the_gang_in_one_zone() -> None:
    nodes, free = cluster(*zones(a=(2,), b=(2,)))
    members = gang(3, 1, **{KUEUE_REQUIRED_TOPOLOGY: ZONE})
    outcome = plan_gang(members, free, nodes, Policy())
    assert isinstance(outcome, Shortfall) and f"no single {ZONE} domain" in outcome.message


def test_a_podgroup_topology_reaches_the_planner_through_the_core() -> None:
    core = make_core()
    # Fewest nodes alone would take b2 and a1 (two zones).
    for info in zones(a=(1,), b=(1, 1)):
        core.apply_node(info)
    core.apply_group_spec(GroupSpec.from_podgroup(podgroup({"required": ZONE}), source="PodGroup"))
    members = [PodInfo.from_api(make_pod(f"m{i}").group("g").gpus(1).obj()) for i in range(2)]
    for pod in members:
        core.observe_pod(pod, 0.0)
    decision = core.filter(members[0], list(core.snapshot.nodes), 1.0)
    assert decision.verdict is Verdict.PLANNED
    plan = core.ledger.plans[members[0].group]  # type: ignore[index]
    assert set(plan.placements.values()) == {"b1", "b2"}


def test_a_podgroup_topology_wins_over_kueue_annotations() -> None:
    nodes, free = cluster(*zones(a=(2,), b=(2,)))
    members = gang(3, 1, **{KUEUE_REQUIRED_TOPOLOGY: ZONE})
    outcome = plan_gang(members, free, nodes, Policy(), topology=GroupTopology(preferred=(ZONE,)))
    assert len(nodes_used(outcome)) == 2


def test_members_disagreeing_on_kueue_topology_wait_with_a_message_naming_each_topology() -> None:
    nodes, free = cluster(*zones(a=(4,)))
    members = gang(1, 1, **{KUEUE_REQUIRED_TOPOLOGY: ZONE}) + [
        PodInfo.from_api(
            make_pod("other").group("g").gpus(1).annotation(KUEUE_PREFERRED_TOPOLOGY, RACK).obj()
        )
    ]
    outcome = plan_gang(members, free, nodes, Policy())
    assert isinstance(outcome, Shortfall)
    assert outcome.message == (
        "members disagree on their Kueue topology annotations "
        f"(m0: required {ZONE}, other: preferred {RACK}); give every member the same"
    )
    assert (outcome.placeable, outcome.total) == (0, 2)


def test_a_policy_preferred_topology_is_a_preference_and_required_a_requirement() -> None:
    nodes, free = cluster(*zones(a=(2,), b=(2, 2)))
    preferred = Policy(name="zone", topology=Topology(key=ZONE))
    # Zone b holds the 4 members; fewest nodes alone would be two nodes anywhere.
    assert nodes_used(plan_gang(gang(4, 1), free, nodes, preferred)) == {"b1", "b2"}
    assert len(nodes_used(plan_gang(gang(5, 1), free, nodes, preferred))) == 3


def test_spread_with_a_required_zone_takes_the_emptiest_zone() -> None:
    nodes, free = cluster(*zones(a=(2,), b=(4, 4)))
    spread = Policy(name="spread", strategy=Strategy.SPREAD)
    outcome = plan_gang(gang(2, 1), free, nodes, spread, topology=GroupTopology(required=ZONE))
    assert nodes_used(outcome) == {"b1", "b2"}


def test_binpack_with_a_required_zone_takes_the_tightest_zone() -> None:
    nodes, free = cluster(*zones(a=(2,), b=(4, 4)))
    outcome = plan_gang(gang(2, 1), free, nodes, Policy(), topology=GroupTopology(required=ZONE))
    assert nodes_used(outcome) == {"a1"}


def test_a_member_keeps_its_planned_node_from_before_a_restart() -> None:
    nodes, free = cluster(gpu_node("two", 2), gpu_node("four", 4))
    members = gang(3, 1)
    members[0].planned_node = "two"
    outcome = plan_gang(members, free, nodes, Policy())
    assert isinstance(outcome, Placement)
    assert outcome.nodes[members[0].uid] == "two"


def test_a_shortfall_counts_the_members_it_could_place() -> None:
    nodes, free = cluster(gpu_node("a", 2), gpu_node("b", 1))
    outcome = plan_gang(gang(4, 1), free, nodes, Policy())
    assert isinstance(outcome, Shortfall)
    assert (outcome.placeable, outcome.total) == (3, 4)
    assert outcome.message.startswith("3/4 members placeable")


@pytest.mark.parametrize(
    ("key", "ok"),
    [
        ("rack", True),
        ("topology.kubernetes.io/zone", True),
        ("a" * 63, True),
        ("a" * 64, False),
        ("example.com/" + "a" * 63, True),
        ("Example.com/rack", False),
        ("a" * 254 + "/rack", False),
        (".".join(["a" * 63] * 3 + ["a" * 61]) + "/rack", True),  # a 253-character prefix
        (".".join(["a" * 63] * 3 + ["a" * 62]) + "/rack", False),  # 254
        ("/rack", False),
        ("rack/", False),
        ("ra ck", False),
        ("", False),
        ("_rack", False),
        ("rack.io_", False),
    ],
)
def test_label_keys_are_checked_as_kubernetes_does(key: str, ok: bool) -> None:
    from extender.domain.objects.policy import is_label_key

    assert is_label_key(key) is ok


@pytest.mark.parametrize(
    ("topology", "described"),
    [
        (GroupTopology(required="zone"), "required zone"),
        (GroupTopology(preferred=("block", "rack")), "preferred block, rack"),
        (GroupTopology(required="zone", preferred=("rack",)), "required zone; preferred rack"),
        (GroupTopology(), ""),
    ],
)
def test_a_topology_is_described_as_the_podgroup_states_it(
    topology: GroupTopology, described: str
) -> None:
    assert topology.describe() == described


def test_bound_members_that_already_span_the_required_label_are_named() -> None:
    nodes, free = cluster(gpu_node("a1", 4, zone="a"), gpu_node("bare", 4))
    bound = [
        PodInfo.from_api(make_pod(f"m{i}").group("g").gpus(1).node(n).obj())
        for i, n in enumerate(("a1", "bare"), start=8)
    ]
    outcome = plan_gang(
        gang(1, 1), free, nodes, Policy(), topology=GroupTopology(required=ZONE), bound=bound
    )
    assert isinstance(outcome, Shortfall)
    assert f"bound members already span {ZONE} (none), a;" in outcome.message


def test_a_cpu_only_gang_that_no_required_domain_holds_says_what_it_needs() -> None:
    nodes, free = cluster(gpu_node("c", 0))
    members = [PodInfo.from_api(make_pod(f"m{i}").group("g").cpu("1").obj()) for i in range(2)]
    outcome = plan_gang(members, free, nodes, Policy(), topology=GroupTopology(required=ZONE))
    assert isinstance(outcome, Shortfall)
    assert outcome.message == (
        f"no single {ZONE} domain fits all 2 members (needs cpu/memory for every member; "
        f"most free {GPU} in one {ZONE} domain: 0)"
    )


def test_when_no_rack_holds_the_gang_it_takes_the_fewest_racks() -> None:
    # Fewest nodes over all racks takes b's 4, a's 3 and c's 2 (three racks);
    # a's two nodes plus c hold all eight in two racks.
    nodes, free = cluster(*racks(a=(3, 3), b=(4,), c=(2,)))
    outcome = plan_gang(
        gang(8, 1), free, nodes, Policy(), topology=GroupTopology(preferred=(RACK,))
    )
    assert {nodes[n].labels[RACK] for n in nodes_used(outcome)} == {"a", "c"}


def test_fewest_racks_by_capacity_gives_way_to_a_placement_as_good_on_fewer_nodes() -> None:
    # By capacity: a (2+2) then b (3): two racks, three nodes. Over all racks the
    # gang fits b's and c's 3-GPU nodes: two racks, two nodes.
    nodes, free = cluster(*racks(a=(2, 2), b=(3,), c=(3,)))
    outcome = plan_gang(
        gang(6, 1), free, nodes, Policy(), topology=GroupTopology(preferred=(RACK,))
    )
    assert nodes_used(outcome) == {"b1", "c1"}


def test_cover_takes_the_largest_domains_then_the_tightest_that_holds_the_rest() -> None:
    from extender.domain.planning.planner import _cover

    free = {"a": {GPU: 5}, "b": {GPU: 4}, "c": {GPU: 2}, "d": {GPU: 3}, "e": {GPU: 1}}
    domains = {name: [name] for name in free}
    assert _cover(domains, free, 7, GPU) == ["a", "c"]
    assert _cover(domains, free, 9, GPU) == ["a", "b"]
    assert _cover(domains, free, 10, GPU) == ["a", "b", "e"]
    assert _cover(domains, free, 3, GPU) == ["d"]
    assert _cover(domains, free, 16, GPU) is None
    assert _cover(domains, free, 15, GPU) == ["a", "b", "d", "c", "e"]


def test_a_member_only_one_node_takes_is_not_crowded_out_of_it() -> None:
    # Fewest nodes would open the largest node (b, last by name) for m0 and leave m1,
    # which may only use b, nowhere; best-fit decreasing places both.
    nodes, free = cluster(gpu_node("a", 4), gpu_node("b", 4, pool="only"))
    restricted = make_pod("m1").group("g").gpus(4).obj()
    restricted["spec"]["nodeSelector"] = {"pool": "only"}
    members = [*gang(1, 4), PodInfo.from_api(restricted)]
    outcome = plan_gang(members, free, nodes, Policy())
    assert isinstance(outcome, Placement)
    assert outcome.nodes == {members[0].uid: "a", members[1].uid: "b"}


def test_cover_counts_a_node_without_gpus_as_none() -> None:
    from extender.domain.planning.planner import _cover

    free = {"a": {GPU: 2}, "cpu": {"cpu": 8000}, "b": {GPU: 1}}
    domains = {"x": ["a", "cpu"], "y": ["b"]}
    assert _cover(domains, free, 3, GPU) == ["x", "y"]
    assert _cover(domains, free, 2, GPU) == ["x"]
    assert _cover(domains, free, 4, GPU) is None


def test_a_member_restricted_by_kube_scheduler_goes_where_it_may() -> None:
    from extender.domain.planning.planner import NodeRestriction

    nodes, free = cluster(gpu_node("two", 2), gpu_node("four", 4))
    members = gang(3, 1)
    allowed = {members[0].uid: NodeRestriction(allowed=frozenset({"two"}))}
    outcome = plan_gang(members, free, nodes, Policy(), allowed=allowed)
    assert isinstance(outcome, Placement)
    assert outcome.nodes[members[0].uid] == "two"


def test_a_planned_node_is_kept_only_when_the_member_fits_and_may_use_it() -> None:
    from extender.domain.planning.planner import NodeRestriction

    nodes, free = cluster(gpu_node("two", 2), gpu_node("four", 4))
    members = gang(2, 1)
    members[0].planned_node = "two"
    denied = {members[0].uid: NodeRestriction(denied=frozenset({"two"}))}
    assert nodes_used(plan_gang(members, free, nodes, Policy(), allowed=denied)) == {"four"}
    free["two"][GPU] = 0
    assert nodes_used(plan_gang(members, free, nodes, Policy())) == {"four"}
    members[1].planned_node = "gone"
    assert nodes_used(plan_gang(members, free, nodes, Policy())) == {"four"}


def test_a_later_member_takes_the_tighter_of_the_nodes_its_gang_uses() -> None:
    # 2 + 2 open b (3, last by name) and a (3); the 1-GPU members then fit either.
    nodes, free = cluster(gpu_node("a", 3), gpu_node("b", 3))
    members = [
        PodInfo.from_api(make_pod(f"m{i}").group("g").gpus(g).obj())
        for i, g in enumerate((2, 2, 1))
    ]
    free["a"]["cpu"] = 1000
    outcome = plan_gang(members, free, nodes, Policy())
    assert isinstance(outcome, Placement)
    assert outcome.nodes == {members[0].uid: "b", members[1].uid: "a", members[2].uid: "a"}


def test_a_cpu_only_gang_opens_the_node_with_fewest_gpus_that_fits() -> None:
    nodes, free = cluster(
        NodeInfo.from_api(make_node("small").cpu_only().cpu("2").obj()),
        NodeInfo.from_api(make_node("big").cpu_only().cpu("8").obj()),
        gpu_node("gpu", 4),
    )
    members = [PodInfo.from_api(make_pod(f"m{i}").group("g").cpu("4").obj()) for i in range(2)]
    assert nodes_used(plan_gang(members, free, nodes, Policy())) == {"big"}


def test_equal_nodes_are_taken_in_name_order() -> None:
    nodes, free = cluster(gpu_node("b", 4), gpu_node("a", 4))
    assert nodes_used(plan_gang(gang(2, 1), free, nodes, Policy())) == {"a"}


def test_a_bound_member_on_a_node_that_is_gone_is_ignored() -> None:
    nodes, free = cluster(*zones(a=(4,)))
    bound = PodInfo.from_api(make_pod("m9").group("g").gpus(1).node("gone").obj())
    outcome = plan_gang(
        gang(2, 1), free, nodes, Policy(), topology=GroupTopology(required=ZONE), bound=[bound]
    )
    assert nodes_used(outcome) == {"a1"}


def test_racks_are_minimised_inside_the_only_zone() -> None:
    nodes, free = cluster(*racks(zone="a", p=(2,), q=(2,), r=(3, 3)))
    topology = GroupTopology(preferred=(ZONE, RACK))
    outcome = plan_gang(gang(4, 1), free, nodes, Policy(), topology=topology)
    assert {nodes[n].labels[RACK] for n in nodes_used(outcome)} == {"r"}
