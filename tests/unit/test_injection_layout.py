"""Task layouts and the ConfigMap `<group>-svc` they render (DESIGN sections 2 and 4)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from extender.domain.objects.membership import (
    JOB_COMPLETION_INDEX_ANNOTATION,
    TASK_INDEX_ANNOTATION,
    TASKS_ANNOTATION,
    MembershipError,
)
from extender.injection import names
from extender.injection.hostfile import render_svc_data
from extender.injection.layout import (
    GroupLayout,
    LayoutSource,
    TaskLayout,
    declared_layout,
    resolve_layout,
)
from tests.builders import make_pod, make_podgroup


def member(name: str, task: str, index: int, *, gpus: int = 0) -> dict[str, Any]:
    builder = make_pod(name).group("job").task(task).annotation(TASK_INDEX_ANNOTATION, str(index))
    if gpus:
        builder = builder.gpus(gpus)
    return builder.obj()


class TestNames:
    def test_volcano_names_for_a_group_task_and_index(self) -> None:
        assert names.hostname("job", "worker", 2) == "job-worker-2"
        assert names.fqdn("job", "worker", 2) == "job-worker-2.job"
        assert names.service_name("job") == "job"
        assert names.svc_configmap_name("job") == "job-svc"
        assert names.ssh_secret_name("job") == "job-ssh"

    @pytest.mark.parametrize(
        ("task", "host_file", "hosts_env", "num_env"),
        [
            pytest.param("worker", "worker.host", "VC_WORKER_HOSTS", "VC_WORKER_NUM", id="plain"),
            pytest.param(
                "ps-server",
                "ps_server.host",
                "VC_PS_SERVER_HOSTS",
                "VC_PS_SERVER_NUM",
                id="dash becomes underscore",
            ),
        ],
    )
    def test_task_names_in_files_and_env(
        self, task: str, host_file: str, hosts_env: str, num_env: str
    ) -> None:
        assert names.task_host_file(task) == host_file
        assert names.task_hosts_env(task) == hosts_env
        assert names.task_num_env(task) == num_env


class TestResolveLayout:
    def test_podgroup_min_task_member_wins_over_annotation_and_pods(self) -> None:
        podgroup = make_podgroup("job", 4, minTaskMember={"master": 1, "worker": 3})
        pods = [make_pod("p").group("job").annotation(TASKS_ANNOTATION, "worker=9").obj()]
        layout = resolve_layout(group="job", podgroup=podgroup, pods=pods)
        assert [(t.name, t.count) for t in layout.tasks] == [("master", 1), ("worker", 3)]
        assert layout.source is LayoutSource.PODGROUP_MIN_TASK_MEMBER

    def test_tasks_annotation_when_the_podgroup_has_no_min_task_member(self) -> None:
        pods = [
            make_pod("a").group("job").obj(),
            make_pod("b").group("job").annotation(TASKS_ANNOTATION, "master=1,worker=3").obj(),
        ]
        layout = resolve_layout(group="job", podgroup=make_podgroup("job", 4), pods=pods)
        assert [(t.name, t.count) for t in layout.tasks] == [("master", 1), ("worker", 3)]
        assert layout.source is LayoutSource.TASKS_ANNOTATION

    def test_a_malformed_annotation_on_one_old_pod_does_not_stop_the_group(self) -> None:
        pods = [
            make_pod("a").group("job").annotation(TASKS_ANNOTATION, "worker=x").obj(),
            make_pod("b").group("job").annotation(TASKS_ANNOTATION, "worker=2").obj(),
        ]
        layout = resolve_layout(group="job", podgroup=None, pods=pods)
        assert [(t.name, t.count) for t in layout.tasks] == [("worker", 2)]

    def test_counts_derived_from_pods_take_the_highest_index_or_the_member_count(self) -> None:
        pods = [
            member("m", "master", 0),
            member("w0", "worker", 0),
            member("w4", "worker", 4),  # a gap: indexes 1..3 not created yet
        ]
        layout = resolve_layout(group="job", podgroup=make_podgroup("job", 2), pods=pods)
        assert [(t.name, t.count) for t in layout.tasks] == [("master", 1), ("worker", 5)]
        assert layout.source is LayoutSource.MEMBER_PODS

    def test_finished_pods_keep_their_index_but_are_not_counted_as_members(self) -> None:
        failed = make_pod("old").group("job").phase("Failed").obj()  # no index: never wired
        pods = [member("w0", "worker", 0), failed]
        layout = resolve_layout(group="job", podgroup=None, pods=pods)
        assert [(t.name, t.count) for t in layout.tasks] == [("worker", 1)]

    def test_no_pods_falls_back_to_min_member_workers(self) -> None:
        layout = resolve_layout(group="job", podgroup=make_podgroup("job", 3), pods=[])
        assert [(t.name, t.count) for t in layout.tasks] == [("worker", 3)]
        assert layout.source is LayoutSource.PODGROUP_MIN_MEMBER

    def test_slots_are_gpus_per_pod_of_the_task_and_at_least_one(self) -> None:
        pods = [member("m", "master", 0), member("w0", "worker", 0, gpus=2)]
        layout = resolve_layout(group="job", podgroup=None, pods=pods)
        assert {t.name: t.slots for t in layout.tasks} == {"master": 1, "worker": 2}

    def test_indexed_job_pods_count_by_completion_index(self) -> None:
        pods = [
            make_pod(f"ds-{i}")
            .group("ds")
            .annotation(JOB_COMPLETION_INDEX_ANNOTATION, str(i))
            .gpus(2)
            .obj()
            for i in range(4)
        ]
        layout = resolve_layout(group="ds", podgroup=None, pods=pods)
        assert layout.tasks == (TaskLayout(name="worker", count=4, slots=2),)

    @pytest.mark.parametrize(
        "min_task_member",
        [
            pytest.param({"Worker": 1}, id="upper-case task"),
            pytest.param({"worker": 0}, id="zero count"),
            pytest.param({"worker": "3"}, id="count as string"),
            pytest.param(["worker"], id="not a map"),
        ],
    )
    def test_a_malformed_min_task_member_is_reported(self, min_task_member: Any) -> None:
        podgroup = make_podgroup("job", 1, minTaskMember=min_task_member)
        with pytest.raises(MembershipError, match="spec.minTaskMember"):
            resolve_layout(group="job", podgroup=podgroup, pods=[])


class TestDeclaredLayout:
    def test_none_without_podgroup_counts_or_annotation(self) -> None:
        assert declared_layout(make_podgroup("job", 3), {"name": "p"}) is None

    def test_a_malformed_annotation_is_reported_even_when_the_podgroup_wins(self) -> None:
        podgroup = make_podgroup("job", 1, minTaskMember={"worker": 1})
        with pytest.raises(MembershipError, match="tasks"):
            declared_layout(podgroup, {"annotations": {TASKS_ANNOTATION: "worker"}})

    def test_describe_names_the_source(self) -> None:
        layout = declared_layout(None, {"annotations": {TASKS_ANNOTATION: "master=1,worker=3"}})
        assert layout is not None
        assert layout.describe() == "master=1,worker=3 (from annotation gang-extender.io/tasks)"


class TestSvcConfigMap:
    def test_horovod_master_and_three_workers(self) -> None:
        layout = GroupLayout(
            group="hvd",
            tasks=(TaskLayout("master", 1, 1), TaskLayout("worker", 3, 1)),
            source=LayoutSource.TASKS_ANNOTATION,
        )
        assert render_svc_data(layout) == {
            "master.host": "hvd-master-0.hvd",
            "VC_MASTER_HOSTS": "hvd-master-0.hvd",
            "VC_MASTER_NUM": "1",
            "worker.host": "hvd-worker-0.hvd\nhvd-worker-1.hvd\nhvd-worker-2.hvd",
            "VC_WORKER_HOSTS": "hvd-worker-0.hvd,hvd-worker-1.hvd,hvd-worker-2.hvd",
            "VC_WORKER_NUM": "3",
            "hostfile": (
                "hvd-master-0.hvd slots=1\n"
                "hvd-worker-0.hvd slots=1\n"
                "hvd-worker-1.hvd slots=1\n"
                "hvd-worker-2.hvd slots=1\n"
            ),
            "GANG_HOROVOD_HOSTS": "hvd-master-0.hvd:1,hvd-worker-0.hvd:1,"
            "hvd-worker-1.hvd:1,hvd-worker-2.hvd:1",
            "GANG_NUM_SLOTS": "4",
        }

    def test_deepspeed_four_workers_with_two_gpus_each(self) -> None:
        layout = GroupLayout("ds", (TaskLayout("worker", 4, 2),), LayoutSource.MEMBER_PODS)
        data = render_svc_data(layout)
        assert data["hostfile"].splitlines() == [f"ds-worker-{i}.ds slots=2" for i in range(4)]
        assert data["GANG_NUM_SLOTS"] == "8"
        assert data["GANG_HOROVOD_HOSTS"].split(",")[0] == "ds-worker-0.ds:2"

    def test_dashed_task_names_use_underscores_in_keys(self) -> None:
        layout = GroupLayout("g", (TaskLayout("ps-server", 1, 1),), LayoutSource.MEMBER_PODS)
        data = render_svc_data(layout)
        assert data["ps_server.host"] == "g-ps-server-0.g"
        assert data["VC_PS_SERVER_NUM"] == "1"


@given(counts=st.lists(st.tuples(st.integers(1, 8), st.integers(1, 8)), min_size=1, max_size=4))
def test_every_member_is_in_the_hostfile_once_and_slots_add_up(
    counts: list[tuple[int, int]],
) -> None:
    tasks = tuple(TaskLayout(f"t{i}", count, slots) for i, (count, slots) in enumerate(counts))
    layout = GroupLayout("g", tasks, LayoutSource.MEMBER_PODS)
    data = render_svc_data(layout)
    lines = data["hostfile"].splitlines()
    assert len(lines) == len(set(lines)) == sum(count for count, _ in counts)
    assert int(data["GANG_NUM_SLOTS"]) == sum(count * slots for count, slots in counts)
    for task in tasks:
        hosts = data[names.task_host_file(task.name)].split("\n")
        assert data[names.task_hosts_env(task.name)] == ",".join(hosts)
        assert int(data[names.task_num_env(task.name)]) == len(hosts) == task.count
