"""Starvation reservations of gangs shaped as jobs are: a CPU-only launcher beside GPU
workers, more members than minMember, a cluster with CPU-only nodes, and a gang
whose members cannot be split across the nodes that have the GPUs (pure).

What the reservation holds is the GPUs of the members it will plan, on the nodes
that can hold them, preferring the nodes with the most free now.
"""

from __future__ import annotations

from extender.domain.gang.gang import GangCore
from extender.domain.objects.membership import GroupKey
from extender.domain.objects.model import STARVATION_ANNOTATION, GroupSpec, PodInfo
from tests.builders import make_node, make_pod, make_podgroup
from tests.unit.test_reservations import T0, add_gang, bound_small, core_with

JOB = GroupKey("default", "job")


def cluster() -> GangCore:
    """n1: 4 GPUs, all taken; n2: 4 GPUs, 1 free; cpu0: no GPUs at all."""
    core = core_with(
        [
            make_node("n1").gpus(4).obj(),
            make_node("n2").gpus(4).obj(),
            make_node("cpu0").cpu_only().obj(),
        ]
    )
    for i in range(4):
        bound_small(core, f"a{i}", "n1")
    for i in range(3):
        bound_small(core, f"b{i}", "n2")
    return core


def launcher_and_workers(core: GangCore, workers: int, min_member: int) -> list[PodInfo]:
    pods = [
        make_pod("job-launcher").group("job").min_available(min_member).cpu("500m").obj(),
        *(
            make_pod(f"job-worker-{i}").group("job").min_available(min_member).gpus(1).obj()
            for i in range(workers)
        ),
    ]
    infos = [PodInfo.from_api(p) for p in pods]
    for info in infos:
        core.observe_pod(info, T0)
    return infos


def starve(core: GangCore, asking: PodInfo) -> None:
    assert core.filter(asking, sorted(core.snapshot.nodes), T0).nodes == []
    core.expire(T0 + 6)  # past starvationSeconds (5 s)


def test_a_gang_with_a_cpu_only_launcher_reserves_its_workers_gpus_where_most_are_free() -> None:
    core = cluster()
    members = launcher_and_workers(core, workers=4, min_member=5)
    starve(core, members[1])
    reservation = core.starvation.reservations[JOB]
    assert (reservation.nodes, reservation.need) == (("n2",), 4)
    assert core.groups[JOB].message == (
        "gang default/job: reserving n2: 1/4 GPUs free; it has waited longer than its "
        "starvationSeconds (5 s), so nothing else of this scheduler takes a GPU that frees "
        "there until it fits; the nodes are not fenced: a pending member lacks the "
        "gang-extender.io/reserved toleration (the webhook adds it in labelled namespaces)"
    )


def test_a_gang_with_more_members_than_min_member_reserves_for_the_fewest() -> None:
    core = cluster()
    members = launcher_and_workers(core, workers=5, min_member=5)  # launcher + 4 of 5
    starve(core, members[1])
    assert core.starvation.reservations[JOB].need == 4


def test_among_full_nodes_the_one_with_a_free_gpu_is_reserved() -> None:
    core = cluster()
    members = launcher_and_workers(core, workers=4, min_member=5)
    starve(core, members[1])
    assert core.starvation.reservations[JOB].nodes == ("n2",)  # n1 holds as much, none free now


def test_a_member_no_node_can_hold_whole_reserves_nothing() -> None:
    # One 4-GPU member, two 2-GPU nodes: 4 GPUs in all, but never on one node.
    core = core_with([make_node("n1").gpus(2).obj(), make_node("n2").gpus(2).obj()])
    bound_small(core, "a0", "n1")
    (member,) = add_gang(core, "job", 1, 4)
    starve(core, member)
    assert JOB not in core.starvation.reservations


def test_a_gangs_own_starvation_seconds_wins_over_the_cluster_default() -> None:
    core = cluster()
    spec = {"starvationSeconds": 30}
    members = add_gang(core, "job", 4, 1, spec=spec)
    starve(core, members[0])  # 6 s: past the default 5 s, not the gang's 30 s
    assert JOB not in core.starvation.reservations
    core.expire(T0 + 31)
    assert core.starvation.reservations[JOB].nodes == ("n2",)
    assert "starvationSeconds (30 s)" in core.groups[JOB].message


def test_a_gang_with_task_minimums_reserves_for_the_members_its_tasks_need() -> None:
    # minMember 3 = launcher 1 + worker 2; three workers were created before the
    # launcher. The fewest members that meet the tasks are the launcher and two
    # workers: 2 GPUs, not the 3 of the oldest three.
    core = cluster()
    spec = {"minTaskMember": {"launcher": 1, "worker": 2}}
    workers = [
        make_pod(f"job-w{i}").group("job").task("worker").gpus(1).created(f"2026-01-01T00:00:0{i}Z")
        for i in range(3)
    ]
    launcher = (
        make_pod("job-l").group("job").task("launcher").cpu("1").created("2026-01-01T00:00:09Z")
    )
    core.apply_group_spec(
        GroupSpec.from_podgroup(make_podgroup("job", 3, **spec), source="PodGroup")
    )
    infos = [PodInfo.from_api(b.obj()) for b in (*workers, launcher)]
    for info in infos:
        core.observe_pod(info, T0)
    starve(core, infos[0])
    assert core.starvation.reservations[JOB].need == 2


def test_starvation_seconds_from_the_members_annotation_is_the_one_shown() -> None:
    core = cluster()
    pods = [
        make_pod(f"job-{i}")
        .group("job")
        .min_available(4)
        .gpus(1)
        .annotation(STARVATION_ANNOTATION, "3")
        for i in range(4)
    ]
    infos = [PodInfo.from_api(p.obj()) for p in pods]
    for info in infos:
        core.observe_pod(info, T0)
    starve(core, infos[0])
    assert "starvationSeconds (3 s)" in core.groups[JOB].message


def test_nodes_whose_gpus_add_up_but_cannot_hold_the_members_are_not_reserved() -> None:
    # Three 2-GPU members, two 3-GPU nodes: 6 GPUs in all, but each node holds one
    # member, so no reservation of both would ever fit the gang.
    core = core_with([make_node("a").gpus(3).obj(), make_node("b").gpus(3).obj()])
    for node in ("a", "b"):
        for i in range(3):
            bound_small(core, f"{node}{i}", node)
    members = add_gang(core, "job", 3, 2)
    starve(core, members[0])
    assert JOB not in core.starvation.reservations
