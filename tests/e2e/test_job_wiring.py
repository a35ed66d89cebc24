"""Job wiring on the real control plane: the API server calls the webhook over HTTPS.

Issue 3's Show list, in order: the seed Horovod job (master Pod + worker
Deployment), its SSH Secret, a DeepSpeed-style Indexed Job, 20 concurrent
creates, the namespace opt-in and dry run, every denial, and garbage collection.
"""

from __future__ import annotations

import base64
import copy
import hashlib
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization

from extender.devcluster.stack import GangStack
from extender.domain.objects.membership import (
    COSCHEDULING_GROUP_LABEL,
    GROUP_LABEL,
    MIN_AVAILABLE_ANNOTATION,
    SSH_PORT_ANNOTATION,
    TASK_INDEX_ANNOTATION,
    TASK_LABEL,
    TASKS_ANNOTATION,
)
from extender.kube.rawapi import KubeError, RawApi, path_of
from tests.e2e.gang_fixtures import (
    gang_pod,
    get_or_none,
    get_podgroup,
    hold_unready,
    podgroup,
    wait_until,
)

WIRED_ENV = {
    "VC_TASK_INDEX",
    "VC_WORKER_HOSTS",
    "VC_WORKER_NUM",
    "GANG_HOROVOD_HOSTS",
    "GANG_NUM_SLOTS",
}


# ---- API helpers (raw JSON, as the service itself speaks) ----


def core_path(namespace: str, plural: str, name: str | None = None) -> str:
    parts = ["api", "v1", "namespaces", namespace, plural]
    return path_of(*parts, *([name] if name else []))


def group_path(api: str, namespace: str, plural: str, name: str | None = None) -> str:
    parts = ["apis", *api.split("/"), "namespaces", namespace, plural]
    return path_of(*parts, *([name] if name else []))


def create_pod(raw: RawApi, namespace: str, pod: dict[str, Any]) -> dict[str, Any]:
    return raw.call("POST", core_path(namespace, "pods"), body=pod)


def group_pods(raw: RawApi, namespace: str, group: str) -> list[dict[str, Any]]:
    query = {"labelSelector": f"{GROUP_LABEL}={group}"}
    items: list[dict[str, Any]] = raw.call("GET", core_path(namespace, "pods"), query=query)[
        "items"
    ]
    return items


def index_of(pod: dict[str, Any]) -> int:
    return int(pod["metadata"]["annotations"][TASK_INDEX_ANNOTATION])


def env_names(container: dict[str, Any]) -> set[str]:
    return {item["name"] for item in container.get("env") or []}


def all_containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    spec = pod["spec"]
    return list(spec.get("initContainers") or []) + list(spec["containers"])


def wait_for_configmap(
    raw: RawApi, namespace: str, name: str, *, key: str, lines: int
) -> dict[str, str]:
    """The ConfigMap's data once `key` lists `lines` lines (the controller catches up)."""

    def ready() -> dict[str, str] | None:
        configmap = get_or_none(raw, core_path(namespace, "configmaps", name))
        data = (configmap or {}).get("data") or {}
        if len(data.get(key, "").splitlines()) == lines:
            return dict(data)
        return None

    result: dict[str, str] = wait_until(ready, what=f"ConfigMap {name} with {lines} in {key}")
    return result


def secret_data(raw: RawApi, namespace: str, name: str) -> dict[str, str]:
    secret = wait_until(
        lambda: get_or_none(raw, core_path(namespace, "secrets", name)), what=f"Secret {name}"
    )
    return {key: base64.b64decode(value).decode() for key, value in secret["data"].items()}


def horovod_member(name: str, task: str) -> dict[str, Any]:
    pod = gang_pod(
        name,
        "hvd",
        task=task,
        annotations={MIN_AVAILABLE_ANNOTATION: "4", TASKS_ANNOTATION: "master=1,worker=3"},
    )
    pod["spec"]["restartPolicy"] = "OnFailure"
    return pod


def denied(raw: RawApi, namespace: str, pod: dict[str, Any]) -> str:
    with pytest.raises(KubeError) as raised:
        create_pod(raw, namespace, pod)
    assert raised.value.status == 400, raised.value
    return raised.value.message


# ---- 1. the seed Horovod job: master Pod + 3-replica worker Deployment ----


@pytest.fixture
def horovod(gang_stack: GangStack, raw: RawApi, injected_namespace: str) -> list[dict[str, Any]]:
    """The Horovod job of seed 000 as a master Pod and a worker Deployment; its 4 pods."""
    namespace = injected_namespace
    master = horovod_member("hvd-master", "master")
    master["spec"]["initContainers"] = [
        {
            "name": "wait-for-workers",
            "image": "busybox",
            "command": ["sh", "-c", "until nslookup hvd-worker-2.hvd; do sleep 1; done"],
        }
    ]
    create_pod(raw, namespace, master)
    template = horovod_member("", "worker")
    template["metadata"].pop("name")
    template["metadata"]["labels"]["app"] = "hvd-worker"
    template["spec"]["restartPolicy"] = "Always"  # the only policy a Deployment allows
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "hvd-worker"},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "hvd-worker"}},
            "template": template,
        },
    }
    raw.call("POST", group_path("apps/v1", namespace, "deployments"), body=deployment)
    pods: list[dict[str, Any]] = wait_until(
        lambda: len(found := group_pods(raw, namespace, "hvd")) == 4 and found,
        what="the 4 Horovod pods",
    )
    return pods


def test_horovod_members_get_their_hostname_subdomain_and_distinct_worker_indexes(
    horovod: list[dict[str, Any]],
) -> None:
    by_task: dict[str, list[dict[str, Any]]] = {}
    for pod in horovod:
        by_task.setdefault(pod["metadata"]["labels"][TASK_LABEL], []).append(pod)
    assert sorted(index_of(pod) for pod in by_task["worker"]) == [0, 1, 2]
    assert [index_of(pod) for pod in by_task["master"]] == [0]
    for pod in horovod:
        task = pod["metadata"]["labels"][TASK_LABEL]
        assert pod["spec"]["hostname"] == f"hvd-{task}-{index_of(pod)}"
        assert pod["spec"]["subdomain"] == "hvd"


def test_horovod_configmap_lists_the_three_workers_and_one_slot_per_member(
    horovod: list[dict[str, Any]], raw: RawApi, injected_namespace: str
) -> None:
    data = wait_for_configmap(raw, injected_namespace, "hvd-svc", key="worker.host", lines=3)
    assert data["worker.host"].splitlines() == [f"hvd-worker-{i}.hvd" for i in range(3)]
    assert data["master.host"] == "hvd-master-0.hvd"
    hostfile = data["hostfile"].splitlines()
    assert len(hostfile) == 4 and all(line.endswith(" slots=1") for line in hostfile)
    assert data["VC_WORKER_NUM"] == "3"
    assert data["GANG_NUM_SLOTS"] == "4"


def test_horovod_env_is_in_every_container_and_init_container(
    horovod: list[dict[str, Any]],
) -> None:
    containers = [c for pod in horovod for c in all_containers(pod)]
    assert len(containers) == 5  # 4 main containers + the master's init container
    for container in containers:
        assert env_names(container) >= WIRED_ENV, container["name"]
        mounts = {m["mountPath"] for m in container["volumeMounts"]}
        assert {"/etc/volcano", "/root/.ssh"} <= mounts


def test_horovod_headless_service_selects_the_group(
    horovod: list[dict[str, Any]], raw: RawApi, injected_namespace: str
) -> None:
    service = wait_until(
        lambda: get_or_none(raw, core_path(injected_namespace, "services", "hvd")),
        what="Service hvd",
    )
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"] == {GROUP_LABEL: "hvd"}
    assert service["spec"]["publishNotReadyAddresses"] is True


# ---- 2. the SSH Secret ----


def test_ssh_secret_key_pair_matches_and_config_matches_every_member_with_the_port(
    horovod: list[dict[str, Any]], raw: RawApi, injected_namespace: str
) -> None:
    wait_for_configmap(raw, injected_namespace, "hvd-svc", key="worker.host", lines=3)
    data = secret_data(raw, injected_namespace, "hvd-ssh")
    key = serialization.load_ssh_private_key(data["id_rsa"].encode(), password=None)
    public = (
        key.public_key()
        .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        .decode()
    )
    assert data["id_rsa.pub"].split()[:2] == public.split()
    assert data["authorized_keys"].split()[:2] == public.split()
    # Every member by pattern (the Secret does not change with the members).
    assert "Host hvd-*.hvd hvd-*.hvd.*\n  Port 22\n" in data["config"]
    assert "Host hvd-* !*.*\n  HostName %h.hvd\n  Port 22\n" in data["config"]
    assert "StrictHostKeyChecking no" in data["config"]


def test_the_ssh_secret_is_mounted_as_its_ssh_directory(
    horovod: list[dict[str, Any]],
) -> None:
    # The directory inside the volume (0755 on a node), not the volume's 1777 root.
    for pod in horovod:
        volume = next(v for v in pod["spec"]["volumes"] if v["name"] == "gang-ssh")
        assert volume["secret"]["secretName"] == "hvd-ssh"
        assert {item["path"] for item in volume["secret"]["items"]} == {
            ".ssh/id_rsa",
            ".ssh/id_rsa.pub",
            ".ssh/authorized_keys",
            ".ssh/config",
        }
        for container in all_containers(pod):
            mount = next(m for m in container["volumeMounts"] if m["name"] == "gang-ssh")
            assert (mount["mountPath"], mount["subPath"]) == ("/root/.ssh", ".ssh")


def test_two_groups_get_different_keys_and_the_ssh_port_annotation_is_honoured(
    gang_stack: GangStack, raw: RawApi, injected_namespace: str
) -> None:
    for group in ("alpha", "beta"):
        pod = gang_pod(
            f"{group}-0",
            group,
            annotations={MIN_AVAILABLE_ANNOTATION: "1", SSH_PORT_ANNOTATION: "2222"},
        )
        create_pod(raw, injected_namespace, pod)
    alpha = secret_data(raw, injected_namespace, "alpha-ssh")
    beta = secret_data(raw, injected_namespace, "beta-ssh")
    # Compared by fingerprint, held in plain names: on failure pytest prints the
    # compared values (and the arguments of calls inside an assert), never a private key.
    alpha_key, beta_key = fingerprint(alpha["id_rsa"]), fingerprint(beta["id_rsa"])
    assert alpha_key != beta_key, "two groups got the same ssh private key"
    assert "Host alpha-*.alpha alpha-*.alpha.*\n  Port 2222\n" in alpha["config"]
    assert "Host beta-* !*.*\n  HostName %h.beta\n  Port 2222\n" in beta["config"]


def fingerprint(secret: str) -> str:
    """SHA-256 of a secret: compares like it, and is safe to print in a failure."""
    return "SHA256:" + hashlib.sha256(secret.encode()).hexdigest()


# ---- 3. an Indexed Job, DeepSpeed style: 4 workers x 2 GPUs ----


def test_indexed_job_members_take_the_job_index_and_two_slots_each(
    gang_stack: GangStack, raw: RawApi, injected_namespace: str
) -> None:
    # Created gated and let go with a pod IP: KWOK marks a Job's pod Succeeded the moment
    # it runs, and a group whose members all finished is not wired (nobody would read it).
    # Under load the pods finished before the service made the group's PodGroup, and the
    # ConfigMap never came (the order-dependent failure of issue 30).
    template = gang_pod("", "ds", gpus=2, annotations={MIN_AVAILABLE_ANNOTATION: "4"}, gated=True)
    template["metadata"].pop("name")
    template["spec"]["restartPolicy"] = "Never"
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "ds"},
        "spec": {
            "completionMode": "Indexed",
            "completions": 4,
            "parallelism": 4,
            "template": template,
        },
    }
    raw.call("POST", group_path("batch/v1", injected_namespace, "jobs"), body=job)
    pods = wait_until(
        lambda: len(found := group_pods(raw, injected_namespace, "ds")) == 4 and found,
        what="the 4 Indexed Job pods",
    )
    for pod in pods:
        hold_unready(raw, injected_namespace, pod["metadata"]["name"])
    for pod in pods:
        completion = pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]
        assert index_of(pod) == int(completion)
        assert pod["spec"]["hostname"] == f"ds-worker-{completion}"
        assert pod["spec"]["subdomain"] == "ds"
    data = wait_for_configmap(raw, injected_namespace, "ds-svc", key="hostfile", lines=4)
    assert data["hostfile"].splitlines() == [f"ds-worker-{i}.ds slots=2" for i in range(4)]
    assert data["GANG_NUM_SLOTS"] == "8"


# ---- 4. concurrency ----


def test_twenty_pods_of_one_task_created_at_once_get_twenty_distinct_indexes(
    gang_stack: GangStack, raw: RawApi, injected_namespace: str
) -> None:
    def create(position: int) -> dict[str, Any]:
        pod = gang_pod("", "burst", annotations={MIN_AVAILABLE_ANNOTATION: "20"})
        pod["metadata"].pop("name")
        pod["metadata"]["generateName"] = f"burst-{position}-"
        return create_pod(raw, injected_namespace, pod)

    with ThreadPoolExecutor(max_workers=20) as pool:
        created = list(pool.map(create, range(20)))
    assert sorted(index_of(pod) for pod in created) == list(range(20))
    assert len({pod["spec"]["hostname"] for pod in created}) == 20


# ---- 5. opt-in namespaces and dry run ----


def test_a_pod_in_a_namespace_without_the_label_is_untouched(
    gang_stack: GangStack, raw: RawApi, namespace: str
) -> None:
    created = create_pod(raw, namespace, gang_pod("p", "plain-ns"))
    assert "hostname" not in created["spec"]
    assert TASK_INDEX_ANNOTATION not in (created["metadata"].get("annotations") or {})
    assert env_names(created["spec"]["containers"][0]) == set()


def test_a_dry_run_create_is_wired_in_the_answer_and_creates_nothing(
    gang_stack: GangStack, raw: RawApi, injected_namespace: str
) -> None:
    pod = gang_pod("dry", "dry", annotations={MIN_AVAILABLE_ANNOTATION: "1"})
    answer = raw.call(
        "POST", core_path(injected_namespace, "pods"), query={"dryRun": "All"}, body=pod
    )
    assert answer["spec"]["hostname"] == "dry-worker-0"
    assert get_or_none(raw, core_path(injected_namespace, "pods", "dry")) is None
    assert get_podgroup(raw, injected_namespace, "dry") is None
    # No index was kept for the dry-run pod: a real create gets 0 as well.
    real = copy.deepcopy(pod)
    real["metadata"]["name"] = "real"
    assert index_of(create_pod(raw, injected_namespace, real)) == 0


# ---- 6. bad input ----

BAD_INPUT = [
    pytest.param(
        {"task": "launcher", "annotations": {TASKS_ANNOTATION: "master=1,worker=3"}},
        "task 'launcher' is not in the layout of group 'bad'",
        id="unknown task",
    ),
    pytest.param(
        {"annotations": {TASKS_ANNOTATION: "worker=2", TASK_INDEX_ANNOTATION: "2"}},
        "task index 2 of task 'worker' is out of range",
        id="index out of range",
    ),
    pytest.param(
        {"group": "b" + "a" * 55},
        "over the 63 allowed for a hostname; shorten the group name",
        id="hostname over 63 characters",
    ),
    pytest.param(
        {"labels": {COSCHEDULING_GROUP_LABEL: "other"}},
        "pod claims two groups",
        id="two groups claimed",
    ),
    pytest.param(
        {"annotations": {MIN_AVAILABLE_ANNOTATION: "four"}},
        "is not a whole number",
        id="malformed min-available",
    ),
    pytest.param(
        {"annotations": {TASKS_ANNOTATION: "worker"}},
        "expected 'task=count,...'",
        id="malformed tasks",
    ),
]


@pytest.mark.parametrize(("change", "message"), BAD_INPUT)
def test_bad_input_is_denied_with_what_to_fix_and_nothing_is_half_created(
    gang_stack: GangStack,
    raw: RawApi,
    injected_namespace: str,
    change: dict[str, Any],
    message: str,
) -> None:
    group = change.get("group", "bad")
    pod = gang_pod(
        "bad-0",
        group,
        task=change.get("task"),
        annotations={MIN_AVAILABLE_ANNOTATION: "2", **change.get("annotations", {})},
    )
    pod["metadata"]["labels"].update(change.get("labels", {}))
    reply = denied(raw, injected_namespace, pod)
    assert 'admission webhook "pods.gang-extender.io" denied the request' in reply
    assert message in reply
    namespace = injected_namespace
    assert raw.call("GET", core_path(namespace, "pods"))["items"] == []
    for plural, name in [
        ("configmaps", f"{group}-svc"),
        ("secrets", f"{group}-ssh"),
        ("services", group),
    ]:
        assert get_or_none(raw, core_path(namespace, plural, name)) is None
    assert get_podgroup(raw, namespace, group) is None


# ---- 7. garbage collection with the group ----


def test_deleting_the_groups_pods_and_podgroup_removes_its_secret_service_and_configmap(
    gang_stack: GangStack, raw: RawApi, injected_namespace: str
) -> None:
    namespace = injected_namespace
    raw.call(
        "POST",
        group_path("scheduling.gang-extender.io/v1alpha1", namespace, "podgroups"),
        body=podgroup("gc", 2),
    )
    for position in range(2):
        create_pod(raw, namespace, gang_pod(f"gc-{position}", "gc"))
    owned = [("secrets", "gc-ssh"), ("services", "gc"), ("configmaps", "gc-svc")]
    wait_until(
        lambda: all(get_or_none(raw, core_path(namespace, p, n)) for p, n in owned),
        what="the group's Secret, Service and ConfigMap",
    )
    raw.call(
        "DELETE",
        core_path(namespace, "pods"),
        query={"labelSelector": f"{GROUP_LABEL}=gc", "gracePeriodSeconds": 0},
    )
    wait_until(lambda: not group_pods(raw, namespace, "gc"), what="the pods to go")
    raw.call(
        "DELETE", group_path("scheduling.gang-extender.io/v1alpha1", namespace, "podgroups", "gc")
    )
    wait_until(
        lambda: not any(get_or_none(raw, core_path(namespace, p, n)) for p, n in owned),
        what="the garbage collector to remove the Secret, Service and ConfigMap",
    )
