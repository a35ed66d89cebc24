"""Kubernetes' own Workload API as a group source, and wiring-only mode, on v1.37.2.

This module runs a control plane of its own (one, module-scoped), serving the API:
kube-apiserver with `--feature-gates=GenericWorkload=true` and
`--runtime-config=scheduling.k8s.io/v1beta1=true` (a beta API version is off by
default), kube-controller-manager with `GenericWorkload=true` (its PodGroup
protection controller). The default kube-scheduler starts without the gate, so
Kubernetes' GangScheduling plugin is off (in 1.37 the one gate both serves the API
and enables the plugin, per component): the first scenario. The second restarts it
with the gate on, as a cluster that gang-schedules with the upstream plugin.

The user's objects are those of k8s.io/api v0.37.2: a `scheduling.k8s.io/v1beta1`
PodGroup with `spec.schedulingPolicy.gang.minCount`, and pods that name it in
`spec.schedulingGroup.podGroupName`, with no gang-extender label or annotation.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from extender.devcluster.cluster import LocalCluster, binary_version, new_namespace
from extender.devcluster.stack import SYSTEM_NAMESPACE, GangStack, apply_object
from extender.domain.objects.membership import (
    INJECT_NAMESPACE_LABEL,
    PLANNED_NODE_ANNOTATION,
    SCHEDULER_NAME,
)
from extender.kube.rawapi import RawApi, path_of
from tests.e2e.gang_fixtures import (
    bound,
    gang_status,
    get_or_none,
    gpu_indexed_job,
    gpu_pool_for,
    hostfile,
    job_pods,
    minor_version,
    own_control_plane,
    unschedulable_message,
    wait_until,
)

GATE = "GenericWorkload"
RUNTIME_CONFIG = "scheduling.k8s.io/v1beta1=true"
UPSTREAM_API = ("apis", "scheduling.k8s.io", "v1beta1")
POOL_LABEL = "e2e.gang-extender.io/pool"
GPUS_PER_NODE = 4
GPUS_PER_MEMBER = 2
MEMBERS = 4  # two nodes of 4 GPUs hold the gang exactly
WIRED_ENV = {"VC_TASK_INDEX", "VC_WORKER_HOSTS", "VC_WORKER_NUM", "GANG_NUM_SLOTS"}


@pytest.fixture(scope="module")
def workload_cluster(
    bin_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalCluster]:
    version = binary_version(bin_dir)
    if minor_version(version) < 37:
        pytest.skip(f"the v1beta1 Workload API is 1.37's; this control plane is {version}")
    yield from own_control_plane(
        tmp_path_factory.mktemp("workload-cluster"),
        bin_dir,
        feature_gates={"kube-apiserver": {GATE: True}, "kube-controller-manager": {GATE: True}},
        runtime_config=[RUNTIME_CONFIG],
    )


@pytest.fixture(scope="module")
def wl_api(workload_cluster: LocalCluster) -> Iterator[k8s.ApiClient]:
    with workload_cluster.api_client() as client:
        yield client


@pytest.fixture(scope="module")
def wl_raw(wl_api: k8s.ApiClient) -> RawApi:
    return RawApi(wl_api)


@pytest.fixture
def pool(wl_api: k8s.ApiClient, request: pytest.FixtureRequest) -> dict[str, str]:
    """Two fresh 4-GPU nodes for one test; the node selector that keeps its pods there."""
    return gpu_pool_for(wl_api, request, gpus=GPUS_PER_NODE, label=POOL_LABEL)


@pytest.fixture
def wired_namespace(wl_api: k8s.ApiClient) -> str:
    return new_namespace(wl_api, "upstream", labels={INJECT_NAMESPACE_LABEL: "enabled"})


def upstream_podgroup(name: str, min_count: int) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}},
    }


def indexed_job(
    name: str, *, group: str, parallelism: int, node_selector: dict[str, str], scheduler: str | None
) -> dict[str, Any]:
    """An Indexed Job of MEMBERS completions whose pods name `group` only through
    spec.schedulingGroup: no gang-extender label or annotation anywhere."""
    spec: dict[str, Any] = {"schedulingGroup": {"podGroupName": group}}
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    return gpu_indexed_job(
        name,
        completions=MEMBERS,
        parallelism=parallelism,
        gpus=GPUS_PER_MEMBER,
        node_selector=node_selector,
        **spec,
    )


def create_in(raw: RawApi, namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
    api_version, kind = obj["apiVersion"], obj["kind"]
    plural = {"PodGroup": "podgroups", "Job": "jobs"}[kind]
    prefix = ["api", api_version] if "/" not in api_version else ["apis", *api_version.split("/")]
    return raw.call("POST", path_of(*prefix, "namespaces", namespace, plural), body=obj)


def scale_job(raw: RawApi, namespace: str, name: str, parallelism: int) -> None:
    raw.call(
        "PATCH",
        path_of("apis", "batch", "v1", "namespaces", namespace, "jobs", name),
        body={"spec": {"parallelism": parallelism}},
        content_type="application/merge-patch+json",
    )


def assert_wired(raw: RawApi, namespace: str, group: str, pods: list[dict[str, Any]]) -> None:
    """The webhook's and the wiring controller's work, as a Volcano user expects it."""
    for pod in pods:
        spec = pod["spec"]
        assert spec.get("subdomain") == group, pod["metadata"]["name"]
        names = {e["name"] for e in spec["containers"][0].get("env") or []}
        assert names >= WIRED_ENV, f"{pod['metadata']['name']} lacks {WIRED_ENV - names}"
        volumes = {v["name"]: v for v in spec.get("volumes") or []}
        assert any(
            (v.get("secret") or {}).get("secretName") == f"{group}-ssh" for v in volumes.values()
        ), f"{pod['metadata']['name']} does not mount Secret {group}-ssh"
    secret = wait_until(
        lambda: get_or_none(
            raw, path_of("api", "v1", "namespaces", namespace, "secrets", f"{group}-ssh")
        ),
        what=f"Secret {group}-ssh",
    )
    assert {"id_rsa", "id_rsa.pub", "authorized_keys", "config"} <= set(secret["data"])
    lines = wait_until(
        lambda: len(hostfile(raw, namespace, group)) == MEMBERS and hostfile(raw, namespace, group),
        what=f"ConfigMap {group}-svc listing {MEMBERS} hosts",
    )
    assert lines == [f"{group}-worker-{i}.{group} slots={GPUS_PER_MEMBER}" for i in range(MEMBERS)]
    service = wait_until(
        lambda: get_or_none(raw, path_of("api", "v1", "namespaces", namespace, "services", group)),
        what=f"headless Service {group}",
    )
    assert service["spec"]["clusterIP"] == "None"


def test_a_job_naming_only_an_upstream_podgroup_is_held_then_bound_whole_by_gang_extender(
    workload_cluster: LocalCluster,
    wl_raw: RawApi,
    pool: dict[str, str],
    wired_namespace: str,
) -> None:
    """API served, upstream GangScheduling plugin off: gang-extender is the gang scheduler."""
    raw, namespace = wl_raw, wired_namespace
    # Before the service starts: it comes in the first list, whose items kube-apiserver
    # sends without apiVersion and kind (and nothing modifies it later here: the
    # upstream plugin, which would write its status, is off).
    create_in(raw, namespace, upstream_podgroup("train", MEMBERS))
    stack = GangStack(workload_cluster)
    stack.start()
    try:
        create_in(
            raw,
            namespace,
            indexed_job(
                "train",
                group="train",
                parallelism=MEMBERS - 1,
                node_selector=pool,
                scheduler=SCHEDULER_NAME,
            ),
        )
        # Three of four: each is refused by the extender for its gang, none bound. A
        # member tried before the watch delivered it is held as "not in gang-extender's
        # watch cache yet" and may not be tried again while the gang is short, so
        # either hold counts; every other message would be a wrong reason.
        waiting = re.compile(
            rf"gang {namespace}/train: [123]/4 members exist; waiting for the rest"
            rf"|pod {namespace}/train-[^ ]+ is not in gang-extender's watch cache yet"
        )
        held = wait_until(
            lambda: (
                (pods := job_pods(raw, namespace, "train"))
                and len(pods) == MEMBERS - 1
                and all("train" in unschedulable_message(p) for p in pods)
                and pods
            ),
            what="3 members held with the gang's reason",
        )
        assert bound(held) == []
        assert all(waiting.search(unschedulable_message(p)) for p in held), [
            unschedulable_message(p) for p in held
        ]
        # The fourth arrives: all four are planned and bound together, on the pool.
        scale_job(raw, namespace, "train", MEMBERS)
        pods = wait_until(
            lambda: len(bound(ps := job_pods(raw, namespace, "train"))) == MEMBERS and ps,
            what="all 4 members bound",
        )
        assert all(
            PLANNED_NODE_ANNOTATION in (p["metadata"].get("annotations") or {}) for p in pods
        )
        per_node: dict[str, int] = {}
        for pod in pods:
            per_node[pod["spec"]["nodeName"]] = per_node.get(pod["spec"]["nodeName"], 0) + 1
        assert sorted(per_node.values()) == [2, 2]  # 2 GPUs each on two 4-GPU nodes
        assert_wired(raw, namespace, "train", pods)
        # `gang-extender status` reads the upstream PodGroup for the group's size.
        row = gang_status(workload_cluster, namespace)["train"]
        assert (row["PLACED/MIN"], row["SOURCE"]) == ("4/4", "kubernetes"), row
    finally:
        stack.stop()


GATED = re.compile(r'^scheduler_pending_pods\{queue="gated"\} (\S+)$', re.M)


def gated_pods(cluster: LocalCluster) -> float:
    found = GATED.search(cluster.component_metrics("kube-scheduler"))
    return float(found.group(1)) if found else 0.0


def extender_port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_with_the_upstream_gate_on_wiring_only_mode_leaves_scheduling_to_kube_scheduler_and_wires(
    workload_cluster: LocalCluster,
    wl_raw: RawApi,
    pool: dict[str, str],
    wired_namespace: str,
) -> None:
    """GangScheduling on in the default kube-scheduler; gang-extender only wires."""
    raw, namespace = wl_raw, wired_namespace
    workload_cluster.restart_scheduler(feature_gates={GATE: True})
    stack = GangStack(workload_cluster, env={"GANG_MODE": "wiring-only"})
    stack.workdir.mkdir(parents=True, exist_ok=True)
    stack.install_crds()
    apply_object(
        raw, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SYSTEM_NAMESPACE}}
    )
    stack.install_webhook_config()
    # Made before the service starts, so it comes in its first list (whose items the
    # API server sends without apiVersion and kind), not in a watch event.
    create_in(raw, namespace, upstream_podgroup("mpi", MEMBERS))
    stack.start_service()  # no gang kube-scheduler: deploy/overlays/wiring-only has none
    try:
        assert not extender_port_open(stack.extender_port), "wiring-only opened the extender port"
        create_in(
            raw,
            namespace,
            indexed_job(
                "mpi", group="mpi", parallelism=MEMBERS - 1, node_selector=pool, scheduler=None
            ),
        )
        # Three of four: the upstream plugin holds them (gang-extender does not place pods).
        created = wait_until(
            lambda: len(ps := job_pods(raw, namespace, "mpi")) == MEMBERS - 1 and ps,
            what="3 members created",
        )
        assert all(p["spec"].get("schedulerName") == "default-scheduler" for p in created)
        # kube-scheduler's GangScheduling PreEnqueue gates them: it counts them as gated
        # (it sets no pod condition for that), and binds none.
        wait_until(
            lambda: gated_pods(workload_cluster) >= MEMBERS - 1,
            what="kube-scheduler to gate the 3 members (scheduler_pending_pods{queue=gated})",
        )
        assert bound(job_pods(raw, namespace, "mpi")) == []
        podgroup = raw.call(
            "GET", path_of(*UPSTREAM_API, "namespaces", namespace, "podgroups", "mpi")
        )
        assert podgroup["spec"]["schedulingPolicy"]["gang"]["minCount"] == MEMBERS
        scale_job(raw, namespace, "mpi", MEMBERS)
        pods = wait_until(
            lambda: len(bound(ps := job_pods(raw, namespace, "mpi"))) == MEMBERS and ps,
            what="all 4 members bound by kube-scheduler",
        )
        # Nothing of gang-extender's scheduling: no plan annotation on any member.
        assert not any(
            PLANNED_NODE_ANNOTATION in (p["metadata"].get("annotations") or {}) for p in pods
        )
        assert_wired(raw, namespace, "mpi", pods)
    finally:
        stack.stop()
