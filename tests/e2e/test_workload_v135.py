"""Kubernetes 1.35's shape of the Workload API as a group source, on v1.35.x.

This module runs a control plane of its own (one, module-scoped) serving the API as
1.35 has it: kube-apiserver with `--feature-gates=GenericWorkload=true` (without it
the API server drops `spec.workloadRef` from pods) and
`--runtime-config=scheduling.k8s.io/v1alpha1=true` (an alpha API version is off by
default). The default kube-scheduler starts without the gates, so Kubernetes'
GangScheduling plugin is off: gang-extender is the cluster's gang scheduler.

The user's objects are those of k8s.io/api v0.35.4: a `scheduling.k8s.io/v1alpha1`
Workload with `spec.podGroups[].policy.gang.minCount`, and a Job whose pods name it in
`spec.workloadRef{name, podGroup}`, with no gang-extender label or annotation. The
gang is named `<workload>-<podGroup>` (docs/deploy.md, "Kubernetes Workload API as a
group source").

Other releases do not serve this shape (1.36 replaced it with a Workload template
and a runtime PodGroup, tests/e2e/test_upstream_workload.py): skipped there.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from extender.devcluster.cluster import LocalCluster, binary_version, new_namespace
from extender.devcluster.stack import GangStack
from extender.domain.objects.membership import (
    GROUP_LABEL,
    INJECT_NAMESPACE_LABEL,
    SCHEDULER_NAME,
)
from extender.kube.rawapi import RawApi, path_of
from tests.e2e.conftest import POOL_LABEL
from tests.e2e.gang_fixtures import (
    bound,
    gang_status,
    gpu_indexed_job,
    gpu_pool_for,
    hostfile,
    job_pods,
    minor_version,
    own_control_plane,
    placed_as_gang,
    unschedulable_message,
    wait_until,
)

GATE = "GenericWorkload"
RUNTIME_CONFIG = "scheduling.k8s.io/v1alpha1=true"
WORKLOAD_API = ("apis", "scheduling.k8s.io", "v1alpha1")
GPUS_PER_NODE = 4
GPUS_PER_MEMBER = 2
MEMBERS = 4  # two nodes of 4 GPUs hold the gang exactly


@pytest.fixture(scope="module")
def cluster_135(bin_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    version = binary_version(bin_dir)
    if minor_version(version) != 35:
        pytest.skip(
            f"spec.workloadRef and the v1alpha1 Workload are Kubernetes 1.35's shape of the "
            f"Workload API; this control plane is {version} (run with K8S_VERSION=v1.35.4)"
        )
    yield from own_control_plane(
        tmp_path_factory.mktemp("workload-135"),
        bin_dir,
        feature_gates={"kube-apiserver": {GATE: True}},
        runtime_config=[RUNTIME_CONFIG],
    )


@pytest.fixture(scope="module")
def api_135(cluster_135: LocalCluster) -> Iterator[k8s.ApiClient]:
    with cluster_135.api_client() as client:
        yield client


@pytest.fixture(scope="module")
def raw_135(api_135: k8s.ApiClient) -> RawApi:
    return RawApi(api_135)


@pytest.fixture
def pool(api_135: k8s.ApiClient, request: pytest.FixtureRequest) -> dict[str, str]:
    """Two fresh 4-GPU nodes for one test; the node selector that keeps its pods there."""
    return gpu_pool_for(api_135, request, gpus=GPUS_PER_NODE, label=POOL_LABEL)


def workload(name: str, pod_group: str, min_count: int) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1alpha1",
        "kind": "Workload",
        "metadata": {"name": name},
        "spec": {"podGroups": [{"name": pod_group, "policy": {"gang": {"minCount": min_count}}}]},
    }


def indexed_job(
    name: str, *, workload: str, pod_group: str, parallelism: int, node_selector: dict[str, str]
) -> dict[str, Any]:
    """An Indexed Job of MEMBERS completions whose pods name their gang only through
    spec.workloadRef: no gang-extender label or annotation anywhere."""
    return gpu_indexed_job(
        name,
        completions=MEMBERS,
        parallelism=parallelism,
        gpus=GPUS_PER_MEMBER,
        node_selector=node_selector,
        schedulerName=SCHEDULER_NAME,
        workloadRef={"name": workload, "podGroup": pod_group},
    )


def test_a_job_naming_only_a_135_workload_is_held_then_bound_whole_by_gang_extender(
    cluster_135: LocalCluster, raw_135: RawApi, api_135: k8s.ApiClient, pool: dict[str, str]
) -> None:
    """API served, upstream GangScheduling plugin off: gang-extender is the gang scheduler."""
    raw = raw_135
    namespace = new_namespace(api_135, "wl135", labels={INJECT_NAMESPACE_LABEL: "enabled"})
    # Before the service starts, so it comes in the first list (whose items the API
    # server sends without apiVersion and kind), not in a watch event.
    raw.call(
        "POST",
        path_of(*WORKLOAD_API, "namespaces", namespace, "workloads"),
        body=workload("train", "workers", MEMBERS),
    )
    stack = GangStack(cluster_135)
    stack.start()
    try:
        raw.call(
            "POST",
            path_of("apis", "batch", "v1", "namespaces", namespace, "jobs"),
            body=indexed_job(
                "train",
                workload="train",
                pod_group="workers",
                parallelism=MEMBERS - 1,
                node_selector=pool,
            ),
        )
        # The API server kept the reference (the gate is on), and the webhook, sent the
        # pods for it alone, labelled each with the gang it names.
        created = wait_until(
            lambda: len(ps := job_pods(raw, namespace, "train")) == MEMBERS - 1 and ps,
            what="3 members created",
        )
        for pod in created:
            assert pod["spec"].get("workloadRef") == {"name": "train", "podGroup": "workers"}
            assert pod["metadata"]["labels"].get(GROUP_LABEL) == "train-workers"
        # Three of four: each refused by the extender, naming the gang, none bound.
        waiting = re.compile(
            rf"gang {namespace}/train-workers: [123]/4 members exist; waiting for the rest"
        )
        held = wait_until(
            lambda: (
                (pods := job_pods(raw, namespace, "train"))
                and len(pods) == MEMBERS - 1
                and all(waiting.search(unschedulable_message(p)) for p in pods)
                and pods
            ),
            what="3 members held with the gang's reason",
        )
        assert bound(held) == []
        # The fourth arrives: all four are planned and bound together, on the pool.
        raw.call(
            "PATCH",
            path_of("apis", "batch", "v1", "namespaces", namespace, "jobs", "train"),
            body={"spec": {"parallelism": MEMBERS}},
            content_type="application/merge-patch+json",
        )
        pods = wait_until(
            lambda: len(bound(ps := job_pods(raw, namespace, "train"))) == MEMBERS and ps,
            what="all 4 members bound",
        )
        # Planned and bound as one gang by gang-extender: its Event names every member.
        placed = wait_until(
            lambda: placed_as_gang(raw, namespace, "train-workers"),
            what="the GangScheduled Event",
        )
        assert placed == {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods}
        per_node: dict[str, int] = {}
        for pod in pods:
            per_node[pod["spec"]["nodeName"]] = per_node.get(pod["spec"]["nodeName"], 0) + 1
        assert sorted(per_node.values()) == [2, 2]  # 2 GPUs each on two 4-GPU nodes
        # The webhook is sent pods that name their group only by spec.workloadRef and
        # wires them as members of the gang: hostnames under its Service, a hostfile.
        assert sorted(p["spec"].get("hostname") for p in pods) == [
            f"train-workers-worker-{i}" for i in range(MEMBERS)
        ]
        assert all(p["spec"].get("subdomain") == "train-workers" for p in pods)
        lines = wait_until(
            lambda: (
                len(hostfile(raw, namespace, "train-workers")) == MEMBERS
                and hostfile(raw, namespace, "train-workers")
            ),
            what="ConfigMap train-workers-svc listing 4 hosts",
        )
        assert lines == [
            f"train-workers-worker-{i}.train-workers slots={GPUS_PER_MEMBER}"
            for i in range(MEMBERS)
        ]
        # `gang-extender status` sizes the gang by the Workload's pod group entry too.
        row = gang_status(cluster_135, namespace)["train-workers"]
        assert (row["PLACED/MIN"], row["SOURCE"]) == ("4/4", "kubernetes"), row
    finally:
        stack.stop()
