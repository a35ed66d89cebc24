"""Users coming from Volcano or scheduler-plugins keep their group markers; `gang-extender status` shows groups."""

from __future__ import annotations

import pytest

from extender.kube.rawapi import KubeError, path_of
from tests.e2e.gang_fixtures import (
    bound,
    create,
    gang_pod,
    gang_status,
    gang_status_text,
    list_pods,
    podgroup,
    wait_until,
)


def test_volcano_group_annotation_with_min_available_is_gang_scheduled(
    gang_stack, raw, namespace, gpu_nodes
) -> None:
    pool = gpu_nodes(1, gpus=8)
    for i in range(3):
        pod = gang_pod(f"vc-{i}", "", gpus=2, node_selector=pool.node_selector)
        pod["metadata"]["annotations"] = {
            "scheduling.k8s.io/group-name": "vcjob",
            "gang-extender.io/min-available": "3",
        }
        create(raw, namespace, pod)
    wait_until(
        lambda: len(bound(list_pods(raw, namespace))) == 3, what="the Volcano-style group bound"
    )


def test_scheduler_plugins_podgroup_and_label_are_honoured(
    gang_stack, raw, namespace, gpu_nodes
) -> None:
    collection = path_of(
        "apis", "scheduling.x-k8s.io", "v1alpha1", "namespaces", namespace, "podgroups"
    )
    body = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "mpi"},
        "spec": {"minMember": 3, "scheduleTimeoutSeconds": 60},
    }
    try:
        raw.call("POST", collection, body=body)
    except KubeError as err:
        if err.status == 404:
            pytest.fail(
                "the scheduling.x-k8s.io PodGroup CRD (deploy/crds/optional) is not installed by the stack"
            )
        raise
    pool = gpu_nodes(1, gpus=8)
    for i in range(2):
        pod = gang_pod(f"mpi-{i}", "", gpus=1, node_selector=pool.node_selector)
        pod["metadata"]["labels"] = {"scheduling.x-k8s.io/pod-group": "mpi"}
        create(raw, namespace, pod)
    wait_until(
        lambda: [
            e
            for e in raw.call("GET", path_of("api", "v1", "namespaces", namespace, "events"))[
                "items"
            ]
            if e.get("reason") == "GangWaiting" and "2/3 members exist" in e.get("message", "")
        ],
        what="a GangWaiting event saying 2/3 members exist",
    )
    assert bound(list_pods(raw, namespace)) == []
    pod = gang_pod("mpi-2", "", gpus=1, node_selector=pool.node_selector)
    pod["metadata"]["labels"] = {"scheduling.x-k8s.io/pod-group": "mpi"}
    create(raw, namespace, pod)
    wait_until(
        lambda: len(bound(list_pods(raw, namespace))) == 3, what="the coscheduling group bound"
    )


def test_status_command_lists_groups_with_phase_and_waiting_reason(
    gang_stack, cluster, raw, namespace, gpu_nodes
) -> None:
    pool = gpu_nodes(1, gpus=2)
    create(raw, namespace, podgroup("toobig", 2))
    for i in range(2):
        create(
            raw,
            namespace,
            gang_pod(f"toobig-{i}", "toobig", gpus=2, node_selector=pool.node_selector),
        )

    def status_output() -> str | None:
        out = gang_status_text(cluster, namespace)
        return out if "placeable" in out else None

    out = wait_until(status_output, what="status to show the waiting reason")
    header, row = out.splitlines()[0], next(line for line in out.splitlines() if "toobig" in line)
    assert header.split()[:4] == ["NAMESPACE", "NAME", "PHASE", "PLACED/MIN"]
    assert "Pending" in row and "0/2" in row and "largest free node has 2" in row


def test_status_lists_scheduler_plugins_and_member_only_groups_with_their_source(
    gang_stack, cluster, raw, namespace, gpu_nodes
) -> None:
    pool = gpu_nodes(1, gpus=4)
    raw.call(
        "POST",
        path_of("apis", "scheduling.x-k8s.io", "v1alpha1", "namespaces", namespace, "podgroups"),
        body={
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": "pi"},
            "spec": {"minMember": 3},
        },
    )
    for i in range(2):
        pod = gang_pod(f"pi-{i}", "", gpus=1, node_selector=pool.node_selector)
        pod["metadata"]["labels"] = {"scheduling.x-k8s.io/pod-group": "pi"}
        create(raw, namespace, pod)
    create(raw, namespace, gang_pod("lonely-0", "lonely", node_selector=pool.node_selector))

    def both_explained() -> dict[str, dict[str, str]] | None:
        rows = gang_status(cluster, namespace)
        explained = all(rows.get(name, {}).get("WAITING FOR") for name in ("pi", "lonely"))
        # Their phase shows once the service has written it into their PodGroup, which
        # it does after the reason it holds pi for: wait for that write too.
        written = "(" in rows.get("pi", {}).get("SOURCE", "")
        return rows if explained and written else None

    rows = wait_until(
        both_explained, what="status to list pi and lonely with their reasons and pi's phase"
    )
    # Our phase, and in SOURCE the one the service wrote into their PodGroup.
    assert (rows["pi"]["SOURCE"], rows["pi"]["PHASE"], rows["pi"]["PLACED/MIN"]) == (
        "scheduler-plugins (Pending)",
        "Pending",
        "0/3",
    )
    assert rows["pi"]["WAITING FOR"].startswith(f"gang {namespace}/pi: 2/3 members exist")
    assert (rows["lonely"]["SOURCE"], rows["lonely"]["PLACED/MIN"]) == ("pods", "0/?")
    assert "no PodGroup lonely" in rows["lonely"]["WAITING FOR"]

    pod = gang_pod("pi-2", "", gpus=1, node_selector=pool.node_selector)
    pod["metadata"]["labels"] = {"scheduling.x-k8s.io/pod-group": "pi"}
    create(raw, namespace, pod)
    placed = wait_until(
        lambda: (
            (row := gang_status(cluster, namespace).get("pi"))
            and row["PLACED/MIN"] == "3/3"
            and row
        ),
        what="pi placed in the status table",
    )
    assert placed["PHASE"] in ("Scheduled", "Running") and placed["WAITING FOR"] == ""
    theirs = {
        "Scheduled": "scheduler-plugins (Scheduling)",
        "Running": "scheduler-plugins (Running)",
    }
    assert wait_until(
        lambda: (
            gang_status(cluster, namespace)["pi"]["SOURCE"]
            == theirs[gang_status(cluster, namespace)["pi"]["PHASE"]]
        ),
        what="their phase beside ours",
    )
