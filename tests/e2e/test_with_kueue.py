"""Kueue beside gang-extender: Kueue admits by quota, gang-extender places whole.

The real Kueue manager (hack/build-kueue.sh, run by extender/devcluster/kueue.py)
runs against the session's control plane, its webhooks limited to namespaces
labelled ``e2e.gang-extender.io/kueue=enabled``. A ClusterQueue holds 4 GPUs:

- an Indexed Job of 4 one-GPU pods with the queue label is suspended by Kueue's
  webhook, admitted, and its 4 pods are bound together by gang-extender and wired
  (hostfile ConfigMap);
- a Job of 8 one-GPU pods is over the quota: Kueue keeps it suspended, no pod is
  ever made, and ``gang-extender status`` says Kueue holds it, not gang-extender;
- a Kueue pod group (4 plain pods with ``kueue.x-k8s.io/pod-group-name``) is gated by
  Kueue's webhook until admitted, then bound whole by gang-extender.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from extender.devcluster.cluster import LocalCluster
from extender.devcluster.kueue import QUEUE_NAME_LABEL, KueueManager, kueue_path
from extender.devcluster.stack import GangStack
from extender.domain.objects.membership import MIN_AVAILABLE_ANNOTATION
from extender.kube.rawapi import RawApi, path_of
from tests.e2e.gang_fixtures import (
    bound,
    create,
    gang_pod,
    hold_unready,
    hostfile,
    job_pods,
    list_pods,
    wait_until,
)
from tests.e2e.kueue_fixtures import (
    condition,
    jobs_path,
    queued_gpu_job,
    running_kueue,
    workload_of,
)


@pytest.fixture(scope="module")
def kueue(cluster: LocalCluster, gang_stack: GangStack) -> Iterator[KueueManager]:
    yield from running_kueue(cluster, frameworks=("batch/job", "pod"))


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
    made = wait_until(
        lambda: len(found := job_pods(raw, queued_namespace, "trainer")) == 4 and found,
        what="the 4 admitted pods",
    )
    for pod in made:
        hold_unready(raw, queued_namespace, pod["metadata"]["name"])
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


KUEUE_ADMISSION_GATE = "kueue.x-k8s.io/admission"


def queued_group_pod(name: str, group: str, members: int) -> dict[str, Any]:
    """A plain pod of Kueue pod group `group` (its pod integration) and of our gang."""
    pod = gang_pod(name, group, gpus=1, annotations={MIN_AVAILABLE_ANNOTATION: str(members)})
    pod["metadata"]["labels"].update(
        {QUEUE_NAME_LABEL: "gpus", "kueue.x-k8s.io/pod-group-name": group}
    )
    pod["metadata"]["annotations"]["kueue.x-k8s.io/pod-group-total-count"] = str(members)
    # KWOK deletes a pod at once; a grace period would only slow the clean-up.
    pod["spec"]["terminationGracePeriodSeconds"] = 0
    return pod


def test_a_kueue_pod_group_is_gated_until_admitted_then_bound_whole(
    raw: RawApi, queued_namespace: str, gpu_queue: str
) -> None:
    namespace = queued_namespace
    made = [create(raw, namespace, queued_group_pod(f"grp-{i}", "grp", 4)) for i in range(4)]
    # Kueue's webhook gated each on create: nothing to place before admission.
    for pod in made:
        gates = [g["name"] for g in pod["spec"].get("schedulingGates") or []]
        assert KUEUE_ADMISSION_GATE in gates, pod["spec"]
    pods = wait_until(
        lambda: (
            len(found := bound(list_pods(raw, namespace, "kueue.x-k8s.io/pod-group-name=grp"))) == 4
            and found
        ),
        what="the pod group admitted and its 4 pods bound",
    )
    assert {p["spec"]["schedulerName"] for p in pods} == {"gang-extender"}
    admitted = [
        w
        for w in raw.call("GET", kueue_path(namespace, "workloads"))["items"]
        if (w.get("status") or {}).get("admission")
    ]
    assert [w["status"]["admission"]["clusterQueue"] for w in admitted] == [gpu_queue]
    # Deleted while Kueue runs: it takes off the finalizer it put on each pod.
    raw.call(
        "DELETE",
        path_of("api", "v1", "namespaces", namespace, "pods"),
        query={"labelSelector": "kueue.x-k8s.io/pod-group-name=grp"},
    )
    wait_until(
        lambda: list_pods(raw, namespace, "kueue.x-k8s.io/pod-group-name=grp") == [],
        what="the pod group's pods gone",
    )
