"""Ready hosts and launchers that wait for their workers, on the real control plane.

ConfigMap `<group>-svc` gets `ready.hostfile` (the Ready members) and the scripts
beside it; the controller keeps the list in step as members become Ready (kwok,
playing the kubelet, marks a placed pod Ready), stop being Ready (the test sets
the Ready condition False through the status subresource, as a failing readiness
probe would) and go away. kwok runs no containers, so the scripts run here,
locally, on the ConfigMap's data as the API server holds it; what they do in every
case is tests/unit/test_injection_ready.py.
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from extender.domain.objects.membership import TASK_INDEX_ANNOTATION
from extender.kube.ownership import SEAL_ANNOTATION
from extender.kube.rawapi import KubeError, RawApi, path_of
from extender.kube.writers import podgroup_path
from tests.e2e.gang_fixtures import (
    SETTLE_SECONDS,
    bound,
    create,
    gang_pod,
    list_pods,
    podgroup,
    wait_until,
)

# Horovod's parser of a discovery script's output line: `hostname[:slots]`.
HOST_SLOTS = re.compile(r"^(?P<host>[a-z0-9]([-a-z0-9.]*[a-z0-9])?):(?P<slots>[1-9][0-9]*)$")


def pod_path(namespace: str, name: str, *sub: str) -> str:
    return path_of("api", "v1", "namespaces", namespace, "pods", name, *sub)


def configmap_data(raw: RawApi, namespace: str, name: str) -> dict[str, str]:
    try:
        found = raw.call("GET", path_of("api", "v1", "namespaces", namespace, "configmaps", name))
    except KubeError as err:
        if err.status == 404:
            return {}
        raise
    return dict(found.get("data") or {})


def ready_hosts_become(raw: RawApi, namespace: str, group: str, hosts: list[str]) -> dict[str, str]:
    """The ConfigMap's data once its ready.hostfile names exactly `hosts`, in order."""

    def listed() -> dict[str, str] | None:
        data = configmap_data(raw, namespace, f"{group}-svc")
        lines = data.get("ready.hostfile", "").splitlines()
        return data if [line.split()[0] for line in lines] == hosts else None

    found: dict[str, str] = wait_until(
        listed, timeout=SETTLE_SECONDS, what=f"ready.hostfile of {group} listing {hosts}"
    )
    return found


def set_ready(raw: RawApi, namespace: str, name: str, *, ready: bool) -> None:
    """Set the pod's Ready condition through the status subresource, as the kubelet does."""
    raw.call(
        "PATCH",
        pod_path(namespace, name, "status"),
        body={"status": {"conditions": [{"type": "Ready", "status": str(ready)}]}},
        content_type="application/strategic-merge-patch+json",
    )


def is_ready(pod: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def run_script(folder: Path, data: dict[str, str], script: str, *args: str, **env: str) -> Any:
    """Lay the ConfigMap's data out as its volume would, and run one of its scripts."""
    for key, text in data.items():
        (folder / key).write_text(text)
    return subprocess.run(
        ["/bin/sh", str(folder / script), *args],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", **env},
        timeout=60,
        check=False,
    )


def test_an_elastic_groups_ready_hostfile_follows_its_members(
    gang_stack: Any, raw: RawApi, injected_namespace: str, gpu_nodes: Any, tmp_path: Path
) -> None:
    """minMember 2 with 4 workers: every Ready worker is listed, beyond the minimum too;
    one that stops being Ready leaves the list, and so does one that is deleted."""
    namespace = injected_namespace
    pool = gpu_nodes(2, gpus=4)
    create(raw, namespace, podgroup("elastic", 2, scheduleTimeoutSeconds=120))
    for i in range(4):
        pod = gang_pod(
            f"elastic-{i}", "elastic", task="worker", gpus=2, node_selector=pool.node_selector
        )
        pod["metadata"]["annotations"][TASK_INDEX_ANNOTATION] = str(i)
        create(raw, namespace, pod)
    wait_until(
        lambda: len([p for p in list_pods(raw, namespace) if is_ready(p)]) == 4,
        timeout=120,
        what="kwok marking the 4 placed workers Ready",
    )
    every = [f"elastic-worker-{i}.elastic" for i in range(4)]
    data = ready_hosts_become(raw, namespace, "elastic", every)
    assert data["ready.hostfile"] == "".join(f"{host} slots=2\n" for host in every)

    # The discovery script's output, on this data, is what Horovod parses.
    done = run_script(tmp_path, data, "discover_hosts.sh")
    assert (done.returncode, done.stderr) == (0, "")
    parsed = [HOST_SLOTS.match(line) for line in done.stdout.splitlines()]
    assert all(parsed), done.stdout
    assert [(m["host"], int(m["slots"])) for m in parsed if m] == [(h, 2) for h in every]

    set_ready(raw, namespace, "elastic-1", ready=False)
    ready_hosts_become(raw, namespace, "elastic", [every[0], every[2], every[3]])

    raw.call("DELETE", pod_path(namespace, "elastic-3"), query={"gracePeriodSeconds": 0})
    data = ready_hosts_become(raw, namespace, "elastic", [every[0], every[2]])
    done = run_script(tmp_path, data, "discover_hosts.sh")
    assert done.stdout == f"{every[0]}:2\n{every[2]}:2\n"

    set_ready(raw, namespace, "elastic-1", ready=True)
    ready_hosts_become(raw, namespace, "elastic", [every[0], every[1], every[2]])

    # The last members go: nobody is Ready, and the list says so.
    for name in ("elastic-0", "elastic-1", "elastic-2"):
        raw.call("DELETE", pod_path(namespace, name), query={"gracePeriodSeconds": 0})
    data = ready_hosts_become(raw, namespace, "elastic", [])
    assert data["ready.hostfile"] == ""
    assert data["hostfile"], "the planned host lists stay for the members' replacements"


def test_a_launcher_declared_to_wait_for_its_workers_gets_the_wait_and_is_placed_with_them(
    gang_stack: Any, raw: RawApi, injected_namespace: str, gpu_nodes: Any, tmp_path: Path
) -> None:
    """The master declares gang-extender.io/depends-on: worker. It carries the
    wait-for-tasks init container; the gang is still bound whole; once the workers are
    Ready the ConfigMap's own wait script passes, and before, with the master alone
    counted, it gives up."""
    namespace = injected_namespace
    pool = gpu_nodes(1, gpus=4)
    create(
        raw,
        namespace,
        podgroup("hvd", 3, minTaskMember={"master": 1, "worker": 2}, scheduleTimeoutSeconds=120),
    )
    master = gang_pod(
        "hvd-master",
        "hvd",
        task="master",
        node_selector=pool.node_selector,
        annotations={
            "gang-extender.io/depends-on": "worker",
            "gang-extender.io/depends-on-timeout": "120",
        },
    )
    created = create(raw, namespace, master)
    [wait] = created["spec"]["initContainers"]
    assert wait["name"] == "wait-for-tasks"
    assert wait["image"] == created["spec"]["containers"][0]["image"]
    assert wait["command"] == ["sh", "/etc/volcano/wait_for_tasks.sh", "worker"]
    assert {"name": "GANG_WAIT_TIMEOUT_SECONDS", "value": "120"} in wait["env"]
    assert {m["mountPath"] for m in wait["volumeMounts"]} >= {"/etc/volcano"}
    svc = next(v for v in created["spec"]["volumes"] if v["name"] == "gang-svc")
    assert svc["configMap"]["defaultMode"] == 0o755

    for i in range(2):
        create(
            raw,
            namespace,
            gang_pod(f"hvd-w{i}", "hvd", task="worker", gpus=2, node_selector=pool.node_selector),
        )
    wait_until(
        lambda: len(bound(list_pods(raw, namespace))) == 3, timeout=120, what="the gang bound"
    )
    hosts = ["hvd-master-0.hvd", "hvd-worker-0.hvd", "hvd-worker-1.hvd"]
    data = ready_hosts_become(raw, namespace, "hvd", hosts)
    done = run_script(tmp_path, data, "wait_for_tasks.sh", "worker", GANG_WAIT_TIMEOUT_SECONDS="0")
    assert done.returncode == 0, done.stderr

    for i in range(2):
        set_ready(raw, namespace, f"hvd-w{i}", ready=False)
    data = ready_hosts_become(raw, namespace, "hvd", hosts[:1])
    done = run_script(tmp_path, data, "wait_for_tasks.sh", "worker", GANG_WAIT_TIMEOUT_SECONDS="0")
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == (
        "wait-for-tasks: gave up after 0s: group hvd has too few Ready members "
        "(task ready/needed): worker 0/2"
    )


def test_a_task_declared_to_wait_for_itself_is_refused(
    gang_stack: Any, raw: RawApi, injected_namespace: str
) -> None:
    pod = gang_pod(
        "self-0", "self", task="worker", annotations={"gang-extender.io/depends-on": "worker"}
    )
    with pytest.raises(KubeError) as refused:
        create(raw, injected_namespace, pod)
    assert refused.value.status == 400
    assert "task 'worker' cannot wait for itself" in refused.value.message


EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "horovod" / "elastic-horovod.yaml"


def test_the_elastic_horovod_example_discovers_its_ready_workers(
    gang_stack: Any, raw: RawApi, injected_namespace: str, gpu_nodes: Any, tmp_path: Path
) -> None:
    """examples/horovod/elastic-horovod.yaml as a user applies it: the launcher waits for
    2 Ready workers, and its discovery script lists the 4 workers once they are Ready."""
    namespace = injected_namespace
    gpu_nodes(1, gpus=4)
    paths = {
        "PodGroup": podgroup_path(namespace),
        "Deployment": path_of("apis", "apps", "v1", "namespaces", namespace, "deployments"),
        "Pod": path_of("api", "v1", "namespaces", namespace, "pods"),
    }
    for doc in yaml.safe_load_all(EXAMPLE.read_text()):
        raw.call("POST", paths[doc["kind"]], body=doc)
    launcher = raw.call("GET", pod_path(namespace, "elastic-hvd-launcher"))
    [wait] = launcher["spec"]["initContainers"]
    assert wait["command"] == ["sh", "/etc/volcano/wait_for_tasks.sh", "worker=2"]
    assert {"name": "GANG_WAIT_TIMEOUT_SECONDS", "value": "600"} in wait["env"]
    [main] = launcher["spec"]["containers"]
    script = next(a for a in main["command"] if a.startswith("--host-discovery-script="))
    assert script == "--host-discovery-script=/etc/volcano/discover_hosts.sh"

    workers = [f"elastic-hvd-worker-{i}.elastic-hvd" for i in range(4)]
    data = ready_hosts_become(
        raw, namespace, "elastic-hvd", ["elastic-hvd-launcher-0.elastic-hvd", *workers]
    )
    env = {e["name"]: e["value"] for e in main["env"] if "value" in e}
    done = run_script(tmp_path, data, "discover_hosts.sh", **env)
    assert done.stdout.splitlines() == [f"{host}:1" for host in workers]
    done = run_script(
        tmp_path, data, "wait_for_tasks.sh", "worker=2", GANG_WAIT_TIMEOUT_SECONDS="0"
    )
    assert done.returncode == 0, done.stderr


def configmap_versions_until(
    raw: RawApi, namespace: str, name: str, since: str, done: Any
) -> list[dict[str, Any]]:
    """Every version of the ConfigMap written after resourceVersion `since`, up to the
    first for which done(data) holds (a watch from `since` replays them in order)."""
    path = path_of("api", "v1", "namespaces", namespace, "configmaps")
    seen: list[dict[str, Any]] = []
    version = since
    deadline = time.monotonic() + SETTLE_SECONDS
    while time.monotonic() < deadline:
        query = {
            "watch": "true",
            "resourceVersion": version,
            "fieldSelector": f"metadata.name={name}",
            "timeoutSeconds": 5,
        }
        for event in raw.stream(path, query=query, read_timeout=10):
            obj = event.get("object") or {}
            if event.get("type") == "ERROR":
                # A loaded API server's watch cache may lag the read: watch again.
                time.sleep(0.5)
                break
            if event.get("type") == "BOOKMARK":
                continue
            version = obj["metadata"]["resourceVersion"]
            seen.append(obj)
            if done(obj.get("data") or {}):
                return seen
    pytest.fail(f"ConfigMap {name} never reached the awaited content; versions seen: {seen!r}")


def sealed(obj: dict[str, Any]) -> dict[str, Any] | None:
    """`obj` once the controller's seal is on it."""
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    return obj if SEAL_ANNOTATION in annotations else None


def test_one_configmap_write_per_readiness_change_and_none_for_other_updates(
    gang_stack: Any, raw: RawApi, injected_namespace: str, gpu_nodes: Any
) -> None:
    """Members' other updates (a label here; kwok's status reports) leave the ConfigMap
    alone; a member turning un-Ready rewrites it once."""
    namespace = injected_namespace
    pool = gpu_nodes(1, gpus=4)
    create(raw, namespace, podgroup("steady", 2, scheduleTimeoutSeconds=120))
    for i in range(2):
        create(raw, namespace, gang_pod(f"steady-{i}", "steady", node_selector=pool.node_selector))
    hosts = ["steady-worker-0.steady", "steady-worker-1.steady"]
    ready_hosts_become(raw, namespace, "steady", hosts)
    # The controller creates the ConfigMap and then seals it (a second write: the seal
    # names the uid the create returned); count writes from the sealed version on.
    found = wait_until(
        lambda: sealed(
            raw.call(
                "GET", path_of("api", "v1", "namespaces", namespace, "configmaps", "steady-svc")
            )
        ),
        timeout=SETTLE_SECONDS,
        what="ConfigMap steady-svc sealed",
    )
    since = found["metadata"]["resourceVersion"]

    for i in range(2):  # new pod resourceVersions: the controller re-renders the group
        raw.call(
            "PATCH",
            pod_path(namespace, f"steady-{i}"),
            body={"metadata": {"labels": {"touched": "yes"}}},
            content_type="application/merge-patch+json",
        )
    set_ready(raw, namespace, "steady-1", ready=False)
    versions = configmap_versions_until(
        raw,
        namespace,
        "steady-svc",
        since,
        lambda data: data.get("ready.hostfile") == f"{hosts[0]} slots=1\n",
    )
    assert len(versions) == 1, [v["data"].get("ready.hostfile") for v in versions]
