"""A gang's life after bind on the real control plane: lifecycle policies (issue 12, item 2).

A user declares `policies` on the PodGroup (Volcano's vocabulary); a member is
evicted through the Eviction API, fails (its status written as kubelet writes an
admission reject), or stays un-Ready; the gang is restarted whole, or left Failed
once maxRetry is spent. Each test makes its own KWOK GPU pool.

KWOK v0.7 plays the kubelet: it marks a bound pod Running and Ready at once (its
pod-ready stage, only for pods without status.podIP) and a Job's pod Succeeded the
moment it runs. Members that must stay un-Ready, and a Job's members that must not
finish, are created gated and get a status.podIP before they are let go
(`start_held_members`): bound, Pending, never Ready, as containers still starting.
"""

from __future__ import annotations

import time
from typing import Any

from extender.devcluster.cluster import new_namespace
from extender.domain.lifecycle.lifecycle import RESTART_GENERATION_LABEL
from extender.domain.objects.membership import GROUP_LABEL, SCHEDULER_NAME
from extender.kube.rawapi import RawApi, path_of
from extender.kube.writers import podgroup_path
from tests.e2e.gang_fixtures import (
    bound,
    create,
    events,
    evict,
    gang_pod,
    get_or_none,
    held_in_phase,
    hold_unready,
    indexed_job_of,
    labelled_generation,
    live_members,
    pod_path,
    podgroup,
    podgroup_status,
    replaced_whole,
    restart_message,
    running_gang,
    uids,
    wait_until,
    whole_gang,
)

# After the restart settles: long enough for several reconcile passes (1s each) that
# would restart the gang a second time if one failure could.
SETTLE_OBSERVATION_SECONDS = 6
RESTART_ON_EVICTION = [{"event": "PodEvicted", "action": "RestartJob"}]
RESTART_ON_EVICTION_OR_FAILURE = [
    *RESTART_ON_EVICTION,
    {"event": "PodFailed", "action": "RestartJob"},
]


def indexed_job(name: str, group: str, count: int, node_selector: dict[str, str]) -> dict[str, Any]:
    # Gated: `start_held_members` lets each pod go once KWOK is kept from running it.
    template = gang_pod("unused", group, gpus=1, node_selector=node_selector, gated=True)
    template["spec"]["restartPolicy"] = "Never"
    return indexed_job_of(
        name,
        completions=count,
        parallelism=count,
        template={"metadata": {"labels": {GROUP_LABEL: group}}, "spec": template["spec"]},
        # A restart deletes every member, marked DisruptionTarget: without this rule
        # the Job counts each as failed and delays its replacement by its backoff.
        podFailurePolicy={
            "rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]
        },
    )


def deployment(
    name: str, group: str, replicas: int, node_selector: dict[str, str]
) -> dict[str, Any]:
    template = gang_pod("unused", group, gpus=1, task="worker", node_selector=node_selector)
    labels = {GROUP_LABEL: group, "app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {**labels, **template["metadata"]["labels"]}},
                "spec": template["spec"],
            },
        },
    }


def start_held_members(raw: RawApi, namespace: str, group: str) -> None:
    """Ungate the group's gated members after setting their status.podIP.

    KWOK v0.7 (the fake kubelet) marks a Job's pod Succeeded the moment it runs, so a
    Job's gang would finish before anything could fail it. Its pod-ready stage only
    takes pods without status.podIP: with one set before the bind, the member stays
    bound and Pending, as a container still starting would, and never completes.
    """
    for pod in live_members(raw, namespace, group):
        if not pod["spec"].get("schedulingGates"):
            continue
        hold_unready(raw, namespace, pod["metadata"]["name"])


def create_in(raw: RawApi, namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
    group = "batch" if obj["kind"] == "Job" else "apps"
    plural = "jobs" if obj["kind"] == "Job" else "deployments"
    return raw.call("POST", path_of("apis", group, "v1", "namespaces", namespace, plural), body=obj)


def test_evicting_one_member_of_an_indexed_job_gang_restarts_the_whole_gang(
    gang_stack, raw, namespace, gpu_nodes
) -> None:
    pool = gpu_nodes(2, gpus=2)
    create(
        raw,
        namespace,
        podgroup("train", 4, policies=RESTART_ON_EVICTION),
    )
    create_in(raw, namespace, indexed_job("train", "train", 4, pool.node_selector))

    def started_whole(old: set[str]) -> Any:
        start_held_members(raw, namespace, "train")
        return whole_gang(raw, namespace, "train", 4, old)

    first = wait_until(lambda: started_whole(set()), what="the gang bound whole")
    old = uids(first)
    victim = sorted(p["metadata"]["name"] for p in first)[1]

    evict(raw, namespace, victim)

    new = wait_until(lambda: started_whole(old), what="4 new members (all new UIDs) bound whole")
    labelled_generation(raw, namespace, "train", 1)
    assert podgroup_status(raw, namespace, "train").get("restarts") == 1
    assert "PodEvicted" in restart_message(raw, namespace, naming=victim)
    assert {e["type"] for e in events(raw, namespace, "GangRestarted")} == {"Warning"}
    time.sleep(SETTLE_OBSERVATION_SECONDS)
    assert podgroup_status(raw, namespace, "train").get("restarts") == 1, (
        "one eviction, two restarts"
    )
    assert uids(live_members(raw, namespace, "train")) == uids(new)


def seed_shape(
    raw: RawApi, namespace: str, group: str, workers: int, pool: Any, **spec: Any
) -> None:
    """The seed Volcano job's shape: a bare master Pod and a worker Deployment."""
    create(raw, namespace, podgroup(group, workers + 1, **spec))
    create(
        raw,
        namespace,
        gang_pod(f"{group}-master", group, task="master", node_selector=pool.node_selector),
    )
    create_in(raw, namespace, deployment(f"{group}-worker", group, workers, pool.node_selector))


def uid_of(raw: RawApi, namespace: str, name: str) -> str | None:
    pod = get_or_none(raw, pod_path(namespace, name))
    return None if pod is None else str(pod["metadata"]["uid"])


def test_evicting_a_worker_of_the_seed_shape_recreates_the_bare_master_too(
    gang_stack, raw, namespace, gpu_nodes
) -> None:
    pool = gpu_nodes(2, gpus=2)
    seed_shape(raw, namespace, "hvd", 3, pool, policies=RESTART_ON_EVICTION)
    first = wait_until(lambda: running_gang(raw, namespace, "hvd", 4, set()), what="gang running")
    worker = sorted(p["metadata"]["name"] for p in first if "worker" in p["metadata"]["name"])[0]

    evict(raw, namespace, worker)

    new = replaced_whole(
        raw, namespace, "hvd", 4, first, what="master and 3 workers replaced and bound whole"
    )
    master = next(p for p in new if p["metadata"]["name"] == "hvd-master")
    assert master["metadata"]["labels"][RESTART_GENERATION_LABEL] == "1"
    assert master["spec"]["schedulerName"] == SCHEDULER_NAME
    assert podgroup_status(raw, namespace, "hvd").get("restarts") == 1
    message = restart_message(raw, namespace, naming=worker)
    assert "PodEvicted" in message and "evicted" in message
    time.sleep(SETTLE_OBSERVATION_SECONDS)
    assert podgroup_status(raw, namespace, "hvd").get("restarts") == 1, "one eviction, two restarts"


def test_second_eviction_past_max_retry_leaves_the_group_failed_and_nothing_restarts(
    gang_stack, raw, namespace, gpu_nodes
) -> None:
    pool = gpu_nodes(1, gpus=4)
    seed_shape(
        raw,
        namespace,
        "once",
        1,
        pool,
        policies=RESTART_ON_EVICTION,
        maxRetry=1,
    )
    first = wait_until(lambda: running_gang(raw, namespace, "once", 2, set()), what="gang running")
    evict(raw, namespace, "once-master")
    second = replaced_whole(raw, namespace, "once", 2, first, running=True)
    assert podgroup_status(raw, namespace, "once").get("restarts") == 1
    # The new members carry generation 1 before they count: evict only then.
    labelled_generation(raw, namespace, "once", 1)
    master_uid = next(
        p["metadata"]["uid"] for p in second if p["metadata"]["name"] == "once-master"
    )
    worker = next(p["metadata"]["name"] for p in second if "worker" in p["metadata"]["name"])

    evict(raw, namespace, worker)

    condition = held_in_phase(raw, namespace, "once", "Failed", "RetriesExhausted")
    assert "maxRetry 1" in condition["message"] and worker in condition["message"]
    assert events(raw, namespace, "GangFailed")
    time.sleep(SETTLE_OBSERVATION_SECONDS)
    assert podgroup_status(raw, namespace, "once").get("restarts") == 1
    assert uid_of(raw, namespace, "once-master") == master_uid, "the master was restarted"


def test_member_rejected_by_kubelet_admission_restarts_the_gang_as_pod_failed(
    gang_stack, raw, namespace, gpu_nodes
) -> None:
    pool = gpu_nodes(1, gpus=4)
    create(
        raw,
        namespace,
        podgroup("adm", 2, policies=[{"event": "PodFailed", "action": "RestartJob"}]),
    )
    for i in range(2):
        create(
            raw, namespace, gang_pod(f"adm-{i}", "adm", gpus=1, node_selector=pool.node_selector)
        )
    first = wait_until(lambda: whole_gang(raw, namespace, "adm", 2, set()), what="gang bound")

    # What kubelet writes when its device manager has no GPU left for the pod.
    raw.call(
        "PATCH",
        pod_path(namespace, "adm-1", "status"),
        body={
            "status": {
                "phase": "Failed",
                "reason": "OutOfnvidia.com/gpu",
                "message": "Pod was rejected: Node didn't have enough resource: nvidia.com/gpu",
            }
        },
        content_type="application/merge-patch+json",
    )

    replaced_whole(raw, namespace, "adm", 2, first)
    assert podgroup_status(raw, namespace, "adm").get("restarts") == 1
    message = restart_message(raw, namespace)
    assert "PodFailed" in message and "OutOfnvidia.com/gpu" in message and "adm-1" in message


def test_members_never_ready_past_the_timeout_restart_the_gang_once(
    gang_stack, raw, namespace, gpu_nodes
) -> None:
    pool = gpu_nodes(1, gpus=4)
    create(
        raw,
        namespace,
        podgroup(
            "slow",
            2,
            policies=[{"event": "PodsNotReady", "action": "RestartJob"}],
            podsReadyTimeoutSeconds=5,
        ),
    )
    create(raw, namespace, gang_pod("slow-0", "slow", node_selector=pool.node_selector))
    # Gated (kube-scheduler leaves it alone) until its status is set: KWOK's pod-ready
    # stage (Running, Ready) only takes pods without status.podIP, so one set before the
    # bind keeps slow-1 bound but never Ready, as a container stuck starting would.
    create(raw, namespace, gang_pod("slow-1", "slow", node_selector=pool.node_selector, gated=True))
    hold_unready(raw, namespace, "slow-1")
    first = wait_until(lambda: whole_gang(raw, namespace, "slow", 2, set()), what="gang bound")
    assert not any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for p in first
        if p["metadata"]["name"] == "slow-1"
        for c in p["status"].get("conditions") or []
    )

    new = replaced_whole(raw, namespace, "slow", 2, first)
    message = restart_message(raw, namespace)
    assert "PodsNotReady" in message and "slow-1" in message
    # The recreated members become Ready (KWOK): no second restart.
    wait_until(
        lambda: all(
            any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in p["status"].get("conditions") or []
            )
            for p in live_members(raw, namespace, "slow")
        ),
        what="the new members Ready",
    )
    time.sleep(SETTLE_OBSERVATION_SECONDS)
    assert podgroup_status(raw, namespace, "slow").get("restarts") == 1
    assert uids(live_members(raw, namespace, "slow")) == uids(new)


def test_abort_job_holds_the_recreated_members_until_the_user_changes_the_podgroup(
    gang_stack, raw, namespace, gpu_nodes
) -> None:
    pool = gpu_nodes(1, gpus=4)
    create(
        raw,
        namespace,
        podgroup("stop", 2, policies=[{"event": "PodEvicted", "action": "AbortJob"}]),
    )
    create_in(raw, namespace, deployment("stop-worker", "stop", 2, pool.node_selector))
    first = wait_until(lambda: running_gang(raw, namespace, "stop", 2, set()), what="gang running")
    old = uids(first)

    evict(raw, namespace, first[0]["metadata"]["name"])

    condition = held_in_phase(raw, namespace, "stop", "Aborted", "Aborted")
    assert (
        condition["reason"] == "Aborted" and "change or delete the PodGroup" in condition["message"]
    )
    assert events(raw, namespace, "GangAborted")
    # The Deployment brings its pods back; they are held, not scheduled.
    held = wait_until(
        lambda: (
            len(pods := live_members(raw, namespace, "stop")) == 2
            and not (uids(pods) & old)
            and pods
        ),
        what="the Deployment's new pods",
    )
    time.sleep(SETTLE_OBSERVATION_SECONDS)
    assert bound(live_members(raw, namespace, "stop")) == []
    assert podgroup_status(raw, namespace, "stop").get("phase") == "Aborted"

    raw.call(
        "PATCH",
        podgroup_path(namespace, "stop"),
        body={"spec": {"maxRetry": 5}},
        content_type="application/merge-patch+json",
    )

    wait_until(
        lambda: whole_gang(raw, namespace, "stop", 2, old),
        what="the held members bound whole once the PodGroup changed",
    )
    assert uids(live_members(raw, namespace, "stop")) == uids(held)
    assert events(raw, namespace, "GangReleased")
    wait_until(
        lambda: podgroup_status(raw, namespace, "stop").get("phase") in ("Scheduled", "Running"),
        what="the PodGroup's phase back to Scheduled/Running",
    )


def test_annotation_declared_group_restarts_by_its_policies_annotation(
    gang_stack, raw, namespace, gpu_nodes
) -> None:
    pool = gpu_nodes(1, gpus=4)
    annotations = {
        "gang-extender.io/min-available": "2",
        "gang-extender.io/policies": "PodEvicted=RestartJob,PodFailed=RestartJob",
    }
    for i in range(2):
        create(
            raw,
            namespace,
            gang_pod(
                f"anno-{i}", "anno", node_selector=pool.node_selector, annotations=annotations
            ),
        )
    first = wait_until(lambda: running_gang(raw, namespace, "anno", 2, set()), what="gang running")
    wait_until(
        lambda: "restarts" in podgroup_status(raw, namespace, "anno"),
        what="the created PodGroup counting restarts",
    )

    evict(raw, namespace, "anno-0")

    new = replaced_whole(raw, namespace, "anno", 2, first)
    assert {p["metadata"]["labels"].get(RESTART_GENERATION_LABEL) for p in new} == {"1"}
    assert {p["metadata"]["annotations"]["gang-extender.io/policies"] for p in new} == {
        annotations["gang-extender.io/policies"]
    }
    assert "PodEvicted" in restart_message(raw, namespace, naming="anno-0")


def test_deleting_the_namespace_of_a_gang_whose_nodes_are_gone_restarts_nothing(
    gang_stack, raw, api, gpu_nodes
) -> None:
    # The nodes go first, so the members stay behind for PodGC, which deletes them with
    # DisruptionTarget reason DeletionByPodGC (an eviction elsewhere) while the
    # namespace is terminating: nothing may be restarted or created there (a 403).
    namespace = new_namespace(api, "ns-deleted")  # not the fixture's: deleted here
    pool = gpu_nodes(2, gpus=2)
    seed_shape(raw, namespace, "hvd", 3, pool, policies=RESTART_ON_EVICTION_OR_FAILURE)
    wait_until(lambda: running_gang(raw, namespace, "hvd", 4, set()), what="gang running")
    log_path = gang_stack.service.log_path
    seen_before = log_path.stat().st_size

    for node in pool.nodes:
        raw.call("DELETE", path_of("api", "v1", "nodes", node))
    raw.call("DELETE", path_of("api", "v1", "namespaces", namespace))

    # PodGC waits out its quarantine of orphaned pods (40 s) before it deletes them.
    wait_until(
        lambda: get_or_none(raw, path_of("api", "v1", "namespaces", namespace)) is None,
        timeout=300,
        what=f"namespace {namespace} deleted with its gang",
    )
    time.sleep(SETTLE_OBSERVATION_SECONDS)  # a late restart or recreate would log by now
    with open(log_path, encoding="utf-8", errors="replace") as log:
        log.seek(seen_before)
        said = [line for line in log.read().splitlines() if namespace in line]
    restarts = ("restarted (", "recreated ", "could not recreate", "GangRestarted")
    assert not [line for line in said if any(r in line for r in restarts)], said
    assert not [line for line in said if "403" in line], said
