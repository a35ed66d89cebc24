"""Users migrating from Volcano or scheduler-plugins keep their PodGroups: read, and status written back.

The optional CRDs (deploy/crds/optional) are installed through the API by the
test itself, after the service started, as a user adding Volcano's CRD to a
running cluster would: the service notices within optional_api_recheck_seconds.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from extender.devcluster.cluster import LocalCluster
from extender.devcluster.stack import (
    COSCHEDULING_CRD,
    DEPLOY,
    apply_object,
    load_yaml_documents,
    wait_crd_established,
)
from extender.domain.objects.membership import SCHEDULER_NAME
from extender.kube.rawapi import KubeError, RawApi, path_of
from tests.e2e.gang_fixtures import (
    bound,
    create,
    create_podgroup_of,
    gang_pod,
    list_pods,
    podgroup,
    podgroups_path,
    ungate,
    unschedulable_message,
    wait_until,
)

VOLCANO_CRD = DEPLOY / "crds" / "optional" / "podgroups.scheduling.volcano.sh.yaml"
VOLCANO_GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
VOLCANO_TASK_ANNOTATION = "volcano.sh/task-spec"
COSCHEDULING_LABEL = "scheduling.x-k8s.io/pod-group"


def install_crd(raw: RawApi, path: Path) -> None:
    for doc in load_yaml_documents(path):
        apply_object(raw, doc)
        wait_crd_established(raw, doc["metadata"]["name"])


def events(raw: RawApi, namespace: str) -> list[dict[str, Any]]:
    return raw.call("GET", path_of("api", "v1", "namespaces", namespace, "events"))["items"]


def volcano_pod(
    name: str, group: str, task: str, node_selector: dict[str, str], *, gated: bool = False
) -> dict[str, Any]:
    """A member as Volcano's job controller makes it: the group and the task in annotations."""
    pod = gang_pod(name, "", gpus=1, node_selector=node_selector, gated=gated)
    pod["metadata"]["annotations"] = {
        VOLCANO_GROUP_ANNOTATION: group,
        VOLCANO_TASK_ANNOTATION: task,
    }
    return pod


def test_a_volcano_podgroup_sizes_its_annotated_pods_and_they_are_bound_together(
    gang_stack, raw, namespace, gpu_nodes
) -> None:
    install_crd(raw, VOLCANO_CRD)
    pool = gpu_nodes(2, gpus=2)
    api = "scheduling.volcano.sh/v1beta1"
    create_podgroup_of(
        raw,
        api,
        namespace,
        "train",
        minMember=4,
        minTaskMember={"master": 1, "worker": 3},
        queue="default",
        minResources={"nvidia.com/gpu": "4"},
    )
    # Three of four: none may start, and the wait names Volcano's PodGroup as the size.
    create(raw, namespace, volcano_pod("train-master-0", "train", "master", pool.node_selector))
    for i in range(2):
        create(
            raw, namespace, volcano_pod(f"train-worker-{i}", "train", "worker", pool.node_selector)
        )
    waiting = wait_until(
        lambda: [
            e
            for e in events(raw, namespace)
            if e.get("reason") == "GangWaiting" and "3/4 members exist" in e.get("message", "")
        ],
        what="a GangWaiting Event saying 3/4 members exist (the Volcano PodGroup read)",
    )
    assert "spec.minMember of Volcano PodGroup train" in waiting[0]["message"]
    assert bound(list_pods(raw, namespace)) == []
    volcano_pg = wait_until(
        lambda: (
            (pg := raw.call("GET", podgroups_path(api, namespace, "train"))).get("status") and pg
        ),
        what="status written to the Volcano PodGroup",
    )
    assert volcano_pg["status"]["phase"] == "Pending"
    (condition,) = volcano_pg["status"]["conditions"]
    assert condition["type"] == "Unschedulable" and "3/4 members exist" in condition["message"]

    create(raw, namespace, volcano_pod("train-worker-2", "train", "worker", pool.node_selector))
    placed = wait_until(
        lambda: len(found := bound(list_pods(raw, namespace))) == 4 and found,
        what="all four members bound",
    )
    assert {p["metadata"]["name"] for p in placed} == {
        "train-master-0",
        "train-worker-0",
        "train-worker-1",
        "train-worker-2",
    }
    scheduled = wait_until(
        lambda: [e for e in events(raw, namespace) if e.get("reason") == "GangScheduled"],
        what="the GangScheduled Event",
    )
    assert all(p["metadata"]["name"] in scheduled[0]["message"] for p in placed), (
        "the four were bound as one gang"
    )
    running = wait_until(
        lambda: (
            (pg := raw.call("GET", podgroups_path(api, namespace, "train")))["status"].get(
                "running"
            )
            == 4
            and pg
        ),
        what="the Volcano PodGroup Running with 4 running",
    )
    assert running["status"]["phase"] == "Running"


def kubectl_get(cluster: LocalCluster, bin_dir: Path, namespace: str, what: str) -> dict[str, str]:
    """One row of `kubectl get <what>` as {column: cell}: what a user sees."""
    out = subprocess.run(
        [str(bin_dir / "kubectl"), "--kubeconfig", str(cluster.kubeconfig), "-n", namespace]
        + ["get", what],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    header, row = out.splitlines()[:2]
    return dict(zip(header.split(), row.split(), strict=False))


def test_a_scheduler_plugins_podgroup_shows_its_gang_moving_in_kubectl_get(
    gang_stack, cluster, bin_dir, raw, namespace, gpu_nodes
) -> None:
    install_crd(raw, COSCHEDULING_CRD)
    pool = gpu_nodes(1, gpus=4)
    api = "scheduling.x-k8s.io/v1alpha1"
    create_podgroup_of(raw, api, namespace, "mpi", minMember=3)

    def shown_in_phase(phase: str) -> dict[str, str]:
        row: dict[str, str] = wait_until(
            lambda: (
                (
                    got := kubectl_get(
                        cluster, bin_dir, namespace, "podgroups.scheduling.x-k8s.io/mpi"
                    )
                ).get("PHASE")
                == phase
                and got
            ),
            what=f"kubectl get to show the scheduler-plugins PodGroup {phase}",
        )
        return row

    def member(i: int) -> dict[str, Any]:
        pod = gang_pod(f"mpi-{i}", "", gpus=1, node_selector=pool.node_selector)
        pod["metadata"]["labels"] = {COSCHEDULING_LABEL: "mpi"}
        return pod

    for i in range(2):
        create(raw, namespace, member(i))
    pending = shown_in_phase("Pending")
    assert (pending["MINMEMBER"], pending["RUNNING"]) == ("3", "0")
    status = raw.call("GET", podgroups_path(api, namespace, "mpi"))["status"]
    assert "scheduleStartTime" not in status, "a gang still waiting has not started scheduling"

    create(raw, namespace, member(2))
    running = shown_in_phase("Running")
    assert (running["RUNNING"], running["SUCCEEDED"], running["FAILED"]) == ("3", "0", "0")
    status = raw.call("GET", podgroups_path(api, namespace, "mpi"))["status"]
    assert status["running"] == 3 and status["scheduleStartTime"]
    assert len(bound(list_pods(raw, namespace))) == 3


def test_a_scheduler_plugins_podgroup_of_another_scheduler_is_left_alone(
    gang_stack, raw, namespace, gpu_nodes
) -> None:
    """Pods coscheduling (or any other scheduler) places: their PodGroup's status is not ours."""
    install_crd(raw, COSCHEDULING_CRD)
    pool = gpu_nodes(1, gpus=2)
    api = "scheduling.x-k8s.io/v1alpha1"
    create_podgroup_of(raw, api, namespace, "theirs")
    pod = gang_pod("theirs-0", "", node_selector=pool.node_selector, scheduler="default-scheduler")
    pod["metadata"]["labels"] = {COSCHEDULING_LABEL: "theirs"}
    create(raw, namespace, pod)
    wait_until(lambda: bound(list_pods(raw, namespace)), what="the default scheduler to bind it")
    # A group of ours in the same namespace gets status: once it has, the reconciler
    # has looked at this namespace's groups, and the other one must still have none.
    create_podgroup_of(raw, api, namespace, "ours", minMember=1)
    ours = gang_pod("ours-0", "", node_selector=pool.node_selector, scheduler=SCHEDULER_NAME)
    ours["metadata"]["labels"] = {COSCHEDULING_LABEL: "ours"}
    create(raw, namespace, ours)
    wait_until(
        lambda: (
            (raw.call("GET", podgroups_path(api, namespace, "ours")).get("status") or {}).get(
                "phase"
            )
            == "Running"
        ),
        what="status on the PodGroup of this scheduler's pod",
    )
    try:
        theirs = raw.call("GET", podgroups_path(api, namespace, "theirs"))
    except KubeError as err:  # pragma: no cover - the object was created above
        pytest.fail(f"PodGroup theirs vanished: {err}")
    assert not theirs.get("status"), theirs.get("status")


def test_a_volcano_podgroup_and_ours_of_one_name_that_disagree_hold_the_job_naming_both(
    gang_stack, raw, namespace, gpu_nodes
) -> None:
    install_crd(raw, VOLCANO_CRD)
    pool = gpu_nodes(1, gpus=4)
    api = "scheduling.volcano.sh/v1beta1"
    create_podgroup_of(raw, api, namespace, "twice", minMember=3)
    create(raw, namespace, podgroup("twice", 2))
    # Gated: were the Volcano CRD new to the service (this test alone), ours would be
    # the only PodGroup it knows until it looks again; the gate keeps them unbound
    # meanwhile, and the service counts them as members all the same.
    for i in range(3):
        create(
            raw,
            namespace,
            volcano_pod(f"twice-{i}", "twice", "worker", pool.node_selector, gated=True),
        )
    said = wait_until(
        lambda: [
            e
            for e in events(raw, namespace)
            if e.get("reason") == "GangWaiting" and "disagree" in e.get("message", "")
        ],
        what="a GangWaiting Warning saying the two PodGroups disagree",
    )
    assert said[0]["type"] == "Warning"
    assert (
        "scheduling.gang-extender.io PodGroup twice (minMember 2) and scheduling.volcano.sh "
        "PodGroup twice (minMember 3) disagree" in said[0]["message"]
    )
    # Ungated now, they stay held: the disagreement, not the gate, is what holds them.
    for i in range(3):
        ungate(raw, namespace, f"twice-{i}")
    wait_until(
        lambda: [p for p in list_pods(raw, namespace) if "disagree" in unschedulable_message(p)],
        what="kube-scheduler to try a member and record the hold",
    )
    assert bound(list_pods(raw, namespace)) == []
