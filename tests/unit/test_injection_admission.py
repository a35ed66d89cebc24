"""The admission engine: what a pod of a group gets, what is denied and why (DESIGN section 4)."""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from extender.domain.objects.membership import (
    COSCHEDULING_GROUP_LABEL,
    GROUP_LABEL,
    JOB_COMPLETION_INDEX_ANNOTATION,
    MIN_AVAILABLE_ANNOTATION,
    SSH_PATH_ANNOTATION,
    SSH_PORT_ANNOTATION,
    STATEFULSET_POD_INDEX_LABEL,
    TASK_INDEX_ANNOTATION,
    TASKS_ANNOTATION,
    VOLCANO_GROUP_ANNOTATION,
)
from extender.injection.admission import (
    AdmissionDenied,
    ReviewError,
    allowed_response,
    check_member_index,
    denied_response,
    parse_review,
    pod_group,
    read_membership,
    render_pod_patch,
    wants_wiring,
)
from extender.injection.member import PodMembership
from extender.injection.patch import JsonPatchOp, apply_patch
from tests.builders import make_pod, make_podgroup

CONFIGMAP_ENV = [
    "VC_WORKER_HOSTS",
    "VC_WORKER_NUM",
    "GANG_HOROVOD_HOSTS",
    "GANG_NUM_SLOTS",
]

# Every key of the group's Secret, as a file under .ssh/ in the volume (mounted as subPath).
SSH_ITEMS = [
    {"key": "id_rsa", "path": ".ssh/id_rsa"},
    {"key": "id_rsa.pub", "path": ".ssh/id_rsa.pub"},
    {"key": "authorized_keys", "path": ".ssh/authorized_keys"},
    {"key": "config", "path": ".ssh/config"},
]


def membership_of(pod: dict[str, Any], podgroup: dict[str, Any] | None = None) -> PodMembership:
    group = pod_group(pod)
    assert group is not None
    return read_membership(pod=pod, namespace="ns", group=group, podgroup=podgroup)


def wire(
    pod: dict[str, Any], index: int = 0, podgroup: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The pod as the API server stores it after our patch."""
    membership = membership_of(pod, podgroup)
    patched: dict[str, Any] = apply_patch(pod, render_pod_patch(pod, membership, index))
    return patched


def env_names(container: dict[str, Any]) -> list[str]:
    return [item["name"] for item in container.get("env") or []]


def with_init_container(pod: dict[str, Any]) -> dict[str, Any]:
    pod["spec"]["initContainers"] = [{"name": "setup", "image": "busybox"}]
    return pod


class TestParseReview:
    def review(self, **request: Any) -> dict[str, Any]:
        base = {
            "uid": "u1",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "operation": "CREATE",
            "namespace": "ns",
            "object": make_pod("p").obj(),
        }
        base.update(request)
        return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": base}

    def test_a_pod_create(self) -> None:
        request = parse_review(self.review(dryRun=True))
        assert (request.uid, request.namespace, request.dry_run) == ("u1", "ns", True)
        assert wants_wiring(request)

    @pytest.mark.parametrize(
        "change",
        [
            pytest.param({"operation": "UPDATE"}, id="update"),
            pytest.param({"subResource": "ephemeralcontainers"}, id="subresource"),
            pytest.param(
                {"kind": {"group": "apps", "version": "v1", "kind": "Deployment"}}, id="not a pod"
            ),
        ],
    )
    def test_anything_but_a_pod_create_is_not_ours(self, change: dict[str, Any]) -> None:
        assert not wants_wiring(parse_review(self.review(**change)))

    @pytest.mark.parametrize(
        ("body", "message"),
        [
            pytest.param([], "JSON object", id="a list"),
            pytest.param(
                {"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"},
                "expected apiVersion",
                id="v1beta1",
            ),
            pytest.param(
                {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"},
                "no request",
                id="no request",
            ),
            pytest.param(
                {
                    "apiVersion": "admission.k8s.io/v1",
                    "kind": "AdmissionReview",
                    "request": {"uid": ""},
                },
                "uid",
                id="empty uid",
            ),
        ],
    )
    def test_malformed_reviews_say_what_is_wrong(self, body: Any, message: str) -> None:
        with pytest.raises(ReviewError, match=message):
            parse_review(body)

    def test_a_pod_without_spec_is_malformed(self) -> None:
        with pytest.raises(ReviewError, match="not a pod"):
            parse_review(self.review(object={"metadata": {}}))


class TestWhoIsAMember:
    def test_a_pod_without_a_group_is_not_ours(self) -> None:
        assert pod_group(make_pod("p").obj()) is None

    @pytest.mark.parametrize(
        "pod",
        [
            pytest.param(make_pod("p").group("job").obj(), id="gang-extender label"),
            pytest.param(
                make_pod("p").label(COSCHEDULING_GROUP_LABEL, "job").obj(),
                id="scheduler-plugins label",
            ),
            pytest.param(
                make_pod("p").annotation(VOLCANO_GROUP_ANNOTATION, "job").obj(),
                id="volcano annotation",
            ),
        ],
    )
    def test_every_accepted_group_source(self, pod: dict[str, Any]) -> None:
        assert pod_group(pod) == "job"


LONG = "a" * 52  # with "-launcher-12": 64 characters

DENIALS = [
    pytest.param(
        make_pod("p").group("a").label(COSCHEDULING_GROUP_LABEL, "b").obj(),
        None,
        "claims two groups",
        id="two groups claimed",
    ),
    pytest.param(
        make_pod("p").group("1job").obj(),
        None,
        "must be a lower-case DNS label that starts with a letter",
        id="group starts with a digit",
    ),
    pytest.param(
        make_pod("p").group("job").task("Worker").obj(),
        None,
        "task name 'Worker'",
        id="upper-case task",
    ),
    pytest.param(
        make_pod("p").group("job").annotation(MIN_AVAILABLE_ANNOTATION, "four").obj(),
        None,
        "is not a whole number",
        id="malformed min-available",
    ),
    pytest.param(
        make_pod("p").group("job").annotation(TASKS_ANNOTATION, "master:1").obj(),
        None,
        "expected 'task=count,...'",
        id="malformed tasks annotation",
    ),
    pytest.param(
        make_pod("p")
        .group("job")
        .task("ps")
        .annotation(TASKS_ANNOTATION, "master=1,worker=3")
        .obj(),
        None,
        "task 'ps' is not in the layout of group 'job': master=1,worker=3 (from annotation "
        "gang-extender.io/tasks); set label gang-extender.io/task to one of master, worker",
        id="unknown task in the annotation layout",
    ),
    pytest.param(
        make_pod("p").group("job").task("ps").obj(),
        make_podgroup("job", 2, minTaskMember={"worker": 2}),
        "(from PodGroup spec.minTaskMember)",
        id="unknown task in the PodGroup layout",
    ),
    pytest.param(
        make_pod("p")
        .group("job")
        .annotation(TASKS_ANNOTATION, "worker=3")
        .annotation(TASK_INDEX_ANNOTATION, "3")
        .obj(),
        None,
        "task index 3 of task 'worker' is out of range: group 'job' has 3 'worker' member(s), "
        "indexes 0..2",
        id="index out of range",
    ),
    pytest.param(
        make_pod("p").group("job").annotation(TASK_INDEX_ANNOTATION, "-1").obj(),
        None,
        "must be >= 0",
        id="negative index",
    ),
    pytest.param(
        make_pod("p").group(LONG).task("launcher").annotation(TASK_INDEX_ANNOTATION, "12").obj(),
        None,
        f"hostname '{LONG}-launcher-12' would be 64 characters, over the 63 allowed for a "
        f"hostname; shorten the group name '{LONG}' or the task name 'launcher' by 1 character",
        id="hostname over 63 characters",
    ),
    pytest.param(
        make_pod("p").group("job").annotation(SSH_PATH_ANNOTATION, "ssh").obj(),
        None,
        "must be an absolute directory path",
        id="relative ssh path",
    ),
    pytest.param(
        make_pod("p").group("job").annotation(SSH_PORT_ANNOTATION, "99999").obj(),
        None,
        "must be a port number",
        id="ssh port out of range",
    ),
    pytest.param(
        make_pod("p").group("job").obj(),
        make_podgroup("job", 1, minTaskMember={"worker": 0}),
        "spec.minTaskMember[worker]=0 must be a whole number >= 1",
        id="malformed PodGroup",
    ),
]


@pytest.mark.parametrize(("pod", "podgroup", "message"), DENIALS)
def test_bad_input_is_denied_with_what_to_fix(
    pod: dict[str, Any], podgroup: dict[str, Any] | None, message: str
) -> None:
    with pytest.raises(AdmissionDenied) as denied:
        membership_of(pod, podgroup)
    assert message in str(denied.value)


def test_an_allocated_index_is_checked_against_the_layout_too() -> None:
    pod = make_pod("p").group("job").annotation(TASKS_ANNOTATION, "worker=2").obj()
    membership = membership_of(pod)
    check_member_index(membership, 1)
    with pytest.raises(AdmissionDenied, match="out of range"):
        check_member_index(membership, 2)


class TestWhatAMemberGets:
    def test_hostname_subdomain_and_the_index_annotation(self) -> None:
        pod = wire(make_pod("p").group("hvd").task("worker").obj(), index=2)
        assert pod["spec"]["hostname"] == "hvd-worker-2"
        assert pod["spec"]["subdomain"] == "hvd"
        assert pod["metadata"]["annotations"][TASK_INDEX_ANNOTATION] == "2"

    def test_the_configmap_and_secret_volumes(self) -> None:
        pod = wire(make_pod("p").group("hvd").obj())
        assert pod["spec"]["volumes"] == [
            {"name": "gang-svc", "configMap": {"name": "hvd-svc", "defaultMode": 0o755}},
            {
                "name": "gang-ssh",
                "secret": {"secretName": "hvd-ssh", "defaultMode": 0o600, "items": SSH_ITEMS},
            },
        ]

    def test_the_reservation_fence_toleration_beside_the_users_own(self) -> None:
        fence = {"key": "gang-extender.io/reserved", "operator": "Exists", "effect": "NoSchedule"}
        gpu_nodes = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
        assert wire(make_pod("p").group("hvd").obj())["spec"]["tolerations"] == [fence]
        pod = make_pod("p").group("hvd").obj()
        pod["spec"]["tolerations"] = [gpu_nodes]
        assert wire(pod)["spec"]["tolerations"] == [gpu_nodes, fence]
        pod["spec"]["tolerations"] = [fence]
        assert wire(pod)["spec"]["tolerations"] == [fence]  # not twice

    def test_mounts_and_env_in_every_container_and_init_container(self) -> None:
        pod = make_pod("p").group("hvd").obj()
        pod["spec"]["containers"].append({"name": "sidecar", "image": "busybox"})
        pod = wire(with_init_container(pod), index=1)
        containers = pod["spec"]["initContainers"] + pod["spec"]["containers"]
        assert len(containers) == 3
        for container in containers:
            assert container["volumeMounts"] == [
                {"name": "gang-svc", "mountPath": "/etc/volcano", "readOnly": True},
                {
                    "name": "gang-ssh",
                    "mountPath": "/root/.ssh",
                    "subPath": ".ssh",
                    "readOnly": True,
                },
            ]
            assert env_names(container) == [
                "VC_TASK_INDEX",
                "VK_TASK_INDEX",
                "VC_TASK_NAME",
                *CONFIGMAP_ENV,
            ]
            assert container["env"][0] == {"name": "VC_TASK_INDEX", "value": "1"}
            assert container["env"][2] == {"name": "VC_TASK_NAME", "value": "worker"}
            assert container["env"][3] == {
                "name": "VC_WORKER_HOSTS",
                "valueFrom": {"configMapKeyRef": {"name": "hvd-svc", "key": "VC_WORKER_HOSTS"}},
            }

    def test_env_names_every_task_of_the_declared_layout(self) -> None:
        pod = make_pod("m").group("hvd").task("master")
        pod = pod.annotation(TASKS_ANNOTATION, "master=1,worker=3")
        names = env_names(wire(pod.obj())["spec"]["containers"][0])
        assert names[3:] == [
            "VC_MASTER_HOSTS",
            "VC_MASTER_NUM",
            "VC_WORKER_HOSTS",
            "VC_WORKER_NUM",
            "GANG_HOROVOD_HOSTS",
            "GANG_NUM_SLOTS",
        ]

    def test_our_env_goes_first_so_user_env_can_refer_to_it(self) -> None:
        pod = make_pod("p").group("hvd").obj()
        pod["spec"]["containers"][0]["env"] = [{"name": "RANK", "value": "$(VC_TASK_INDEX)"}]
        names = env_names(wire(pod)["spec"]["containers"][0])
        assert names[0] == "VC_TASK_INDEX" and names[-1] == "RANK"

    def test_env_the_user_set_is_kept_and_not_duplicated(self) -> None:
        pod = make_pod("p").group("hvd").obj()
        pod["spec"]["containers"][0]["env"] = [{"name": "VC_TASK_NAME", "value": "mine"}]
        env = wire(pod)["spec"]["containers"][0]["env"]
        assert [item for item in env if item["name"] == "VC_TASK_NAME"] == [
            {"name": "VC_TASK_NAME", "value": "mine"}
        ]

    def test_a_hostname_and_subdomain_the_user_set_are_kept(self) -> None:
        pod = make_pod("p").group("hvd").obj()
        pod["spec"].update(hostname="mine", subdomain="my-svc")
        wired = wire(pod)
        assert (wired["spec"]["hostname"], wired["spec"]["subdomain"]) == ("mine", "my-svc")

    def test_a_statefulset_identity_is_replaced_so_the_host_lists_resolve(self) -> None:
        pod = make_pod("train-1").group("hvd").label(STATEFULSET_POD_INDEX_LABEL, "1").obj()
        pod["metadata"]["ownerReferences"] = [
            {"kind": "StatefulSet", "name": "train", "controller": True, "apiVersion": "apps/v1"}
        ]
        pod["spec"].update(hostname="train-1", subdomain="train-headless")
        wired = wire(pod, index=1)
        assert (wired["spec"]["hostname"], wired["spec"]["subdomain"]) == ("hvd-worker-1", "hvd")

    def test_an_indexed_job_hostname_is_replaced_and_its_subdomain_kept(self) -> None:
        builder = make_pod("ds-2-abcde").group("ds")
        pod = builder.annotation(JOB_COMPLETION_INDEX_ANNOTATION, "2").obj()
        pod["metadata"]["ownerReferences"] = [
            {"kind": "Job", "name": "ds", "controller": True, "apiVersion": "batch/v1"}
        ]
        pod["spec"]["hostname"] = "ds-2"
        wired = wire(pod, index=2)
        assert (wired["spec"]["hostname"], wired["spec"]["subdomain"]) == ("ds-worker-2", "ds")

    def test_a_pod_that_joined_by_another_source_gets_the_group_label_for_the_service(
        self,
    ) -> None:
        pod = make_pod("p").annotation(VOLCANO_GROUP_ANNOTATION, "hvd").obj()
        pod["metadata"].pop("labels")
        assert wire(pod)["metadata"]["labels"] == {GROUP_LABEL: "hvd"}

    def test_the_ssh_path_annotation_moves_the_secret_mount(self) -> None:
        pod = make_pod("p").group("hvd").annotation(SSH_PATH_ANNOTATION, "/home/mpi/.ssh").obj()
        mounts = wire(pod)["spec"]["containers"][0]["volumeMounts"]
        assert mounts[1] == {
            "name": "gang-ssh",
            "mountPath": "/home/mpi/.ssh",
            "subPath": ".ssh",
            "readOnly": True,
        }
        assert wire(pod)["spec"]["volumes"][1]["secret"]["items"] == SSH_ITEMS

    def test_a_pod_without_annotations_gets_the_whole_map_added(self) -> None:
        pod = make_pod("p").group("hvd").obj()
        pod["metadata"].pop("annotations")
        membership = membership_of(pod)
        ops = render_pod_patch(pod, membership, 0)
        assert {
            "op": "add",
            "path": "/metadata/annotations",
            "value": {TASK_INDEX_ANNOTATION: "0"},
        } in ops

    def test_paths_with_slashes_are_escaped(self) -> None:
        pod = make_pod("p").group("hvd").annotation("other", "x").obj()
        ops = render_pod_patch(pod, membership_of(pod), 0)
        assert {
            "op": "add",
            "path": "/metadata/annotations/gang-extender.io~1task-index",
            "value": "0",
        } in ops


class TestInTheWay:
    def test_a_user_volume_with_our_name_is_denied(self) -> None:
        pod = make_pod("p").group("hvd").obj()
        pod["spec"]["volumes"] = [{"name": "gang-ssh", "emptyDir": {}}]
        with pytest.raises(AdmissionDenied, match="already has a volume named 'gang-ssh'"):
            render_pod_patch(pod, membership_of(pod), 0)

    def test_a_user_mount_at_the_ssh_path_is_denied_with_the_way_out(self) -> None:
        pod = make_pod("p").group("hvd").obj()
        pod["spec"]["volumes"] = [{"name": "keys", "emptyDir": {}}]
        pod["spec"]["containers"][0]["volumeMounts"] = [
            {"name": "keys", "mountPath": "/root/.ssh/"}
        ]
        with pytest.raises(AdmissionDenied) as denied:
            render_pod_patch(pod, membership_of(pod), 0)
        assert str(denied.value) == (
            "container 'main' already mounts volume 'keys' at /root/.ssh, where gang-extender "
            "mounts the group's gang-ssh volume; remove that mount or set annotation "
            "gang-extender.io/ssh-path to another directory"
        )

    @pytest.mark.parametrize("sub_path", [None, ".ssh"])
    def test_a_user_mount_at_a_custom_ssh_path_is_denied_too(self, sub_path: str | None) -> None:
        pod = make_pod("p").group("hvd").annotation(SSH_PATH_ANNOTATION, "/home/mpi/.ssh").obj()
        pod["spec"]["volumes"] = [{"name": "keys", "secret": {"secretName": "mine"}}]
        mount = {"name": "keys", "mountPath": "/home/mpi/.ssh"}
        if sub_path is not None:
            mount["subPath"] = sub_path
        pod["spec"]["initContainers"] = [{"name": "setup", "image": "x", "volumeMounts": [mount]}]
        with pytest.raises(AdmissionDenied) as denied:
            render_pod_patch(pod, membership_of(pod), 0)
        assert str(denied.value).startswith(
            "container 'setup' already mounts volume 'keys' at /home/mpi/.ssh, where "
            "gang-extender mounts the group's gang-ssh volume; remove that mount or set "
            "annotation gang-extender.io/ssh-path"
        )


class TestReinvocation:
    @pytest.mark.parametrize("ssh_path", [None, "/home/mpi/.ssh"])
    def test_a_pod_mutated_twice_stays_the_same(self, ssh_path: str | None) -> None:
        pod = make_pod("p").group("hvd")
        if ssh_path is not None:
            pod = pod.annotation(SSH_PATH_ANNOTATION, ssh_path)
        wired = wire(with_init_container(pod.obj()), index=2)
        again = apply_patch(copy.deepcopy(wired), render_pod_patch(wired, membership_of(wired), 2))
        assert again == wired
        mounts = [m for c in wired["spec"]["containers"] for m in c["volumeMounts"]]
        assert [m["mountPath"] for m in mounts if m["name"] == "gang-ssh"] == [
            ssh_path or "/root/.ssh"
        ]

    def test_a_wired_pod_gets_an_empty_patch(self) -> None:
        pod = with_init_container(make_pod("p").group("hvd").obj())
        wired = wire(pod, index=3)
        # The API server defaults the volume sources it stored before reinvoking us.
        wired["spec"]["volumes"][0]["configMap"]["defaultMode"] = 0o644
        assert render_pod_patch(wired, membership_of(wired), 3) == []

    def test_the_index_annotation_makes_reinvocation_keep_the_index(self) -> None:
        wired = wire(make_pod("p").group("hvd").obj(), index=5)
        assert membership_of(wired).explicit_index == 5

    def test_a_container_added_by_a_later_webhook_is_wired_on_reinvocation(self) -> None:
        wired = wire(make_pod("p").group("hvd").obj())
        wired["spec"]["containers"].append({"name": "injected", "image": "proxy"})
        again = apply_patch(wired, render_pod_patch(wired, membership_of(wired), 0))
        assert env_names(again["spec"]["containers"][1])[0] == "VC_TASK_INDEX"
        assert env_names(again["spec"]["containers"][0]).count("VC_TASK_INDEX") == 1


@st.composite
def pods(draw: st.DrawFn) -> dict[str, Any]:
    """Pods of group 'g' with or without env, mounts, volumes, labels and annotations."""
    pod = make_pod("p").group("g").obj()
    if draw(st.booleans()):
        pod["metadata"].pop("annotations")
    if draw(st.booleans()):
        pod["metadata"]["annotations"] = {"a/b": "c"}
    if draw(st.booleans()):
        pod["metadata"]["annotations"] = {SSH_PATH_ANNOTATION: "/home/mpi/.ssh"}
    if draw(st.booleans()):
        pod["spec"]["volumes"] = [{"name": "data", "emptyDir": {}}]
    containers = []
    for position in range(draw(st.integers(1, 3))):
        container: dict[str, Any] = {"name": f"c{position}", "image": "busybox"}
        if draw(st.booleans()):
            container["env"] = [{"name": "USER_VAR", "value": "1"}]
        if draw(st.booleans()):
            container["env"] = [{"name": "VC_TASK_INDEX", "value": "user"}]
        if draw(st.booleans()):
            container["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
        containers.append(container)
    pod["spec"]["containers"] = containers
    if draw(st.booleans()):
        pod["spec"]["initContainers"] = [{"name": "init", "image": "busybox", "env": []}]
    return pod


@settings(max_examples=200)
@given(pod=pods(), index=st.integers(0, 99))
def test_any_pod_patch_applies_wires_every_container_and_is_idempotent(
    pod: dict[str, Any], index: int
) -> None:
    wired = wire(pod, index)
    for container in wired["spec"]["containers"] + wired["spec"].get("initContainers", []):
        assert set(env_names(container)) >= {"VC_TASK_INDEX", "VK_TASK_INDEX", *CONFIGMAP_ENV}
        assert len(env_names(container)) == len(set(env_names(container)))
        assert {m["name"] for m in container["volumeMounts"]} >= {"gang-svc", "gang-ssh"}
    assert wired["metadata"]["annotations"][TASK_INDEX_ANNOTATION] == str(index)
    assert render_pod_patch(wired, membership_of(wired), index) == []
    # What the user had is still there, unchanged.
    for before, after in zip(pod["spec"]["containers"], wired["spec"]["containers"], strict=True):
        for item in before.get("env") or []:
            assert item in after["env"]


class TestResponses:
    def test_allowed_with_a_base64_json_patch(self) -> None:
        ops: list[JsonPatchOp] = [{"op": "add", "path": "/spec/hostname", "value": "h"}]
        review = allowed_response("u", copy.deepcopy(ops))
        response = review["response"]
        assert (review["apiVersion"], review["kind"]) == ("admission.k8s.io/v1", "AdmissionReview")
        assert response["patchType"] == "JSONPatch"
        assert json.loads(base64.b64decode(response["patch"])) == ops

    def test_allowed_without_changes_carries_no_patch(self) -> None:
        assert allowed_response("u", [])["response"] == {"uid": "u", "allowed": True}

    def test_denied_carries_the_message(self) -> None:
        assert denied_response("u", "fix it")["response"] == {
            "uid": "u",
            "allowed": False,
            "status": {"code": 400, "reason": "BadRequest", "message": "fix it"},
        }
