"""Which topology domain a gang lands in, and what a gang that fits no domain is told.

Contracts of `plan_gang` with a topology (issue 13 item 4): the tightest domain that
holds the gang, the fewest nodes inside it, nodes without GPUs counting for nothing,
a required domain honouring the preferred labels below it, and a shortfall message
that gives the real numbers.
"""

from __future__ import annotations

from extender.domain.model import NodeInfo, PodInfo
from extender.domain.planner import Placement, Shortfall, plan_gang
from extender.domain.policy import GroupTopology, Policy
from tests.builders import make_node, make_pod

GPU = "nvidia.com/gpu"
ZONE = "topology.kubernetes.io/zone"
RACK = "example.com/rack"


def node(name: str, gpus: int, **labels: str) -> NodeInfo:
    builder = make_node(name).gpus(gpus) if gpus else make_node(name).cpu_only()
    for key, value in labels.items():
        builder = builder.label({"zone": ZONE, "rack": RACK}[key], value)
    return NodeInfo.from_api(builder.obj())


def cluster(*nodes: NodeInfo) -> tuple[dict[str, NodeInfo], dict[str, dict[str, int]]]:
    return {n.name: n for n in nodes}, {n.name: dict(n.allocatable) for n in nodes}


def gang(count: int, gpus: int) -> list[PodInfo]:
    return [PodInfo.from_api(make_pod(f"m{i}").group("g").gpus(gpus).obj()) for i in range(count)]


def nodes_used(outcome: Placement | Shortfall) -> set[str]:
    assert isinstance(outcome, Placement), outcome
    return set(outcome.nodes.values())


PREFER_RACK = GroupTopology(preferred=(RACK,))


def test_the_tightest_rack_that_holds_the_gang_is_chosen_and_the_bigger_one_stays_whole() -> None:
    # Rack "a" sorts first by name but has twice the room: the gang goes to rack "b".
    nodes, free = cluster(node("a1", 8, rack="a"), node("b1", 4, rack="b"))
    assert nodes_used(plan_gang(gang(4, 1), free, nodes, Policy(), topology=PREFER_RACK)) == {"b1"}


def test_nodes_without_gpus_add_nothing_to_a_racks_gpu_room() -> None:
    # Both racks hold exactly 4 GPUs; rack "a" also has a cpu-only node, which must
    # not make it look roomier (the tie goes to the first rack by name, "a").
    nodes, free = cluster(
        node("a-cpu", 0, rack="a"), node("a1", 4, rack="a"), node("b1", 4, rack="b")
    )
    assert nodes_used(plan_gang(gang(4, 1), free, nodes, Policy(), topology=PREFER_RACK)) == {"a1"}


def test_a_roomier_rack_wins_when_it_holds_the_gang_on_fewer_nodes() -> None:
    # Rack "a" is the tightest (4 GPUs) but needs two nodes; rack "b" holds the gang on
    # one node, which is the best any rack can do: the gang goes there.
    nodes, free = cluster(
        node("a1", 2, rack="a"),
        node("a2", 2, rack="a"),
        node("b1", 4, rack="b"),
        node("b2", 1, rack="b"),
    )
    assert nodes_used(plan_gang(gang(2, 2), free, nodes, Policy(), topology=PREFER_RACK)) == {"b1"}


def test_inside_a_required_zone_the_gang_still_uses_one_rack_when_one_fits() -> None:
    # Fewest nodes alone would take the 4-GPU node of rack r2 plus a 2-GPU node of
    # another rack; rack r1 alone holds all 6 GPUs, so the preferred label wins.
    nodes, free = cluster(
        node("r1-a", 2, zone="z", rack="r1"),
        node("r1-b", 2, zone="z", rack="r1"),
        node("r1-c", 2, zone="z", rack="r1"),
        node("r2-a", 4, zone="z", rack="r2"),
        node("r3-a", 2, zone="z", rack="r3"),
    )
    topology = GroupTopology(required=ZONE, preferred=(RACK,))
    outcome = plan_gang(gang(3, 2), free, nodes, Policy(), topology=topology)
    assert nodes_used(outcome) == {"r1-a", "r1-b", "r1-c"}


def test_a_gang_no_required_zone_holds_is_told_the_most_any_one_zone_has() -> None:
    nodes, free = cluster(
        node("a1", 4, zone="a"),
        node("a-cpu", 0, zone="a"),
        node("b1", 3, zone="b"),
        node("b2", 1, zone="b"),
    )
    outcome = plan_gang(gang(3, 2), free, nodes, Policy(), topology=GroupTopology(required=ZONE))
    assert outcome == Shortfall(
        0,
        3,
        f"no single {ZONE} domain fits all 3 members "
        f"(needs 6 {GPU} in all; most free {GPU} in one {ZONE} domain: 4)",
    )


def test_among_racks_equally_good_the_tightest_is_chosen() -> None:
    # No usable node holds the gang alone (c1 is tainted), so every rack needs two
    # nodes: a tie, which goes to the tightest rack, "a", not to the roomier "b".
    nodes, free = cluster(
        node("a1", 2, rack="a"),
        node("a2", 2, rack="a"),
        node("b1", 2, rack="b"),
        node("b2", 3, rack="b"),
        NodeInfo.from_api(make_node("c1").gpus(4).label(RACK, "c").taint("k", "v").obj()),
    )
    assert nodes_used(plan_gang(gang(2, 2), free, nodes, Policy(), topology=PREFER_RACK)) == {
        "a1",
        "a2",
    }


def test_the_fourth_tightest_rack_is_compared_when_it_is_the_only_one_on_a_single_node() -> None:
    nodes, free = cluster(
        node("a1", 2, rack="a"),
        node("a2", 2, rack="a"),
        node("b1", 2, rack="b"),
        node("b2", 2, rack="b"),
        node("b3", 1, rack="b"),
        node("c1", 2, rack="c"),
        node("c2", 2, rack="c"),
        node("c3", 2, rack="c"),
        node("d1", 4, rack="d"),
        node("d2", 3, rack="d"),
    )
    assert nodes_used(plan_gang(gang(2, 2), free, nodes, Policy(), topology=PREFER_RACK)) == {"d1"}


def test_only_the_four_tightest_racks_are_compared_so_planning_work_stays_bounded() -> None:
    # Racks a-d each need two nodes; rack e would need one, but it is the fifth
    # tightest: the planner stops at four (COMPARED_DOMAINS) and keeps the best of them.
    racks = [("a", 4), ("b", 5), ("c", 6), ("d", 7)]
    spread = [node(f"{r}{i}", 2, rack=r) for r, _ in racks for i in range(2)]
    extra = [node(f"{r}x", room - 4, rack=r) for r, room in racks if room > 4]
    nodes, free = cluster(*spread, *extra, node("e1", 4, rack="e"), node("e2", 4, rack="e"))
    assert nodes_used(plan_gang(gang(2, 2), free, nodes, Policy(), topology=PREFER_RACK)) == {
        "a0",
        "a1",
    }


def test_nodes_without_the_preferred_label_are_each_a_domain_of_their_own() -> None:
    # Rack "a" holds the gang; the two unlabelled nodes hold it too, but they are two
    # domains, not one "no rack" rack, so the gang goes to rack "a".
    nodes, free = cluster(
        node("u1", 2), node("u2", 2), node("a1", 2, rack="a"), node("a2", 2, rack="a")
    )
    assert nodes_used(plan_gang(gang(4, 1), free, nodes, Policy(), topology=PREFER_RACK)) == {
        "a1",
        "a2",
    }


def test_a_zone_whose_nodes_lack_a_rack_label_spans_as_many_racks_as_nodes() -> None:
    # Preferred zone then rack. Zone "A" sorts first and holds the gang on two nodes
    # without a rack label: two racks. Zone "B" holds it on two nodes of one rack.
    nodes, free = cluster(
        node("a1", 2, zone="A"),
        node("a2", 2, zone="A"),
        node("b1", 2, zone="B", rack="r"),
        node("b2", 2, zone="B", rack="r"),
    )
    topology = GroupTopology(preferred=(ZONE, RACK))
    assert nodes_used(plan_gang(gang(4, 1), free, nodes, Policy(), topology=topology)) == {
        "b1",
        "b2",
    }
