"""The planner's free capacity, kept incrementally, is what a fresh computation gives.

`GangCore.free_for_planning` reads the score board's per-node free capacity, updated
only where capacity or reservations changed; the plain form computes every node's
room from the snapshot and the ledger. Same map after any changes, so the same plans.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from extender.domain.gang.gang import GangCore
from extender.domain.objects.membership import GroupKey
from extender.domain.objects.model import PodInfo
from extender.domain.objects.policy import Policy, Strategy
from extender.domain.objects.quantity import GPU
from extender.domain.planning.node_order import NodeOrder
from extender.domain.planning.planner import plan_gang
from extender.domain.starvation.reservations import Reservation
from tests.builders import make_pod
from tests.core_builder import make_core
from tests.strategies import apply_change, snapshot_changes

PROBE = GroupKey("default", "probe")
change_rounds = st.lists(snapshot_changes(max_size=30), min_size=1, max_size=5)
policies = st.sampled_from([Policy(), Policy(name="spread", strategy=Strategy.SPREAD)])
gang_gpu_counts = st.lists(st.integers(min_value=0, max_value=4), min_size=1, max_size=4)


def probe_core(policy: Policy, gang_gpus: list[int]) -> tuple[GangCore, list[PodInfo]]:
    """An empty core and the members of the gang whose plans are compared."""
    core = make_core(policy=policy)
    members = [
        PodInfo.from_api(make_pod(f"probe-{i}").group("probe").gpus(g).obj())
        for i, g in enumerate(gang_gpus)
    ]
    return core, members


def fresh_free(core: GangCore) -> dict[str, dict[str, int]]:
    return {name: core.free_after_reservations(name) for name in core.snapshot.nodes}


def fresh_planning_room(core: GangCore, group: GroupKey) -> dict[str, dict[str, int]]:
    """`fresh_free` less the GPUs a starving gang other than `group` holds (free GPUs
    kept for it on its reserved nodes): what planning `group` may use."""
    room = fresh_free(core)
    for node, (owner, gpus, _) in core.starving_holds().items():
        if owner != group and node in room:
            room[node] = {**room[node], GPU: room[node].get(GPU, 0) - gpus}
    return room


@given(
    change_rounds,
    policies,
    gang_gpu_counts,
)
@settings(max_examples=300, deadline=None)
def test_incremental_free_capacity_equals_a_fresh_one_and_plans_the_same(
    rounds, policy, gang_gpus
) -> None:
    core, members = probe_core(policy, gang_gpus)
    step = 0
    for ops in rounds:
        for op, i, gpus in ops:
            step += 1
            apply_change(core, op, i, gpus, step)
            if op == "bind":  # prioritize in between, as kube-scheduler does
                core.prioritize(members[0], list(core.snapshot.nodes))
        # The board's incremental room is the plain one; planning also takes away what
        # starving gangs hold (the changes can make one starve: a gang waits past its
        # starvation time), which a comparison with the board alone once missed.
        board = core.room.score_board.free_capacity(core.snapshot, core.ledger, core.policy)
        assert board == fresh_free(core)
        kept = core.free_for_planning(PROBE)
        fresh = fresh_planning_room(core, PROBE)
        assert kept == fresh
        assert plan_gang(members, kept, core.snapshot.nodes, policy) == plan_gang(
            members, fresh, core.snapshot.nodes, policy
        )


@given(
    change_rounds,
    policies,
    gang_gpu_counts,
    st.booleans(),
)
@settings(max_examples=300, deadline=None)
def test_the_kept_node_order_is_a_fresh_sort_and_plans_the_same(
    rounds, policy, gang_gpus, starving
) -> None:
    core, members = probe_core(policy, gang_gpus)
    step = 0
    for ops in rounds:
        for op, i, gpus in ops:
            step += 1
            apply_change(core, op, i, gpus, step)
        if starving and core.snapshot.nodes:
            # Another gang holds GPUs on one node: that node's room, and place, differ.
            node = sorted(core.snapshot.nodes)[step % len(core.snapshot.nodes)]
            core.starvation.reservations[GroupKey("default", "starving")] = Reservation(
                group=GroupKey("default", "starving"),
                nodes=(node,),
                need=8,
                started=0.0,
                deadline=1e9,
            )
        free, order = core.room.planning_room(GroupKey("default", "probe"))
        assert order == NodeOrder.of(policy.strategy, free)
        assert plan_gang(members, free, core.snapshot.nodes, policy, order=order) == plan_gang(
            members, free, core.snapshot.nodes, policy
        )
        core.starvation.reservations.clear()


def test_a_node_order_moves_only_the_node_that_changed() -> None:
    order = NodeOrder.of(Strategy.BINPACK, {"a": {GPU: 1}, "b": {GPU: 4}, "c": {GPU: 2}})
    assert order.names == ["a", "c", "b"] and order.gpus == [1, 2, 4]
    order.update("b", {GPU: 0})
    assert order.names == ["b", "a", "c"] and order.gpus == [0, 1, 2]
    order.update("a", None)
    assert order.names == ["b", "c"]
    copy = order.with_rooms([("c", {GPU: 0})])
    assert copy.names == ["b", "c"] and copy.gpus == [0, 0] and order.gpus == [0, 2]
    assert order.with_rooms([]) is order
    order.update("cpu-only", {"cpu": 4000})  # no GPU at all: 0 free, first among equals
    assert order.names == ["b", "cpu-only", "c"] and order.gpus == [0, 0, 2]
    fresh = NodeOrder.of(Strategy.SPREAD, {"x": {"cpu": 1}, "y": {GPU: 3}})
    assert fresh.names == ["y", "x"] and fresh.gpus == [3, 0]


def test_a_node_missing_a_resource_has_none_of_it_in_the_order() -> None:
    no_gpu = NodeOrder.of(Strategy.BINPACK, {"none": {"cpu": 9}, "one": {GPU: 1, "cpu": 0}})
    assert no_gpu.names == ["none", "one"]  # 0 GPUs sorts before 1, whatever the cpu
    no_cpu = NodeOrder.of(Strategy.BINPACK, {"a": {GPU: 2}, "b": {GPU: 2, "cpu": 0}})
    assert no_cpu.names == ["a", "b"]  # equal: by name
