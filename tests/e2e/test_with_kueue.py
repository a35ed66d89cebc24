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
from collections.abc import Iterator
from typing import Any

import pytest

from extender.devcluster.cluster import LocalCluster
from extender.devcluster.kueue import KueueManager
from extender.devcluster.stack import GangStack
from extender.kube.rawapi import RawApi
from tests.e2e.gang_fixtures import bound, hold_unready, hostfile, job_pods, wait_until
from tests.e2e.kueue_fixtures import (
    condition,
    jobs_path,
    queued_gpu_job,
    running_kueue,
    workload_of,
)


@pytest.fixture(scope="module")
def kueue(cluster: LocalCluster, gang_stack: GangStack) -> Iterator[KueueManager]:
    yield from running_kueue(cluster)


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
