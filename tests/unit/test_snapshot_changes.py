"""The cluster snapshot's bookkeeping of changes: a re-list (`replace_all`) rebuilds
everything and voids every memo, a PodGroup written or deleted moves its group's
version and the planning generation, and free GPUs are allocatable less what bound
pods hold."""

from __future__ import annotations

import pytest

from extender.domain.cluster.fences import FENCE_TAINT_KEY
from extender.domain.cluster.snapshot import ClusterSnapshot
from extender.domain.objects.membership import GroupKey
from extender.domain.objects.model import GroupSpec, NodeInfo, PodInfo
from extender.domain.state.decisions import PlaceholderCreate
from tests.builders import make_node, make_pod, make_podgroup, placeholder_pod_info

G = GroupKey("default", "g")


def node(name: str, gpus: int = 4) -> NodeInfo:
    return NodeInfo.from_api(make_node(name).gpus(gpus).obj())


def spec(min_member: int = 2) -> GroupSpec:
    return GroupSpec.from_podgroup(make_podgroup("g", min_member), source="PodGroup")


def filled() -> ClusterSnapshot:
    snapshot = ClusterSnapshot()
    snapshot.upsert_node(node("old"))
    snapshot.upsert_node(
        NodeInfo.from_api(make_node("fenced").gpus(4).taint(FENCE_TAINT_KEY, "x.y").obj())
    )
    snapshot.upsert_pod(PodInfo.from_api(make_pod("p").gpus(2).node("old").priority(7).obj()))
    snapshot.upsert_pod(PodInfo.from_api(make_pod("m").group("g").gpus(1).obj()))
    snapshot.upsert_pod(placeholder_pod_info(PlaceholderCreate(G, "g-hold-old-1", "old", 1)))
    snapshot.upsert_podgroup(spec())
    return snapshot


def test_a_relist_replaces_everything_and_voids_every_memo() -> None:
    snapshot = filled()
    version, generations = (
        snapshot.group_version(G),
        (
            snapshot.planning_generation,
            snapshot.nodes_generation,
        ),
    )
    snapshot.capacity_changed.clear()
    snapshot.replaced = False
    member = PodInfo.from_api(make_pod("m2").group("g").gpus(1).obj())
    bound = PodInfo.from_api(make_pod("q").gpus(1).node("new").priority(3).obj())
    snapshot.replace_all([node("new", 8)], [member, bound], [spec(3)])
    assert set(snapshot.nodes) == {"new"}
    assert set(p.name for p in snapshot.pods.values()) == {"m2", "q"}
    assert [p.name for p in snapshot.members(G)] == ["m2"]
    assert snapshot.group_spec(G) is not None and snapshot.group_spec(G).min_member == 3  # type: ignore[union-attr]
    assert snapshot.placeholders == {} and snapshot.fences == {}
    assert snapshot.free_gpus("new") == 7
    assert snapshot.free("old") == {}
    assert snapshot.lowest_holding_priority() == 3  # the old pod's 7 is gone, not kept
    # Every memo keyed on these is void: the old nodes changed, every group moved.
    assert {"old", "fenced", "new"} <= snapshot.capacity_changed
    assert snapshot.replaced
    assert snapshot.group_version(G) > version
    assert snapshot.planning_generation > generations[0]
    assert snapshot.nodes_generation > generations[1]


def test_a_relist_keeps_fences_and_placeholders_it_lists() -> None:
    snapshot = filled()
    fenced = NodeInfo.from_api(make_node("fenced").gpus(4).taint(FENCE_TAINT_KEY, "a.b").obj())
    placeholder = placeholder_pod_info(PlaceholderCreate(G, "g-hold-fenced-1", "fenced", 1))
    snapshot.replace_all([fenced], [placeholder], [])
    assert snapshot.fences == {"fenced": "a.b"}
    assert [p.name for p in snapshot.placeholders.values()] == ["g-hold-fenced-1"]
    assert snapshot.placeholder_gpus(G, "fenced") == 1


def test_a_podgroup_written_or_deleted_moves_its_group_and_the_planning_generation() -> None:
    snapshot = ClusterSnapshot()
    assert snapshot.upsert_podgroup(spec())
    version, planning, generation = (
        snapshot.group_version(G),
        snapshot.planning_generation,
        snapshot.generation,
    )
    snapshot.groups_changed.clear()
    assert not snapshot.upsert_podgroup(spec())  # the same spec: nothing moves
    assert (snapshot.group_version(G), snapshot.planning_generation, snapshot.generation) == (
        version,
        planning,
        generation,
    )
    assert snapshot.groups_changed == set()
    snapshot.delete_podgroup("PodGroup", G)
    assert snapshot.podgroup(G) is None
    assert snapshot.group_version(G) == version + 1
    assert snapshot.planning_generation == planning + 1
    assert snapshot.generation == generation + 1
    assert snapshot.groups_changed == {G}
    snapshot.groups_changed.clear()
    snapshot.delete_podgroup("PodGroup", G)  # gone already: nothing moves
    snapshot.delete_podgroup("Volcano", G)
    assert snapshot.group_version(G) == version + 1 and snapshot.groups_changed == set()
    assert snapshot.planning_generation == planning + 1


def test_free_gpus_are_allocatable_less_what_bound_pods_hold() -> None:
    snapshot = ClusterSnapshot()
    snapshot.upsert_node(node("n1", 8))
    snapshot.upsert_node(NodeInfo.from_api(make_node("cpu").cpu_only().obj()))
    snapshot.upsert_pod(PodInfo.from_api(make_pod("p").gpus(3).node("n1").obj()))
    assert snapshot.free_gpus("n1") == 5
    assert snapshot.free_gpus("cpu") == 0
    assert snapshot.free_gpus("missing") == 0


def test_each_change_moves_its_counters_by_exactly_one_so_no_value_comes_back() -> None:
    # Memos compare these counters for equality: a counter that went back (or jumped
    # onto a value seen before) would make a stale memo look current.
    snapshot = filled()
    planning, nodes, version = (
        snapshot.planning_generation,
        snapshot.nodes_generation,
        snapshot.group_version(G),
    )
    snapshot.replace_all([], [], [])
    assert snapshot.planning_generation == planning + 1
    assert snapshot.nodes_generation == nodes + 1
    assert snapshot.group_version(G) == version + 1
    generation, planning = snapshot.generation, snapshot.planning_generation
    assert snapshot.upsert_podgroup(spec(4))
    assert (snapshot.generation, snapshot.planning_generation) == (generation + 1, planning + 1)


def test_a_deleted_node_moves_every_node_counter_by_exactly_one() -> None:
    snapshot = filled()
    before = (snapshot.generation, snapshot.planning_generation, snapshot.nodes_generation)
    snapshot.delete_node("old")
    after = (snapshot.generation, snapshot.planning_generation, snapshot.nodes_generation)
    assert after == tuple(value + 1 for value in before)
    assert "old" in snapshot.capacity_changed
    snapshot.delete_node("old")  # already gone: nothing moves
    assert (snapshot.generation, snapshot.planning_generation, snapshot.nodes_generation) == after


def test_a_deleted_pod_moves_the_counters_by_exactly_one_and_an_unknown_one_nothing() -> None:
    snapshot = filled()
    bound = next(p for p in snapshot.pods.values() if p.name == "p")
    before = (snapshot.generation, snapshot.planning_generation)
    assert snapshot.delete_pod(bound.uid) == bound
    after = (snapshot.generation, snapshot.planning_generation)
    assert after == (before[0] + 1, before[1] + 1)
    assert snapshot.delete_pod("no-such-uid") is None
    assert (snapshot.generation, snapshot.planning_generation) == after


def test_a_relist_keeps_track_of_members_with_a_task_layout() -> None:
    snapshot = filled()
    laid_out = make_pod("t").group("g").annotation("gang-extender.io/tasks", "worker=2").obj()
    snapshot.replace_all([node("new")], [PodInfo.from_api(laid_out)], [spec()])
    snapshot.upsert_pod(
        PodInfo.from_api(
            make_pod("t2").group("g").annotation("gang-extender.io/tasks", "worker=2").obj()
        )
    )
    assert sorted(p.name for p in snapshot.members(G)) == ["t", "t2"]


def test_the_lowest_priority_holding_capacity_follows_binds_and_deletes() -> None:
    snapshot = ClusterSnapshot()
    snapshot.upsert_node(node("n1", gpus=8))

    def bound(name: str, priority: int, phase: str = "Running") -> PodInfo:
        pod = PodInfo.from_api(
            make_pod(name).gpus(1).node("n1").priority(priority).phase(phase).obj()
        )
        snapshot.upsert_pod(pod)
        return pod

    high, low_a, low_b = bound("high", 7), bound("low-a", 3), bound("low-b", 3)
    done = bound("done", 1, phase="Succeeded")  # ran: holds nothing any more
    assert snapshot.lowest_holding_priority() == 3
    used = snapshot.used("n1")
    snapshot.delete_pod(done.uid)
    assert (snapshot.lowest_holding_priority(), snapshot.used("n1")) == (3, used)
    snapshot.delete_pod(low_a.uid)
    assert snapshot.lowest_holding_priority() == 3  # low-b still holds
    snapshot.delete_pod(low_b.uid)
    assert snapshot.lowest_holding_priority() == 7
    snapshot.delete_pod(high.uid)
    assert snapshot.lowest_holding_priority() is None


def test_a_groups_version_moves_with_its_first_member_too() -> None:
    snapshot = ClusterSnapshot()
    unknown = snapshot.group_version(G)
    snapshot.upsert_pod(PodInfo.from_api(make_pod("m").group("g").gpus(1).obj()))
    assert snapshot.group_version(G) != unknown


def test_members_annotating_the_size_give_the_groups_spec_or_say_they_disagree() -> None:
    snapshot = ClusterSnapshot()
    for name, size in (("a", 2), ("b", 2), ("c", None)):
        built = make_pod(name).group("g").gpus(1)
        snapshot.upsert_pod(PodInfo.from_api((built.min_available(size) if size else built).obj()))
    assert snapshot.group_spec(G) == GroupSpec(key=G, min_member=2, source="annotation")
    snapshot.upsert_pod(PodInfo.from_api(make_pod("d").group("g").min_available(3).obj()))
    assert snapshot.group_spec(G) == GroupSpec(
        key=G,
        min_member=3,
        source="annotation",
        error="members disagree on gang-extender.io/min-available (a=2, b=2, d=3); give "
        "every member the same value",
    )


def rs_member(name: str, replica_set: str, size: int, *, controller: bool = True) -> PodInfo:
    pod = (
        make_pod(name)
        .group("g")
        .min_available(size)
        .owned_by("ReplicaSet", replica_set, controller=controller)
    )
    return PodInfo.from_api(pod.obj())


@pytest.mark.parametrize(
    ("members", "hint"),
    [
        pytest.param(
            [("a", "train-5d8f", 2, True), ("b", "train-7c9b", 3, True)],
            "; they belong to ReplicaSets train-5d8f, train-7c9b of Deployment train: a "
            "rolling update keeps old members beside new ones, so set the Deployment's "
            "strategy to Recreate (spec.strategy.type: Recreate) and the old members go first",
            id="two ReplicaSets of one Deployment: the rolling update named",
        ),
        pytest.param(
            [("a", "train-5d8f", 2, True), ("b", "serve-7c9b", 3, True)],
            "",
            id="ReplicaSets of two Deployments: no hint",
        ),
        pytest.param(
            [("a", "train-5d8f", 2, True), ("b", "train-5d8f", 3, True)],
            "",
            id="one ReplicaSet: no hint",
        ),
        pytest.param(
            [("a", "train-5d8f", 2, False), ("b", "train-7c9b", 3, False)],
            "",
            id="owner references that are not controllers: no hint",
        ),
    ],
)
def test_members_of_a_deployments_rolling_update_that_disagree_are_told_to_recreate(
    members: list[tuple[str, str, int, bool]], hint: str
) -> None:
    snapshot = ClusterSnapshot()
    for name, replica_set, size, controller in members:
        snapshot.upsert_pod(rs_member(name, replica_set, size, controller=controller))
    spec = snapshot.group_spec(G)
    assert spec is not None
    assert spec.error == (
        "members disagree on gang-extender.io/min-available (a=2, b=3); give every "
        f"member the same value{hint}"
    )


def test_a_groups_members_are_its_active_pods_of_this_scheduler() -> None:
    snapshot = ClusterSnapshot()
    snapshot.upsert_pod(PodInfo.from_api(make_pod("live").group("g").obj()))
    snapshot.upsert_pod(PodInfo.from_api(make_pod("done").group("g").phase("Succeeded").obj()))
    elsewhere = make_pod("elsewhere").group("g").obj()
    elsewhere["spec"]["schedulerName"] = "default-scheduler"
    snapshot.upsert_pod(PodInfo.from_api(elsewhere))
    assert [p.name for p in snapshot.members(G)] == ["live"]


def test_a_changed_node_moves_every_node_counter_by_one_and_a_relabel_is_noted() -> None:
    snapshot = filled()

    def counters() -> tuple[int, int, int]:
        return (snapshot.generation, snapshot.planning_generation, snapshot.nodes_generation)

    before = counters()
    snapshot.upsert_node(node("old", gpus=8))  # more GPUs, same labels
    assert counters() == tuple(v + 1 for v in before)
    assert snapshot.relabelled == set()
    relabelled = NodeInfo.from_api(make_node("old").gpus(8).label("rack", "r9").obj())
    snapshot.upsert_node(relabelled)
    assert counters() == tuple(v + 2 for v in before)
    assert snapshot.relabelled == {"old"}
    assert "fenced" in snapshot.fences
    snapshot.upsert_node(node("fenced"))  # its fence taint is gone
    assert "fenced" not in snapshot.fences


def test_a_bound_pod_moves_the_counters_by_one_and_counts_its_priority_once() -> None:
    snapshot = ClusterSnapshot()
    snapshot.upsert_node(node("n1", gpus=8))
    before = (snapshot.generation, snapshot.planning_generation)
    first = PodInfo.from_api(make_pod("a").gpus(1).node("n1").priority(3).obj())
    snapshot.upsert_pod(first)
    assert (snapshot.generation, snapshot.planning_generation) == (before[0] + 1, before[1] + 1)
    second = PodInfo.from_api(make_pod("b").gpus(1).node("n1").priority(3).obj())
    snapshot.upsert_pod(second)
    snapshot.upsert_pod(first)  # the same pod seen again: still counted once
    snapshot.delete_pod(first.uid)
    assert snapshot.lowest_holding_priority() == 3  # b still holds
    snapshot.delete_pod(second.uid)
    assert snapshot.lowest_holding_priority() is None
