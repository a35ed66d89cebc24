"""Kueue's waitForPodsReady beside gang-extender's lifecycle policies: one owner per failure.

Kueue runs here with `waitForPodsReady` (timeout 15 s). A gang Job is admitted and
bound whole but its pods never turn Ready (let go with a pod IP: KWOK leaves such a
pod Pending). Kueue evicts the Workload (condition Evicted, reason PodsReadyTimeout),
suspends the Job and the Job controller deletes the pods: one restart, Kueue's. The
gang's PodGroup has the `PodEvicted`/`PodFailed` RestartJob policies docs/deploy.md
calls fine beside waitForPodsReady: they must not act on Kueue's eviction too (no
`GangRestarted`, `status.restarts` unchanged), since the Job controller's deletions
carry no DisruptionTarget.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from extender.devcluster.cluster import LocalCluster
from extender.devcluster.kueue import KueueManager
from extender.devcluster.stack import GangStack
from extender.kube.rawapi import RawApi
from extender.kube.writers import podgroup_path
from tests.e2e.gang_fixtures import (
    bound,
    create,
    events,
    hold_unready,
    job_pods,
    podgroup,
    wait_until,
)
from tests.e2e.kueue_fixtures import (
    condition,
    jobs_path,
    queued_gpu_job,
    running_kueue,
    workload_of,
)

PODS_READY_TIMEOUT = "15s"


@pytest.fixture(scope="module")
def kueue(cluster: LocalCluster, gang_stack: GangStack) -> Iterator[KueueManager]:
    yield from running_kueue(
        cluster,
        waitForPodsReady={
            "timeout": PODS_READY_TIMEOUT,
            # Requeued after a long backoff: the test reads the first eviction only.
            "requeuingStrategy": {"timestamp": "Eviction", "backoffBaseSeconds": 600},
        },
    )


def test_kueues_pods_ready_timeout_restarts_the_gang_once_and_our_policies_stay_out(
    raw: RawApi, queued_namespace: str, gpu_queue: str
) -> None:
    namespace = queued_namespace
    create(
        raw,
        namespace,
        podgroup(
            "slow",
            4,
            policies=[
                {"event": "PodEvicted", "action": "RestartJob"},
                {"event": "PodFailed", "action": "RestartJob"},
            ],
        ),
    )
    job = queued_gpu_job("slow", 4)
    raw.call("POST", jobs_path(namespace), body=job)
    made = wait_until(
        lambda: len(found := job_pods(raw, namespace, "slow")) == 4 and found,
        what="the admitted Job's 4 pods",
    )
    for pod in made:
        hold_unready(raw, namespace, pod["metadata"]["name"])
    wait_until(
        lambda: len(bound(job_pods(raw, namespace, "slow"))) == 4,
        what="the 4 pods bound whole",
    )
    evicted = wait_until(
        lambda: (
            (w := workload_of(raw, namespace, "slow"))
            and condition(w, "Evicted").get("status") == "True"
            and w
        ),
        timeout=120,
        what="Kueue to evict the Workload whose pods are not Ready",
    )
    assert condition(evicted, "Evicted")["reason"] == "PodsReadyTimeout", evicted["status"]
    # Kueue writes the Evicted condition first; its Job reconciler suspends the Job
    # on a later pass (two writes), so the suspension is awaited, not read once.
    wait_until(
        lambda: raw.call("GET", jobs_path(namespace, "slow"))["spec"].get("suspend") is True,
        what="Kueue to suspend the evicted Workload's Job",
    )
    wait_until(
        lambda: job_pods(raw, namespace, "slow") == [],
        what="the Job controller to delete the suspended Job's pods",
    )
    # One restart, Kueue's: gang-extender's policies took the deletions as the owner's.
    assert events(raw, namespace, "GangRestarted") == []
    group = raw.call("GET", podgroup_path(namespace, "slow"))
    assert (group.get("status") or {}).get("restarts", 0) == 0, group.get("status")
