"""`gang-extender.io/depends-on`: what it accepts, what it denies, and the init container
the webhook adds for it (the whole patch for one case is pinned by the admission golden
file master-depends-on-workers)."""

from __future__ import annotations

from typing import Any

import pytest

from extender.domain.objects.membership import TASKS_ANNOTATION
from extender.injection.admission import (
    AdmissionDenied,
    pod_group,
    read_membership,
    render_pod_patch,
)
from extender.injection.depends import Dependency, TaskWait, wait_container
from extender.injection.member import PodMembership
from extender.injection.patch import apply_patch
from extender.injection.scripts import DEFAULT_WAIT_TIMEOUT_SECONDS
from tests.builders import make_pod, make_podgroup

DEPENDS_ON = "gang-extender.io/depends-on"
TIMEOUT = "gang-extender.io/depends-on-timeout"


def master(**annotations: str) -> dict[str, Any]:
    pod = (
        make_pod("m").group("hvd").task("master").annotation(TASKS_ANNOTATION, "master=1,worker=3")
    )
    for key, value in annotations.items():
        pod = pod.annotation(key, value)
    return pod.obj()


def membership_of(pod: dict[str, Any], podgroup: dict[str, Any] | None = None) -> PodMembership:
    group = pod_group(pod)
    assert group is not None
    return read_membership(pod=pod, namespace="ns", group=group, podgroup=podgroup)


def wire(pod: dict[str, Any], podgroup: dict[str, Any] | None = None) -> dict[str, Any]:
    patched: dict[str, Any] = apply_patch(
        pod, render_pod_patch(pod, membership_of(pod, podgroup), 0)
    )
    return patched


class TestDeclaration:
    def test_none_declared_waits_for_nothing(self) -> None:
        assert membership_of(master()).dependency is None

    def test_a_task_waits_for_all_its_members_with_the_default_timeout(self) -> None:
        assert membership_of(master(**{DEPENDS_ON: "worker"})).dependency == Dependency(
            waits=(TaskWait("worker", None),), timeout_seconds=DEFAULT_WAIT_TIMEOUT_SECONDS
        )

    def test_counts_several_tasks_and_spaces(self) -> None:
        pod = make_pod("m").group("g").task("launcher").annotation(DEPENDS_ON, "worker=2, ps")
        assert membership_of(pod.obj()).dependency == Dependency(
            waits=(TaskWait("worker", 2), TaskWait("ps", None)),
            timeout_seconds=DEFAULT_WAIT_TIMEOUT_SECONDS,
        )

    def test_the_annotation_timeout_wins(self) -> None:
        pod = master(**{DEPENDS_ON: "worker", TIMEOUT: "42"})
        podgroup = make_podgroup("hvd", 4, podsReadyTimeoutSeconds=600)
        dependency = membership_of(pod, podgroup).dependency
        assert dependency is not None and dependency.timeout_seconds == 42

    def test_else_the_podgroups_pods_ready_timeout(self) -> None:
        podgroup = make_podgroup("hvd", 4, podsReadyTimeoutSeconds=600)
        dependency = membership_of(master(**{DEPENDS_ON: "worker"}), podgroup).dependency
        assert dependency is not None and dependency.timeout_seconds == 600

    @pytest.mark.parametrize(
        ("annotations", "message"),
        [
            (
                {DEPENDS_ON: "master"},
                "annotation gang-extender.io/depends-on='master': task 'master' cannot wait "
                "for itself (each of its members would wait for the others, and none is "
                "Ready before it starts); name other tasks",
            ),
            (
                {DEPENDS_ON: "ps"},
                "annotation gang-extender.io/depends-on='ps': task 'ps' is not in the layout "
                "master=1,worker=3 (from annotation gang-extender.io/tasks); name one of "
                "master, worker",
            ),
            (
                {DEPENDS_ON: "worker=0"},
                "annotation gang-extender.io/depends-on='worker=0': the count of 'worker' "
                "must be a whole number >= 1, got '0'",
            ),
            (
                {DEPENDS_ON: "Worker"},
                "annotation gang-extender.io/depends-on='Worker': 'Worker' must be a task "
                'name, optionally with a count ("worker" or "worker=2"; several separated '
                "by commas)",
            ),
            (
                {DEPENDS_ON: "worker,"},
                "annotation gang-extender.io/depends-on='worker,': '' must be a task name, "
                'optionally with a count ("worker" or "worker=2"; several separated by commas)',
            ),
            (
                {DEPENDS_ON: "worker,worker=2"},
                "annotation gang-extender.io/depends-on='worker,worker=2': task 'worker' is "
                "named twice; name it once",
            ),
            (
                {DEPENDS_ON: "worker", TIMEOUT: "forever"},
                "annotation gang-extender.io/depends-on-timeout='forever' must be a whole "
                "number of seconds >= 1",
            ),
            (
                {DEPENDS_ON: "worker", TIMEOUT: "0"},
                "annotation gang-extender.io/depends-on-timeout='0' must be a whole "
                "number of seconds >= 1",
            ),
            (
                {TIMEOUT: "60"},
                "annotation gang-extender.io/depends-on-timeout is set but "
                "gang-extender.io/depends-on is not; name the tasks to wait for, or remove "
                "the timeout",
            ),
        ],
    )
    def test_bad_declarations_are_denied_saying_what_to_fix(
        self, annotations: dict[str, str], message: str
    ) -> None:
        with pytest.raises(AdmissionDenied) as denied:
            membership_of(master(**annotations))
        assert str(denied.value) == message


class TestTheWaitContainer:
    def test_runs_the_script_in_the_members_image_with_its_timeout(self) -> None:
        pod = master()
        pod["spec"]["containers"][0].update(
            image="registry.example.com/hvd:1",
            imagePullPolicy="Always",
            securityContext={"runAsNonRoot": True, "runAsUser": 1000},
        )
        dependency = Dependency((TaskWait("worker", None), TaskWait("ps", 2)), 90)
        assert wait_container(pod, dependency) == {
            "name": "wait-for-tasks",
            "image": "registry.example.com/hvd:1",
            "imagePullPolicy": "Always",
            "securityContext": {"runAsNonRoot": True, "runAsUser": 1000},
            "command": ["sh", "/etc/volcano/wait_for_tasks.sh", "worker", "ps=2"],
            "env": [{"name": "GANG_WAIT_TIMEOUT_SECONDS", "value": "90"}],
            "resources": {
                "requests": {"cpu": "10m", "memory": "32Mi"},
                "limits": {"cpu": "10m", "memory": "32Mi"},
            },
        }

    def test_is_the_last_init_container_and_is_wired_like_the_others(self) -> None:
        pod = master(**{DEPENDS_ON: "worker"})
        pod["spec"]["initContainers"] = [{"name": "setup", "image": "busybox"}]
        wired = wire(pod)
        setup, wait = wired["spec"]["initContainers"]
        assert (setup["name"], wait["name"]) == ("setup", "wait-for-tasks")
        assert wait["volumeMounts"] == setup["volumeMounts"]
        assert [e["name"] for e in wait["env"]] == [e["name"] for e in setup["env"]] + [
            "GANG_WAIT_TIMEOUT_SECONDS"
        ]

    def test_a_pod_without_init_containers_gets_the_list(self) -> None:
        wired = wire(master(**{DEPENDS_ON: "worker"}))
        assert [c["name"] for c in wired["spec"]["initContainers"]] == ["wait-for-tasks"]

    def test_a_pod_without_the_declaration_gets_no_init_container(self) -> None:
        assert "initContainers" not in wire(master())["spec"]

    def test_reinvocation_adds_nothing(self) -> None:
        wired = wire(master(**{DEPENDS_ON: "worker"}))
        assert render_pod_patch(wired, membership_of(wired), 0) == []

    def test_an_init_container_of_the_users_with_that_name_is_denied(self) -> None:
        pod = master(**{DEPENDS_ON: "worker"})
        pod["spec"]["initContainers"] = [
            {"name": "wait-for-tasks", "image": "busybox", "command": ["true"]}
        ]
        with pytest.raises(AdmissionDenied) as denied:
            render_pod_patch(pod, membership_of(pod), 0)
        assert str(denied.value) == (
            "the pod already has an init container named 'wait-for-tasks' that gang-extender "
            "did not add; rename it (gang-extender uses the name 'wait-for-tasks' for "
            "annotation gang-extender.io/depends-on)"
        )
