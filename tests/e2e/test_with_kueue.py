"""Kueue beside gang-extender: Kueue admits by quota, gang-extender places whole.

The real Kueue manager (hack/build-kueue.sh, run by extender/devcluster/kueue.py)
runs against the session's control plane, its webhooks limited to namespaces
labelled ``e2e.gang-extender.io/kueue=enabled``. A ClusterQueue holds 4 GPUs:

- an Indexed Job of 4 one-GPU pods with the queue label is suspended by Kueue's
  webhook, admitted, and its 4 pods are bound together by gang-extender and wired
  (hostfile ConfigMap);
- a Job of 8 one-GPU pods is over the quota: Kueue keeps it suspended, no pod is
  ever made, and ``gang-extender status`` says Kueue holds it, not gang-extender.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client as k8s

from extender.devcluster.cluster import LocalCluster, new_namespace
from extender.devcluster.kueue import QUEUE_NAME_LABEL, KueueManager, KueueUnavailable, ensure_kueue
from extender.devcluster.stack import GangStack
from extender.domain.objects.membership import INJECT_NAMESPACE_LABEL, MIN_AVAILABLE_ANNOTATION
from extender.kube.rawapi import RawApi, path_of
from tests.e2e.conftest import GpuPool
from tests.e2e.gang_fixtures import (
    bound,
    delete_namespace,
    gang_pod,
    hostfile,
    indexed_job_of,
    job_pods,
    wait_until,
)

KUEUE_NAMESPACE_LABEL = "e2e.gang-extender.io/kueue"
KUEUE_API = ("apis", "kueue.x-k8s.io", "v1beta2")


@pytest.fixture(scope="module")
def kueue(cluster: LocalCluster, gang_stack: GangStack) -> Iterator[KueueManager]:
    try:
        kueue_dir = ensure_kueue()
    except KueueUnavailable as exc:
        pytest.skip(f"Kueue is not built here ({exc}); hack/build-kueue.sh builds it")
    manager = KueueManager(cluster, kueue_dir, namespace_labels={KUEUE_NAMESPACE_LABEL: "enabled"})
    manager.start()
    try:
        yield manager
    finally:
        manager.stop()


@pytest.fixture
def queued_namespace(api: k8s.ApiClient, core: k8s.CoreV1Api, kueue: KueueManager) -> Iterator[str]:
    """A namespace wired by gang-extender and watched by Kueue."""
    name = new_namespace(
        api,
        "kueue",
        labels={INJECT_NAMESPACE_LABEL: "enabled", KUEUE_NAMESPACE_LABEL: "enabled"},
    )
    yield name
    delete_namespace(core, name)


def kueue_path(namespace: str | None, resource: str, name: str | None = None) -> str:
    scope = ("namespaces", namespace) if namespace else ()
    return path_of(*KUEUE_API, *scope, resource, *((name,) if name else ()))


@pytest.fixture
def gpu_queue(
    raw: RawApi, queued_namespace: str, gpu_nodes: Callable[..., GpuPool]
) -> Iterator[str]:
    """A ResourceFlavor on a fresh pool of 2 four-GPU nodes, a ClusterQueue of 4 GPUs, and
    a LocalQueue `gpus` in the namespace. Yields the ClusterQueue's name."""
    pool = gpu_nodes(2, gpus=4)
    flavor = f"flavor-{pool.name}"
    cluster_queue = f"cq-{pool.name}"
    raw.call(
        "POST",
        kueue_path(None, "resourceflavors"),
        body={
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {"name": flavor},
            "spec": {"nodeLabels": pool.node_selector},
        },
    )
    raw.call(
        "POST",
        kueue_path(None, "clusterqueues"),
        body={
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": cluster_queue},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                        "flavors": [
                            {
                                "name": flavor,
                                "resources": [
                                    {"name": "cpu", "nominalQuota": "16"},
                                    {"name": "memory", "nominalQuota": "64Gi"},
                                    {"name": "nvidia.com/gpu", "nominalQuota": "4"},
                                ],
                            }
                        ],
                    }
                ],
            },
        },
    )
    raw.call(
        "POST",
        kueue_path(queued_namespace, "localqueues"),
        body={
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": "gpus"},
            "spec": {"clusterQueue": cluster_queue},
        },
    )
    yield cluster_queue
    raw.call("DELETE", kueue_path(queued_namespace, "localqueues", "gpus"))
    raw.call("DELETE", kueue_path(None, "clusterqueues", cluster_queue))
    raw.call("DELETE", kueue_path(None, "resourceflavors", flavor))


def queued_gpu_job(name: str, members: int) -> dict[str, Any]:
    """An Indexed Job of `members` one-GPU gang members, in LocalQueue `gpus`."""
    template = gang_pod("", name, gpus=1, annotations={MIN_AVAILABLE_ANNOTATION: str(members)})
    template["metadata"].pop("name")
    template["spec"]["restartPolicy"] = "Never"
    job = indexed_job_of(name, completions=members, parallelism=members, template=template)
    job["metadata"]["labels"] = {QUEUE_NAME_LABEL: "gpus"}
    return job


def jobs_path(namespace: str, name: str | None = None) -> str:
    return path_of(
        "apis", "batch", "v1", "namespaces", namespace, "jobs", *((name,) if name else ())
    )


def workload_of(raw: RawApi, namespace: str, job: str) -> dict[str, Any] | None:
    for workload in raw.call("GET", kueue_path(namespace, "workloads")).get("items", []):
        owners = workload["metadata"].get("ownerReferences") or []
        if any(o.get("kind") == "Job" and o.get("name") == job for o in owners):
            return dict(workload)
    return None


def condition(obj: dict[str, Any] | None, kind: str) -> dict[str, Any]:
    for found in ((obj or {}).get("status") or {}).get("conditions") or []:
        if found.get("type") == kind:
            return dict(found)
    return {}


def status_json(cluster: LocalCluster, namespace: str) -> dict[str, Any]:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "extender",
            "status",
            "-n",
            namespace,
            "-o",
            "json",
            f"--kubeconfig={cluster.kubeconfig}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    return dict(json.loads(out))


def test_kueue_admits_the_job_and_gang_extender_places_it_whole_and_wires_it(
    raw: RawApi, queued_namespace: str, gpu_queue: str
) -> None:
    job = queued_gpu_job("trainer", 4)
    created = raw.call("POST", jobs_path(queued_namespace), body=job)
    # Kueue's webhook suspended it on create: no pod before admission.
    assert created["spec"]["suspend"] is True
    workload = wait_until(
        lambda: (
            (w := workload_of(raw, queued_namespace, "trainer"))
            and condition(w, "Admitted").get("status") == "True"
            and w
        ),
        what="Kueue to admit the Job's Workload",
    )
    assert workload["status"]["admission"]["clusterQueue"] == gpu_queue
    pods = wait_until(
        lambda: len(found := bound(job_pods(raw, queued_namespace, "trainer"))) == 4 and found,
        what="the 4 admitted pods bound",
    )
    assert all(p["spec"]["schedulerName"] == "gang-extender" for p in pods)
    lines = wait_until(
        lambda: len(found := hostfile(raw, queued_namespace, "trainer")) == 4 and found,
        what="the group's hostfile ConfigMap",
    )
    assert lines == [f"trainer-worker-{i}.trainer slots=1" for i in range(4)]


def test_a_job_over_the_quota_stays_suspended_and_status_says_kueue_holds_it(
    cluster: LocalCluster, raw: RawApi, queued_namespace: str, gpu_queue: str
) -> None:
    raw.call("POST", jobs_path(queued_namespace), body=queued_gpu_job("too-big", 8))
    workload = wait_until(
        lambda: (
            (w := workload_of(raw, queued_namespace, "too-big"))
            and condition(w, "QuotaReserved").get("status") == "False"
            and "insufficient quota" in condition(w, "QuotaReserved").get("message", "")
            and w
        ),
        what="Kueue to say the Workload does not fit the quota",
    )
    assert "nvidia.com/gpu" in condition(workload, "QuotaReserved")["message"]
    assert raw.call("GET", jobs_path(queued_namespace, "too-big"))["spec"]["suspend"] is True
    assert job_pods(raw, queued_namespace, "too-big") == []
    report = wait_until(
        lambda: next(
            (g for g in status_json(cluster, queued_namespace)["groups"] if g["name"] == "too-big"),
            None,
        ),
        what="a status row for the queued Job",
    )
    assert report["waitingFor"].startswith(
        f"waiting for Kueue admission (ClusterQueue {gpu_queue}, LocalQueue gpus)"
    ), report
    assert "insufficient quota" in report["waitingFor"]
    assert report["phase"] == "Pending" and report["placed"] == 0
    table = subprocess.run(
        [
            sys.executable,
            "-m",
            "extender",
            "status",
            "-n",
            queued_namespace,
            f"--kubeconfig={cluster.kubeconfig}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    print(table)  # docs/deploy.md "With Kueue" quotes it
    assert "waiting for Kueue admission (ClusterQueue" in table
