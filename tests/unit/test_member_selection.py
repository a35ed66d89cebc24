"""Which members a plan takes (domain/planning/selection.py) and how the core holds a gang short
of a task: named after the situation, pure (no cluster, no clock)."""

from __future__ import annotations

from typing import Any

import pytest

from extender.domain.cluster.snapshot import ClusterSnapshot
from extender.domain.gang.gang import GangCore
from extender.domain.objects.membership import TASKS_ANNOTATION, GroupKey
from extender.domain.objects.model import GroupSpec, NodeInfo, PodInfo
from extender.domain.planning.selection import (
    MemberSets,
    MembersMissing,
    TaskShortage,
    choose_members,
    tasks_left_out,
)
from extender.domain.state.decisions import Verdict
from extender.domain.status.status import group_status
from tests.builders import make_node, make_pod, make_podgroup
from tests.core_builder import make_core

T0 = 1_000_000.0
JOB = GroupKey("default", "job")
HOROVOD = {"master": 1, "worker": 3}


def member(name: str, second: int, task: str | None = None, **how: Any) -> PodInfo:
    """A member of group `job` created at `second`; `node=` binds it, `gpus=` asks for GPUs."""
    pod = make_pod(name).group("job").created(f"2026-11-22T10:00:{second:02d}Z")
    if task is not None:
        pod = pod.task(task)
    if "gpus" in how:
        pod = pod.gpus(how["gpus"])
    if "node" in how:
        pod = pod.node(how["node"])
    return PodInfo.from_api(pod.obj())


def workers(count: int, *, first_second: int = 0, prefix: str = "w", **how: Any) -> list[PodInfo]:
    return [member(f"{prefix}{i}", first_second + i, "worker", **how) for i in range(count)]


def names_of(pods: tuple[PodInfo, ...]) -> list[str]:
    return [p.name for p in pods]


# --------------------------------------------------------------- choose_members
@pytest.mark.parametrize(
    ("members", "min_member", "minimums", "expected"),
    [
        pytest.param(
            workers(5),
            3,
            None,
            [["w0", "w1", "w2", "w3", "w4"], ["w0", "w1", "w2"]],
            id="no task minimums: every unbound member, then the oldest up to minMember",
        ),
        pytest.param(
            [*workers(5), member("m", 9, "master")],
            4,
            HOROVOD,
            [["w0", "w1", "w2", "w3", "w4", "m"], ["w0", "w1", "w2", "m"]],
            id="a master created after five workers is in the fewest set",
        ),
        pytest.param(
            [
                member("m", 0, "master", node="n1"),
                *workers(2, first_second=1, prefix="bound", node="n1"),
                *workers(3, first_second=10),
            ],
            4,
            HOROVOD,
            [["w0", "w1", "w2"], ["w0"]],
            id="bound members count toward their task: one more worker completes it",
        ),
        pytest.param(
            [*workers(4, prefix="bound", node="n1"), member("late", 20, "worker")],
            4,
            {"worker": 3},
            [["late"]],
            id="a group already at minMember still places one more, in one attempt",
        ),
        pytest.param(
            [*workers(4), member("p0", 7, "ps"), member("p1", 8, "ps")],
            4,
            {"ps": 2, "worker": 2},
            [["w0", "w1", "w2", "w3", "p0", "p1"], ["w0", "w1", "p0", "p1"]],
            id="every task's minimum before the oldest others",
        ),
        pytest.param(
            [*workers(5), member("m", 9, "master"), member("l", 10, "launcher")],
            3,
            {"master": 1},
            [["w0", "w1", "w2", "w3", "w4", "m", "l"], ["w0", "w1", "m"]],
            id="tasks without a minimum fill minMember by age",
        ),
        pytest.param(
            [member("m", 0, "master"), *workers(3, first_second=1)],
            4,
            HOROVOD,
            [["m", "w0", "w1", "w2"]],
            id="exactly the minimums: one attempt",
        ),
    ],
)
def test_the_member_sets_tried_in_order(
    members: list[PodInfo],
    min_member: int,
    minimums: dict[str, int] | None,
    expected: list[list[str]],
) -> None:
    choice = choose_members(members, min_member=min_member, task_minimums=minimums)
    assert isinstance(choice, MemberSets)
    assert [names_of(attempt) for attempt in choice.attempts] == expected


@pytest.mark.parametrize(
    ("members", "min_member", "minimums", "said"),
    [
        pytest.param(
            workers(5),
            4,
            HOROVOD,
            "task master: 0/1 members exist",
            id="five workers and no master",
        ),
        pytest.param(
            workers(3),
            4,
            HOROVOD,
            "3/4 members exist; task master: 0/1 members exist",
            id="short of minMember and of a task: both said",
        ),
        pytest.param(
            [member("m", 0, "master"), *workers(2, first_second=1)],
            3,
            {"master": 1, "worker": 2, "ps": 1},
            "task ps: 0/1 members exist",
            id="a task no member carries counts as 0",
        ),
        pytest.param(
            [member("m", 0, "master"), member("p", 1, "ps"), *workers(2, first_second=2)],
            4,
            {"ps": 2, "master": 1, "worker": 3},
            "task ps: 1/2 members exist; task worker: 2/3 members exist",
            id="every short task, in the order declared",
        ),
        pytest.param(
            [PodInfo.from_api(make_pod(f"u{i}").group("job").obj()) for i in range(3)],
            3,
            {"launcher": 1, "worker": 2},
            "task launcher: 0/1 members exist",
            id="members without a task label are workers",
        ),
    ],
)
def test_a_group_whose_members_cannot_meet_its_size_waits_saying_what_is_short(
    members: list[PodInfo], min_member: int, minimums: dict[str, int], said: str
) -> None:
    choice = choose_members(members, min_member=min_member, task_minimums=minimums)
    assert isinstance(choice, MembersMissing)
    assert str(choice) == said


def test_bound_members_of_a_task_count_as_existing() -> None:
    members = [member("m", 0, "master", node="n1"), *workers(3, first_second=1)]
    choice = choose_members(members, min_member=4, task_minimums=HOROVOD)
    assert isinstance(choice, MemberSets)
    assert [names_of(a) for a in choice.attempts] == [["w0", "w1", "w2"]]


def test_a_task_shortage_reads_as_the_docs_quote_it() -> None:
    assert str(TaskShortage("master", 0, 1)) == "task master: 0/1 members exist"


@pytest.mark.parametrize(
    ("unplaced", "minimums", "said"),
    [
        pytest.param(["m"], HOROVOD, "task master (0/1 placeable)", id="the master left out"),
        pytest.param(
            ["m", "w2"],
            HOROVOD,
            "task master (0/1 placeable), task worker (2/3 placeable)",
            id="two tasks, in the order declared",
        ),
        pytest.param(["w2"], {"master": 1}, "", id="a task without a minimum is not named"),
        pytest.param([], HOROVOD, "", id="nothing left out"),
        pytest.param(["m"], None, "", id="no task minimums"),
    ],
)
def test_which_tasks_lost_members_in_a_failed_placement(
    unplaced: list[str], minimums: dict[str, int] | None, said: str
) -> None:
    chosen = [member("m", 0, "master"), *workers(3, first_second=1)]
    uids = {p.name: p.uid for p in chosen}
    assert tasks_left_out(chosen, [uids[n] for n in unplaced], minimums) == said


# ------------------------------------------------------------------- the spec
@pytest.mark.parametrize(
    ("tasks", "error"),
    [
        pytest.param(
            {"master": 0, "worker": 3},
            "PodGroup spec.minTaskMember[master]=0 must be a whole number >= 1",
            id="a count of 0",
        ),
        pytest.param(
            {"worker": -2},
            "PodGroup spec.minTaskMember[worker]=-2 must be a whole number >= 1",
            id="a negative count",
        ),
        pytest.param(
            {"worker": "3"},
            "PodGroup spec.minTaskMember[worker]='3' must be a whole number >= 1",
            id="a string count",
        ),
        pytest.param(
            {"worker": True},
            "PodGroup spec.minTaskMember[worker]=True must be a whole number >= 1",
            id="a boolean count",
        ),
        pytest.param(
            ["master", "worker"],
            "PodGroup spec.minTaskMember must map task names to counts, got ['master', 'worker']",
            id="a list",
        ),
        pytest.param(
            {"master": 1, "worker": 4},
            "PodGroup spec.minTaskMember (master=1,worker=4) asks for 5 members, more than "
            "spec.minMember=4; raise spec.minMember to 5 or lower the task counts",
            id="more members in all than minMember",
        ),
    ],
)
def test_task_minimums_that_cannot_be_planned_make_the_spec_an_error(
    tasks: Any, error: str
) -> None:
    spec = GroupSpec.from_podgroup(make_podgroup("job", 4, minTaskMember=tasks), source="PodGroup")
    assert spec.error == error
    assert spec.min_task_member is None or spec.error is not None


@pytest.mark.parametrize(
    ("tasks", "expected"),
    [
        pytest.param(HOROVOD, HOROVOD, id="as many as minMember"),
        pytest.param({"master": 1}, {"master": 1}, id="fewer than minMember"),
        pytest.param({}, None, id="empty: none"),
        pytest.param(None, None, id="absent"),
    ],
)
def test_task_minimums_that_fit_minmember_are_kept(
    tasks: dict[str, int] | None, expected: dict[str, int] | None
) -> None:
    spec = GroupSpec.from_podgroup(make_podgroup("job", 4, minTaskMember=tasks), source="PodGroup")
    assert spec.error is None
    assert spec.min_task_member == expected


def test_a_bad_minmember_is_the_error_named_not_the_task_sum() -> None:
    spec = GroupSpec.from_podgroup(
        make_podgroup("job", 0, minTaskMember=HOROVOD), source="PodGroup"
    )
    assert spec.error == "PodGroup spec.minMember=0 must be a whole number >= 1"


def annotated(
    name: str, layout: str | None, *, size: int | None = 4, task: str = "worker"
) -> PodInfo:
    pod = make_pod(name).group("job").task(task)
    if size is not None:
        pod = pod.min_available(size)
    if layout is not None:
        pod = pod.annotation(TASKS_ANNOTATION, layout)
    return PodInfo.from_api(pod.obj())


def snapshot_of(pods: list[PodInfo], podgroup: dict[str, Any] | None = None) -> ClusterSnapshot:
    snapshot = ClusterSnapshot()
    for pod in pods:
        snapshot.upsert_pod(pod)
    if podgroup is not None:
        snapshot.upsert_podgroup(GroupSpec.from_podgroup(podgroup, source="PodGroup"))
    return snapshot


def test_the_members_tasks_annotation_gives_an_annotation_group_its_task_minimums() -> None:
    snapshot = snapshot_of([annotated(f"w{i}", "master=1,worker=3") for i in range(3)])
    spec = snapshot.group_spec(JOB)
    assert spec is not None and spec.error is None
    assert spec.min_member == 4
    assert spec.min_task_member == HOROVOD


def test_a_podgroup_without_task_minimums_takes_the_members_annotation() -> None:
    pods = [annotated("w0", "master=1,worker=3", size=None)]
    spec = snapshot_of(pods, make_podgroup("job", 4)).group_spec(JOB)
    assert spec is not None and spec.error is None
    assert spec.min_task_member == HOROVOD


def test_a_podgroups_own_task_minimums_win_over_the_annotation() -> None:
    pods = [annotated("w0", "worker=4", size=None)]
    spec = snapshot_of(pods, make_podgroup("job", 4, minTaskMember=HOROVOD)).group_spec(JOB)
    assert spec is not None
    assert spec.min_task_member == HOROVOD


@pytest.mark.parametrize(
    ("podgroup", "error"),
    [
        pytest.param(
            None,
            "annotation gang-extender.io/tasks (master=1,worker=4) asks for 5 members, more "
            "than annotation gang-extender.io/min-available=4; raise annotation "
            "gang-extender.io/min-available to 5 or lower the task counts",
            id="against min-available",
        ),
        pytest.param(
            make_podgroup("job", 4),
            "annotation gang-extender.io/tasks (master=1,worker=4) asks for 5 members, more "
            "than PodGroup spec.minMember=4; raise PodGroup spec.minMember to 5 or lower the "
            "task counts",
            id="against the PodGroup's minMember",
        ),
    ],
)
def test_an_annotated_layout_bigger_than_the_group_is_an_error(
    podgroup: dict[str, Any] | None, error: str
) -> None:
    spec = snapshot_of([annotated("w0", "master=1,worker=4")], podgroup).group_spec(JOB)
    assert spec is not None
    assert spec.error == error


def test_the_first_member_by_name_decides_the_layout_and_a_malformed_one_is_passed_over() -> None:
    pods = [
        annotated("c", "master=1,worker=3"),
        annotated("b", "worker=4"),
        annotated("a", "master:1"),  # does not parse: the controller reports it
    ]
    snapshot = snapshot_of(pods)
    assert snapshot.task_layout(JOB) == {"worker": 4}
    snapshot.delete_pod(pods[1].uid)
    assert snapshot.task_layout(JOB) == HOROVOD
    snapshot.delete_pod(pods[0].uid)
    assert snapshot.task_layout(JOB) is None


def test_a_finished_member_no_longer_decides_the_layout() -> None:
    pods = [annotated("a", "worker=4"), annotated("b", "master=1,worker=3")]
    snapshot = snapshot_of(pods)
    finished = PodInfo.from_api(
        make_pod("a")
        .group("job")
        .min_available(4)
        .annotation(TASKS_ANNOTATION, "worker=4")
        .phase("Succeeded")
        .obj()
    )
    snapshot.upsert_pod(finished)
    assert snapshot.task_layout(JOB) == HOROVOD


# ------------------------------------------------------------------- the core
def core_with(
    nodes: list[dict[str, Any]], pods: list[PodInfo], podgroup: dict[str, Any] | None
) -> GangCore:
    return make_core(nodes, pods, [podgroup] if podgroup is not None else [], now=T0)


HOROVOD_GROUP = make_podgroup("job", 4, minTaskMember=HOROVOD)


def test_five_workers_without_their_master_are_held_naming_the_master() -> None:
    core = core_with([make_node("n1").gpus(8).obj()], workers(5, gpus=1), HOROVOD_GROUP)
    decision = core.filter(workers(1, gpus=1)[0], ["n1"], T0)
    assert decision.verdict is Verdict.WAIT
    assert decision.unresolvable["n1"] == (
        "gang default/job: task master: 0/1 members exist; waiting for the rest to be created"
    )
    assert core.ledger.plans == {}
    status = group_status(core, JOB)
    assert status is not None
    assert (status.reason, status.message) == (
        "WaitingForMembers",
        "gang default/job: task master: 0/1 members exist; waiting for the rest to be created",
    )


def test_the_master_arriving_last_is_planned_when_only_four_fit() -> None:
    # Room for four one-GPU members: creation order alone planned four workers, no master.
    core = core_with([make_node("n1").gpus(4).obj()], workers(5, gpus=1), HOROVOD_GROUP)
    assert core.filter(workers(1, gpus=1)[0], ["n1"], T0).verdict is Verdict.WAIT
    master = member("m", 30, "master", gpus=1)
    core.observe_pod(master, T0 + 1)
    decision = core.filter(master, ["n1"], T0 + 1)
    assert decision.verdict is Verdict.PLANNED
    planned = {core.snapshot.pods[uid].name for uid in core.ledger.plans[JOB].placements}
    assert planned == {"m", "w0", "w1", "w2"}


def test_every_member_is_planned_when_all_fit() -> None:
    core = core_with(
        [make_node("n1").gpus(8).obj()],
        [*workers(5, gpus=1), member("m", 30, "master")],
        HOROVOD_GROUP,
    )
    assert core.filter(workers(1, gpus=1)[0], ["n1"], T0).verdict is Verdict.PLANNED
    assert len(core.ledger.plans[JOB].placements) == 6


def test_a_gang_whose_master_does_not_fit_says_so() -> None:
    core = core_with(
        [make_node("n1").gpus(3).obj()],
        [*workers(5, gpus=1), member("m", 30, "master", gpus=4)],
        HOROVOD_GROUP,
    )
    decision = core.filter(workers(1, gpus=1)[0], ["n1"], T0)
    assert decision.verdict is Verdict.WAIT
    assert decision.unresolvable["n1"] == (
        "gang default/job: 3/4 members placeable: needs 7 nvidia.com/gpu in all (4 for m), "
        "3 free, largest free node has 3; short of room: task master (0/1 placeable)"
    )


def test_a_group_whose_task_minimums_exceed_its_size_is_rejected_with_the_fix() -> None:
    group = make_podgroup("job", 4, minTaskMember={"master": 1, "worker": 4})
    core = core_with(
        [make_node("n1").gpus(8).obj()], [*workers(5), member("m", 30, "master")], group
    )
    decision = core.filter(workers(1)[0], ["n1"], T0)
    assert decision.verdict is Verdict.REJECT
    assert "raise spec.minMember to 5 or lower the task counts" in decision.unresolvable["n1"]
    assert core.ledger.plans == {}


def test_the_annotation_form_holds_five_workers_until_their_master_exists() -> None:
    pods = [annotated(f"w{i}", "master=1,worker=3") for i in range(5)]
    core = core_with([make_node("n1").gpus(8).obj()], pods, None)
    decision = core.filter(pods[0], ["n1"], T0)
    assert decision.verdict is Verdict.WAIT
    assert "task master: 0/1 members exist" in decision.unresolvable["n1"]
    master = annotated("m", "master=1,worker=3", task="master")
    core.observe_pod(master, T0 + 1)
    assert core.filter(master, ["n1"], T0 + 1).verdict is Verdict.PLANNED
    assert master.uid in core.ledger.plans[JOB].placements


def test_a_replacement_worker_is_planned_beside_the_bound_master() -> None:
    # After a partial gang: the master and two workers are bound, one worker came back.
    pods = [
        member("m", 0, "master", node="n1"),
        *workers(2, first_second=1, prefix="bound", node="n1"),
        member("w9", 40, "worker"),
    ]
    core = core_with([make_node("n1").gpus(8).obj()], pods, HOROVOD_GROUP)
    decision = core.filter(pods[-1], ["n1"], T0)
    assert decision.verdict is Verdict.PLANNED
    assert set(core.ledger.plans[JOB].placements) == {pods[-1].uid}


def test_a_planned_gang_says_how_many_members_it_binds() -> None:
    core = core_with(
        [make_node("n1").gpus(4).obj()],
        [*workers(5, gpus=1), member("m", 30, "master", gpus=1)],
        HOROVOD_GROUP,
    )
    assert core.filter(workers(1, gpus=1)[0], ["n1"], T0).verdict is Verdict.PLANNED
    assert core.groups[JOB].message == "gang default/job: planned 4 members, binding"


def test_a_gang_that_does_not_fit_is_not_planned_again_until_something_changes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import extender.domain.gang.gang_planning as gang_planning_module

    calls: list[int] = []
    real = gang_planning_module.plan_gang

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(len(args[0]))
        return real(*args, **kwargs)

    monkeypatch.setattr(gang_planning_module, "plan_gang", counted)
    core = core_with(
        [make_node("n1").gpus(3).obj()],
        [*workers(5, gpus=1), member("m", 30, "master", gpus=1)],
        HOROVOD_GROUP,
    )
    first = core.filter(workers(1, gpus=1)[0], ["n1"], T0)
    assert first.verdict is Verdict.WAIT
    assert calls == [6, 4]  # every unbound member, then the fewest that meet the minimums
    again = core.filter(workers(1, gpus=1)[0], ["n1"], T0 + 1)
    assert again.unresolvable == first.unresolvable
    assert calls == [6, 4], "nothing changed: the shortfall is remembered, not re-planned"
    core.apply_node(NodeInfo.from_api(make_node("n2").gpus(1).obj()))
    assert core.filter(workers(1, gpus=1)[0], ["n1", "n2"], T0 + 2).verdict is Verdict.PLANNED
