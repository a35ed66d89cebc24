"""Volcano and scheduler-plugins PodGroups: what is read, which decides, what status goes back (pure).

Tables of situations a migrating user meets: a Volcano PodGroup as its job
controller writes it, one written by hand with mistakes, two PodGroups of one
name, and a gang's life as `kubectl get` on their PodGroup shows it.
"""

from __future__ import annotations

import inspect
from dataclasses import replace
from typing import Any

import pytest

from extender.controller.cluster_state import UPSTREAM_KIND, ClusterState
from extender.controller.foreign_status import ForeignStatusWriter
from extender.domain.cluster.foreign_podgroups import (
    SOURCE_COSCHEDULING,
    SOURCE_OURS,
    SOURCE_VOLCANO,
    pick_podgroup,
    volcano_group_spec,
)
from extender.domain.objects.limits import MAX_GROUP_SIZE
from extender.domain.objects.membership import GroupKey, task_name
from extender.domain.objects.model import GroupSpec, NodeInfo, PodInfo
from extender.domain.status.foreign_status import (
    COSCHEDULING_PHASES,
    UPSTREAM_SCHEDULED_CONDITION,
    VOLCANO_PHASES,
    coscheduling_status,
    occupied_by,
    upstream_condition,
    volcano_status,
    with_schedule_start,
)
from extender.domain.status.status import GroupStatus, group_status
from extender.kube.rawapi import KubeError
from tests.builders import make_node, make_pod, make_podgroup
from tests.core_builder import make_core

KEY = GroupKey("team-a", "train")


def volcano_podgroup(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "train", "namespace": "team-a", "uid": "u1"},
        "spec": spec,
    }


# ---- reading a Volcano PodGroup ----


@pytest.mark.parametrize(
    ("spec", "min_member", "tasks"),
    [
        pytest.param(
            {"minMember": 4, "minTaskMember": {"master": 1, "worker": 3}, "queue": "default"},
            4,
            {"master": 1, "worker": 3},
            id="as Volcano's job controller writes it",
        ),
        pytest.param(
            {
                "minMember": 2,
                "minResources": {"nvidia.com/gpu": "8"},
                "priorityClassName": "high",
                "networkTopology": {"mode": "hard"},
                "someFieldOfANewerVolcano": True,
            },
            2,
            None,
            id="fields not used here and unknown fields are ignored",
        ),
        pytest.param({}, 1, None, id="no minMember is Volcano's 0: no minimum, each on its own"),
        pytest.param({"minMember": 0}, 1, None, id="minMember 0 is the same as none"),
        pytest.param(
            {"minMember": 3, "minTaskMember": {"ps": 0, "worker": 3}},
            3,
            {"worker": 3},
            id="a task whose minimum is 0 asks for nothing",
        ),
    ],
)
def test_a_volcano_podgroup_gives_the_groups_size_and_task_minimums(
    spec: dict[str, Any], min_member: int, tasks: dict[str, int] | None
) -> None:
    got = volcano_group_spec(volcano_podgroup(**spec))
    assert (got.key, got.source, got.error, got.managed) == (KEY, SOURCE_VOLCANO, None, False)
    assert (got.min_member, got.min_task_member) == (min_member, tasks)
    assert got.schedule_timeout_seconds is None  # Volcano's PodGroup has no such field


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        pytest.param(
            {"minMember": "4"},
            "Volcano PodGroup train spec.minMember='4' must be a whole number >= 0",
            id="a size written as a string",
        ),
        pytest.param(
            {"minMember": -1},
            "Volcano PodGroup train spec.minMember=-1 must be a whole number >= 0",
            id="a negative size",
        ),
        pytest.param(
            {"minMember": 2, "minTaskMember": ["master", "worker"]},
            "Volcano PodGroup train spec.minTaskMember must map task names to counts",
            id="task minimums as a list",
        ),
        pytest.param(
            {"minMember": 2, "minTaskMember": {"worker": "2"}},
            "Volcano PodGroup train spec.minTaskMember[worker]='2' must be a whole number >= 0",
            id="a task minimum written as a string",
        ),
        pytest.param(
            {"minMember": 2, "minTaskMember": {"worker": True}},
            "Volcano PodGroup train spec.minTaskMember[worker]=True must be a whole number >= 0",
            id="a task minimum that is a boolean",
        ),
        pytest.param(
            {"minMember": 2**31},
            "Volcano PodGroup train spec.minMember=2147483648 must be a whole number >= 0",
            id="a size past int32",
        ),
        pytest.param(
            {"minMember": 2, "minTaskMember": {"worker": 2**31}},
            "Volcano PodGroup train spec.minTaskMember[worker]=2147483648 must be a whole "
            "number >= 0",
            id="a task minimum past int32",
        ),
        pytest.param(
            {"minMember": 2, "minTaskMember": {"": 2, "worker": "x"}},
            "Volcano PodGroup train spec.minTaskMember: task '' has no name",
            id="a task without a name, reported first",
        ),
    ],
)
def test_a_malformed_volcano_podgroup_holds_the_group_with_what_to_fix(
    spec: dict[str, Any], error: str
) -> None:
    assert volcano_group_spec(volcano_podgroup(**spec)).error == error


def test_the_largest_size_and_task_minimum_this_service_accepts_are_read() -> None:
    got = volcano_group_spec(
        volcano_podgroup(minMember=MAX_GROUP_SIZE, minTaskMember={"worker": MAX_GROUP_SIZE})
    )
    assert (got.error, got.min_member, got.min_task_member) == (
        None,
        MAX_GROUP_SIZE,
        {"worker": MAX_GROUP_SIZE},
    )


@pytest.mark.parametrize(
    "spec",
    [
        {"minMember": 2**31 - 1},
        {"minMember": 2, "minTaskMember": {"worker": MAX_GROUP_SIZE + 1}},
    ],
)
def test_a_volcano_size_within_int32_but_past_the_limit_is_refused_naming_it(
    spec: dict[str, Any],
) -> None:
    error = volcano_group_spec(volcano_podgroup(**spec)).error
    assert error is not None
    assert f"at most {MAX_GROUP_SIZE} members" in error


def test_a_volcano_podgroup_without_a_namespace_is_in_default() -> None:
    obj = volcano_podgroup(minMember=2)
    del obj["metadata"]["namespace"]
    assert volcano_group_spec(obj).key == GroupKey("default", "train")


def test_a_volcano_members_task_is_its_task_spec_annotation_unless_ours_is_set() -> None:
    volcano = make_pod("train-master-0").annotation("volcano.sh/task-spec", "master").obj()
    both = make_pod("x").annotation("volcano.sh/task-spec", "master").task("ps").obj()
    assert task_name(volcano["metadata"]) == "master"
    assert task_name(both["metadata"]) == "ps"
    assert task_name(make_pod("plain").obj()["metadata"]) == "worker"


# ---- which PodGroup of a name decides ----


def spec_of(source: str, min_member: int, *, managed: bool = False, **tasks: int) -> GroupSpec:
    return GroupSpec(
        key=KEY,
        min_member=min_member,
        source=source,
        min_task_member=tasks or None,
        managed=managed,
    )


@pytest.mark.parametrize(
    ("specs", "source", "error"),
    [
        pytest.param([], None, None, id="no PodGroup"),
        pytest.param(
            [spec_of(SOURCE_VOLCANO, 4)], SOURCE_VOLCANO, None, id="only Volcano's: it decides"
        ),
        pytest.param(
            [
                spec_of(SOURCE_OURS, 4, master=1, worker=3),
                spec_of(SOURCE_VOLCANO, 4, master=1, worker=3),
            ],
            SOURCE_OURS,
            None,
            id="ours and Volcano's agree: ours decides",
        ),
        pytest.param(
            [spec_of(SOURCE_VOLCANO, 4), spec_of(SOURCE_COSCHEDULING, 4)],
            SOURCE_VOLCANO,
            None,
            id="Volcano's and coscheduling's agree: Volcano's decides",
        ),
        pytest.param(
            [spec_of(SOURCE_OURS, 3, managed=True), spec_of(SOURCE_VOLCANO, 4)],
            SOURCE_VOLCANO,
            None,
            id="one gang-extender created gives way to the user's Volcano PodGroup",
        ),
        pytest.param(
            [spec_of(SOURCE_OURS, 3, managed=True)],
            SOURCE_OURS,
            None,
            id="only one gang-extender created",
        ),
        pytest.param(
            [spec_of(SOURCE_OURS, 4), spec_of(SOURCE_VOLCANO, 3)],
            SOURCE_OURS,
            "scheduling.gang-extender.io PodGroup train (minMember 4) and scheduling.volcano.sh "
            "PodGroup train (minMember 3) disagree; delete the one you do not use, or make "
            "them agree",
            id="ours and Volcano's disagree on the size",
        ),
        pytest.param(
            [spec_of(SOURCE_VOLCANO, 4, master=1, worker=3), spec_of(SOURCE_COSCHEDULING, 4)],
            SOURCE_VOLCANO,
            None,
            id="coscheduling's cannot state task minimums: its silence is no disagreement",
        ),
        pytest.param(
            [spec_of(SOURCE_VOLCANO, 4, master=1, worker=3), spec_of(SOURCE_COSCHEDULING, 5)],
            SOURCE_VOLCANO,
            "scheduling.volcano.sh PodGroup train (minMember 4, minTaskMember master=1,worker=3) "
            "and scheduling.x-k8s.io PodGroup train (minMember 5) disagree; delete the one you "
            "do not use, or make them agree",
            id="Volcano's and coscheduling's disagree on the size",
        ),
        pytest.param(
            [spec_of(SOURCE_OURS, 4, worker=4), spec_of(SOURCE_VOLCANO, 4, master=1, worker=3)],
            SOURCE_OURS,
            "scheduling.gang-extender.io PodGroup train (minMember 4, minTaskMember worker=4) "
            "and scheduling.volcano.sh PodGroup train (minMember 4, minTaskMember "
            "master=1,worker=3) disagree; delete the one you do not use, or make them agree",
            id="ours and Volcano's state different task minimums",
        ),
    ],
)
def test_which_podgroup_of_a_name_decides(
    specs: list[GroupSpec], source: str | None, error: str | None
) -> None:
    picked = pick_podgroup(specs)
    assert (picked.source if picked else None, picked.error if picked else None) == (
        source,
        error,
    )


def test_task_minimums_come_from_the_first_podgroup_that_states_them() -> None:
    picked = pick_podgroup(
        [spec_of(SOURCE_OURS, 4), spec_of(SOURCE_VOLCANO, 4, master=1, worker=3)]
    )
    assert picked is not None and picked.error is None
    assert (picked.source, picked.min_task_member) == (SOURCE_OURS, {"master": 1, "worker": 3})


def test_a_conflict_holds_the_gang_and_its_status_says_which_podgroups_to_reconcile() -> None:
    core = make_core()
    core.apply_node(NodeInfo.from_api(make_node("n0").gpus(8).obj()))
    for i in range(4):
        pod = make_pod(f"train-{i}", "team-a").annotation("scheduling.k8s.io/group-name", "train")
        core.observe_pod(PodInfo.from_api(pod.gpus(1).obj()), 0.0)
    core.apply_group_spec(volcano_group_spec(volcano_podgroup(minMember=4)))
    core.apply_group_spec(
        GroupSpec.from_podgroup(make_podgroup("train", 3, "team-a"), source=SOURCE_OURS)
    )
    status = group_status(core, KEY)
    assert status is not None
    assert (status.phase, status.reason) == ("Pending", "InvalidSpec")
    assert "disagree; delete the one you do not use" in status.message


# ---- status in their schemas ----


def our_status(phase: str, *, scheduled: int = 0, running: int = 0, **counts: int) -> GroupStatus:
    placed = scheduled >= 4
    return GroupStatus(
        phase=phase,
        min_member=4,
        members=4,
        scheduled=scheduled,
        running=running,
        succeeded=counts.get("succeeded", 0),
        failed=counts.get("failed", 0),
        condition_status="True" if placed else "False",
        reason="Running" if placed else "WaitingForMembers",
        message="gang team-a/train: 4/4 members bound" if placed else "gang team-a/train: 3/4",
    )


@pytest.mark.parametrize(
    ("ours", "phase"),
    [
        pytest.param(our_status("Pending"), "Pending", id="waiting for members or room"),
        pytest.param(our_status("Scheduling"), "Scheduling", id="planned, reaching bind"),
        pytest.param(
            our_status("Scheduled", scheduled=4), "Scheduling", id="bound, not yet running"
        ),
        pytest.param(our_status("Running", scheduled=4, running=4), "Running", id="running"),
        pytest.param(
            our_status("Succeeded", scheduled=4, succeeded=4), "Finished", id="all succeeded"
        ),
        pytest.param(our_status("Failed", scheduled=4, failed=4), "Failed", id="all failed"),
    ],
)
def test_a_scheduler_plugins_podgroup_gets_its_own_phases(ours: GroupStatus, phase: str) -> None:
    body = coscheduling_status(ours, occupied="")
    assert body == {
        "phase": phase,
        "running": ours.running,
        "succeeded": ours.succeeded,
        "failed": ours.failed,
    }


def test_every_phase_of_ours_has_a_phase_in_both_schemas_from_their_types() -> None:
    ours = {"Pending", "Scheduling", "Scheduled", "Running", "Succeeded", "Failed"}
    # scheduler-plugins apis/scheduling/v1alpha1 PodGroupPhase; Volcano v1beta1 PodGroupPhase.
    coscheduling = {"Pending", "Running", "Scheduling", "Unknown", "Finished", "Failed"}
    volcano = {"Pending", "Running", "Unknown", "Inqueue", "Completed"}
    assert set(COSCHEDULING_PHASES) == ours and set(COSCHEDULING_PHASES.values()) <= coscheduling
    assert set(VOLCANO_PHASES) == ours and set(VOLCANO_PHASES.values()) <= volcano


def test_occupied_by_names_the_members_owners_like_scheduler_plugins() -> None:
    assert occupied_by("team-a", ["train-launcher", "train-worker", "train-worker", ""]) == (
        "team-a/train-launcher,team-a/train-worker"
    )
    assert occupied_by("team-a", []) == ""
    assert coscheduling_status(our_status("Pending"), occupied="team-a/j")["occupiedBy"] == (
        "team-a/j"
    )


@pytest.mark.parametrize(
    ("phase", "current", "remembered", "start"),
    [
        pytest.param("Pending", {}, None, None, id="still pending: not started, left as it is"),
        pytest.param("Scheduling", {}, None, "NOW", id="first leaves Pending: now"),
        pytest.param(
            "Running", {"scheduleStartTime": "T1"}, "T2", "T1", id="kept once on the object"
        ),
        pytest.param("Running", {}, "T2", "T2", id="what was written, before the watch shows it"),
    ],
)
def test_schedule_start_time_is_when_the_gang_first_left_pending(
    phase: str, current: dict[str, str], remembered: str | None, start: str | None
) -> None:
    out = with_schedule_start({"phase": phase}, current=current, remembered=remembered, now="NOW")
    assert out.get("scheduleStartTime") == start


@pytest.mark.parametrize(
    ("ours", "phase", "condition"),
    [
        pytest.param(our_status("Pending"), "Pending", "Unschedulable", id="waiting"),
        pytest.param(our_status("Scheduling"), "Inqueue", "Unschedulable", id="planned"),
        pytest.param(our_status("Scheduled", scheduled=4), "Running", "Scheduled", id="bound"),
        pytest.param(
            our_status("Running", scheduled=4, running=4), "Running", "Scheduled", id="running"
        ),
        pytest.param(
            our_status("Succeeded", scheduled=4, succeeded=4),
            "Completed",
            "Scheduled",
            id="succeeded",
        ),
        pytest.param(
            our_status("Failed", scheduled=4, failed=4), "Pending", "Scheduled", id="failed"
        ),
    ],
)
def test_a_volcano_podgroup_gets_its_own_phases_and_our_reason(
    ours: GroupStatus, phase: str, condition: str
) -> None:
    body = volcano_status(ours, transition_time="T")
    assert (body["phase"], body["running"], body["succeeded"], body["failed"]) == (
        phase,
        ours.running,
        ours.succeeded,
        ours.failed,
    )
    assert body["conditions"] == [
        {
            "type": condition,
            "status": "True",
            "reason": ours.reason,
            "message": ours.message,
            "lastTransitionTime": "T",
        }
    ]


# ---- the controller's writer: when and where it writes ----


class RecordingRaw:
    """Records the PATCHes the writer sends; answers 404 for the names in `gone`."""

    def __init__(self, gone: frozenset[str] = frozenset()) -> None:
        self.calls: list[tuple[str, str, dict[str, Any]]] = []
        self.gone = gone

    def call(self, method: str, path: str, *, body: Any = None, **_: Any) -> dict[str, Any]:
        if any(
            path.endswith(f"/podgroups/{name}") or f"/podgroups/{name}/" in path
            for name in self.gone
        ):
            raise KubeError(404, "not found")
        self.calls.append((method, path, body))
        return {}


def writer_with(
    *podgroups: tuple[str, dict[str, Any]], scheduler: str = "gang-extender", raw: Any = None
) -> tuple[ForeignStatusWriter, ClusterState, Any]:
    core = make_core()
    state = ClusterState(core, flush_effects=lambda: None)
    state.on_page("nodes", [make_node("n0").gpus(8).obj()], True, True)
    pods = [
        make_pod(f"train-{i}", "team-a")
        .label("scheduling.x-k8s.io/pod-group", "train")
        .scheduler(scheduler)
        .obj()
        for i in range(2)
    ]
    state.on_page("pods", pods, True, True)
    for kind, obj in podgroups:
        state.on_page(kind, [obj], True, True)
    raw = raw or RecordingRaw()
    return ForeignStatusWriter(raw=raw, core=core, state=state), state, raw


def coscheduling_podgroup(min_member: int = 2) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "train", "namespace": "team-a", "uid": "c1"},
        "spec": {"minMember": min_member},
    }


async def test_scheduler_plugins_status_goes_through_its_subresource_once_per_change() -> None:
    writer, _, raw = writer_with(("coscheduling-podgroups", coscheduling_podgroup(3)))
    await writer.write(KEY)
    await writer.write(KEY)
    ((method, path, body),) = raw.calls
    assert (method, path) == (
        "PATCH",
        "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/team-a/podgroups/train/status",
    )
    assert body == {
        "metadata": {"uid": "c1"},
        "status": {"phase": "Pending", "running": 0, "succeeded": 0, "failed": 0},
    }


async def test_a_volcano_podgroup_is_written_with_the_object_its_crd_has_no_status_subresource() -> (
    None
):
    writer, _, raw = writer_with(("volcano-podgroups", volcano_podgroup(minMember=3)))
    await writer.write(KEY)
    ((method, path, body),) = raw.calls
    assert (method, path) == (
        "PATCH",
        "/apis/scheduling.volcano.sh/v1beta1/namespaces/team-a/podgroups/train",
    )
    assert body["metadata"] == {"uid": "u1"} and body["status"]["phase"] == "Pending"
    assert set(body) == {"metadata", "status"}, "never the spec"


async def test_a_group_another_scheduler_places_gets_no_status_from_us() -> None:
    writer, _, raw = writer_with(
        ("coscheduling-podgroups", coscheduling_podgroup()),
        ("volcano-podgroups", volcano_podgroup(minMember=2)),
        scheduler="default-scheduler",
    )
    await writer.write(KEY)
    assert raw.calls == []


async def test_a_podgroup_deleted_before_its_status_lands_is_no_error() -> None:
    writer, _, raw = writer_with(
        ("coscheduling-podgroups", coscheduling_podgroup()), raw=RecordingRaw(frozenset({"train"}))
    )
    await writer.write(KEY)
    assert raw.calls == []


async def test_a_recreated_podgroup_is_written_afresh() -> None:
    writer, state, raw = writer_with(("coscheduling-podgroups", coscheduling_podgroup(3)))
    await writer.write(KEY)
    again = coscheduling_podgroup(3)
    again["metadata"]["uid"] = "c2"
    state.on_page("coscheduling-podgroups", [again], True, True)
    await writer.write(KEY)
    assert [body["metadata"]["uid"] for _, _, body in raw.calls] == ["c1", "c2"]


def test_the_watch_cache_reads_volcano_podgroups_when_served_and_forgets_them_when_gone() -> None:
    from extender.kube.cache import WatchCache
    from extender.kube.resources import VOLCANO_PODGROUPS

    assert VOLCANO_PODGROUPS.optional, "a cluster without Volcano's CRD must still sync"
    assert VOLCANO_PODGROUPS.path == "/apis/scheduling.volcano.sh/v1beta1/podgroups"
    assert VOLCANO_PODGROUPS in inspect.signature(WatchCache).parameters["resources"].default
    core = make_core()
    state = ClusterState(core, flush_effects=lambda: None)
    state.on_page("volcano-podgroups", [volcano_podgroup(minMember=4)], True, True)
    spec = core.snapshot.group_spec(KEY)
    assert spec is not None and (spec.source, spec.min_member) == (SOURCE_VOLCANO, 4)
    assert state.podgroup_object(KEY) == volcano_podgroup(minMember=4)
    state.on_page("volcano-podgroups", [], True, True)  # a relist without it: deleted
    assert core.snapshot.group_spec(KEY) is None and state.podgroup_object(KEY) is None


class SubresourceRaw(RecordingRaw):
    """A Volcano CRD that serves a status subresource: an object patch keeps the old status."""

    def __init__(self, refuse_status: bool = False) -> None:
        super().__init__()
        self.refuse_status = refuse_status

    def call(self, method: str, path: str, *, body: Any = None, **_: Any) -> dict[str, Any]:
        if path.endswith("/status") and self.refuse_status:
            raise KubeError(403, "Forbidden")
        self.calls.append((method, path, body))
        kept = body["status"] if path.endswith("/status") else {}
        return {"metadata": {"uid": "u1"}, "status": kept}


async def test_a_volcano_crd_with_a_status_subresource_gets_the_status_through_it() -> None:
    writer, _, raw = writer_with(
        ("volcano-podgroups", volcano_podgroup(minMember=3)), raw=SubresourceRaw()
    )
    await writer.write(KEY)
    await writer.write(KEY)
    paths = [path for _, path, _ in raw.calls]
    object_path = "/apis/scheduling.volcano.sh/v1beta1/namespaces/team-a/podgroups/train"
    assert paths == [object_path, f"{object_path}/status"], "once, then remembered"


async def test_a_volcano_status_subresource_it_may_not_patch_is_logged_with_the_grant(
    caplog: pytest.LogCaptureFixture,
) -> None:
    writer, _, raw = writer_with(
        ("volcano-podgroups", volcano_podgroup(minMember=3)), raw=SubresourceRaw(refuse_status=True)
    )
    await writer.write(KEY)
    assert "grant patch on podgroups/status in scheduling.volcano.sh" in caplog.text
    await writer.write(KEY)
    assert len(raw.calls) == 2, "not remembered as written: tried again"


# ---- Kubernetes' own PodGroup: the PodGroupInitiallyScheduled condition ----

HELD = our_status("Pending")
PLACED = our_status("Running", scheduled=4, running=4)
NOW = "2026-11-27T10:00:00Z"
EARLIER = "2026-11-27T09:00:00Z"


def upstream_cond(status: str, reason: str, message: str, when: str = EARLIER) -> dict[str, Any]:
    return {
        "type": UPSTREAM_SCHEDULED_CONDITION,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": when,
    }


@pytest.mark.parametrize(
    ("current", "ours", "written"),
    [
        pytest.param(
            None,
            HELD,
            upstream_cond("False", "Unschedulable", HELD.message, NOW),
            id="held, nothing written yet",
        ),
        pytest.param(
            upstream_cond("False", "Unschedulable", HELD.message),
            HELD,
            None,
            id="says it already",
        ),
        pytest.param(
            upstream_cond("False", "Unschedulable", "gang team-a/train: 1/4"),
            HELD,
            upstream_cond("False", "Unschedulable", HELD.message, EARLIER),
            id="new message, same status: transition time kept",
        ),
        pytest.param(
            upstream_cond("False", "Unschedulable", HELD.message),
            PLACED,
            upstream_cond("True", "Scheduled", PLACED.message, NOW),
            id="placed",
        ),
        pytest.param(
            upstream_cond("True", "Scheduled", PLACED.message),
            HELD,
            None,
            id="True is terminal: members evicted later change nothing",
        ),
    ],
)
def test_an_upstream_podgroup_gets_kubernetes_initially_scheduled_condition(
    current: dict[str, Any] | None, ours: GroupStatus, written: dict[str, Any] | None
) -> None:
    status = {"conditions": [current]} if current else {}
    assert upstream_condition(ours, current=status, transition_time=NOW) == written


def test_the_upstream_condition_message_is_cut_to_metav1_conditions_limit() -> None:
    long = replace(HELD, message="x" * 40000)
    written = upstream_condition(long, current={}, transition_time=NOW)
    assert written is not None and len(written["message"]) == 32768


def upstream_podgroup(uid: str = "u1") -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "train", "namespace": "team-a", "uid": uid},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}},
    }


async def test_an_upstream_podgroup_condition_is_merged_through_its_status_once_per_change() -> (
    None
):
    writer, _, raw = writer_with((UPSTREAM_KIND, upstream_podgroup()))
    await writer.write(KEY)
    await writer.write(KEY)
    ((method, path, body),) = raw.calls
    assert (method, path) == (
        "PATCH",
        "/apis/scheduling.k8s.io/v1beta1/namespaces/team-a/podgroups/train/status",
    )
    (condition,) = body["status"]["conditions"]
    assert body["metadata"] == {"uid": "u1"}
    assert (condition["type"], condition["status"]) == ("PodGroupInitiallyScheduled", "False")
