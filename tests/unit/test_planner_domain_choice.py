"""Which topology domain a gang lands in, and what a gang that fits no domain is told.

Contracts of `plan_gang` with a topology (issue 13 item 4): the tightest domain that
holds the gang, the fewest nodes inside it, nodes without GPUs counting for nothing,
a required domain honouring the preferred labels below it, and a shortfall message
that gives the real numbers.
"""

from __future__ import annotations

from extender.domain.objects.model import NodeInfo
from extender.domain.objects.policy import GroupTopology, Policy
from extender.domain.planning.planner import Shortfall, plan_gang
from tests.builders import (
    RACK,
    ZONE,
    cluster,
    gang,
    gpu_node,
    make_node,
    nodes_used,
    racks,
    zones,
)

GPU = "nvidia.com/gpu"

PREFER_RACK = GroupTopology(preferred=(RACK,))


def test_the_tightest_rack_that_holds_the_gang_is_chosen_and_the_bigger_one_stays_whole() -> None:
    # Rack "a" sorts first by name but has twice the room: the gang goes to rack "b".
    nodes, free = cluster(*racks(a=(8,), b=(4,)))
    assert nodes_used(plan_gang(gang(4, 1), free, nodes, Policy(), topology=PREFER_RACK)) == {"b1"}


def test_nodes_without_gpus_add_nothing_to_a_racks_gpu_room() -> None:
    # Both racks hold exactly 4 GPUs; rack "a" also has a cpu-only node, which must
    # not make it look roomier (the tie goes to the first rack by name, "a").
    nodes, free = cluster(*racks(a=(0, 4), b=(4,)))
    assert nodes_used(plan_gang(gang(4, 1), free, nodes, Policy(), topology=PREFER_RACK)) == {"a2"}


def test_a_roomier_rack_wins_when_it_holds_the_gang_on_fewer_nodes() -> None:
    # Rack "a" is the tightest (4 GPUs) but needs two nodes; rack "b" holds the gang on
    # one node, which is the best any rack can do: the gang goes there.
    nodes, free = cluster(*racks(a=(2, 2), b=(4, 1)))
    assert nodes_used(plan_gang(gang(2, 2), free, nodes, Policy(), topology=PREFER_RACK)) == {"b1"}


def test_inside_a_required_zone_the_gang_still_uses_one_rack_when_one_fits() -> None:
    # Fewest nodes alone would take the 4-GPU node of rack b plus a 2-GPU node of
    # another rack; rack a alone holds all 6 GPUs, so the preferred label wins.
    nodes, free = cluster(*racks(zone="z", a=(2, 2, 2), b=(4,), c=(2,)))
    topology = GroupTopology(required=ZONE, preferred=(RACK,))
    outcome = plan_gang(gang(3, 2), free, nodes, Policy(), topology=topology)
    assert nodes_used(outcome) == {"a1", "a2", "a3"}


def test_a_gang_no_required_zone_holds_is_told_the_most_any_one_zone_has() -> None:
    nodes, free = cluster(*zones(a=(4, 0), b=(3, 1)))
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
        *racks(a=(2, 2), b=(2, 3)),
        NodeInfo.from_api(make_node("c1").gpus(4).label(RACK, "c").taint("k", "v").obj()),
    )
    assert nodes_used(plan_gang(gang(2, 2), free, nodes, Policy(), topology=PREFER_RACK)) == {
        "a1",
        "a2",
    }


def test_the_fourth_tightest_rack_is_compared_when_it_is_the_only_one_on_a_single_node() -> None:
    nodes, free = cluster(*racks(a=(2, 2), b=(2, 2, 1), c=(2, 2, 2), d=(4, 3)))
    assert nodes_used(plan_gang(gang(2, 2), free, nodes, Policy(), topology=PREFER_RACK)) == {"d1"}


def test_only_the_four_tightest_racks_are_compared_so_planning_work_stays_bounded() -> None:
    # Racks a-d each need two nodes; rack e would need one, but it is the fifth
    # tightest: the planner stops at four (COMPARED_DOMAINS) and keeps the best of them.
    nodes, free = cluster(*racks(a=(2, 2), b=(2, 2, 1), c=(2, 2, 2), d=(2, 2, 3), e=(4, 4)))
    assert nodes_used(plan_gang(gang(2, 2), free, nodes, Policy(), topology=PREFER_RACK)) == {
        "a1",
        "a2",
    }


def test_nodes_without_the_preferred_label_are_each_a_domain_of_their_own() -> None:
    # Rack "a" holds the gang; the two unlabelled nodes hold it too, but they are two
    # domains, not one "no rack" rack, so the gang goes to rack "a".
    nodes, free = cluster(gpu_node("u1", 2), gpu_node("u2", 2), *racks(a=(2, 2)))
    assert nodes_used(plan_gang(gang(4, 1), free, nodes, Policy(), topology=PREFER_RACK)) == {
        "a1",
        "a2",
    }


def test_a_zone_whose_nodes_lack_a_rack_label_spans_as_many_racks_as_nodes() -> None:
    # Preferred zone then rack. Zone "a" sorts first and holds the gang on two nodes
    # without a rack label: two racks. Zone "b" holds it on two nodes of one rack.
    nodes, free = cluster(*zones(a=(2, 2)), *racks(zone="b", r=(2, 2)))
    topology = GroupTopology(preferred=(ZONE, RACK))
    assert nodes_used(plan_gang(gang(4, 1), free, nodes, Policy(), topology=topology)) == {
        "r1",
        "r2",
    }
