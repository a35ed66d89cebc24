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
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from extender.devcluster.cluster import LocalCluster, binary_version, new_namespace
from extender.devcluster.priority_classes import temporary_priority_classes
from extender.devcluster.stack import SYSTEM_NAMESPACE, GangStack, apply_object
from extender.devcluster.workload_api import (
    GATE,
    RUNTIME_CONFIG,
    UPSTREAM_API,
    served_gates,
    upstream_podgroup,
)
from extender.domain.objects.membership import (
    INJECT_NAMESPACE_LABEL,
    PLANNED_NODE_ANNOTATION,
    SCHEDULER_NAME,
)
from extender.kube.rawapi import RawApi, path_of
from tests.e2e.conftest import POOL_LABEL
from tests.e2e.gang_fixtures import (
    bound,
    bound_live_names,
    create,
    gang_status,
    get_or_none,
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
        feature_gates=served_gates(),
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
        # Planned and bound as one gang by gang-extender: its Event names every member.
        placed = wait_until(
            lambda: placed_as_gang(raw, namespace, "train"), what="the GangScheduled Event"
        )
        assert placed == {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods}
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


def test_lowering_a_held_upstream_podgroups_min_count_binds_the_members_it_has(
    wl_raw: RawApi, workload_cluster: LocalCluster, pool: dict[str, str], wired_namespace: str
) -> None:
    """Beta semantics: `minCount` is mutable; a held gang resized to what exists binds."""
    raw, namespace = wl_raw, wired_namespace
    stack = GangStack(workload_cluster)
    stack.start()
    try:
        create_in(raw, namespace, upstream_podgroup("resize", MEMBERS))
        create_in(
            raw,
            namespace,
            indexed_job(
                "resize",
                group="resize",
                parallelism=MEMBERS - 1,
                node_selector=pool,
                scheduler=SCHEDULER_NAME,
            ),
        )
        held = wait_until(
            lambda: (
                (pods := job_pods(raw, namespace, "resize"))
                and len(pods) == MEMBERS - 1
                and all("resize" in unschedulable_message(p) for p in pods)
                and pods
            ),
            what="3 members held for a gang of 4",
        )
        assert bound(held) == []
        # Kubernetes' own status words: PodGroupInitiallyScheduled, False while held...
        waiting = wait_until(
            lambda: (
                initially_scheduled(raw, namespace, "resize").get("status") == "False"
                and initially_scheduled(raw, namespace, "resize")
            ),
            what="PodGroupInitiallyScheduled False on the held PodGroup",
        )
        assert waiting["reason"] == "Unschedulable"
        assert "resize" in waiting["message"], waiting
        raw.call(
            "PATCH",
            path_of(*UPSTREAM_API, "namespaces", namespace, "podgroups", "resize"),
            body={"spec": {"schedulingPolicy": {"gang": {"minCount": MEMBERS - 1}}}},
            content_type="application/merge-patch+json",
        )
        pods = wait_until(
            lambda: len(bound(ps := job_pods(raw, namespace, "resize"))) >= MEMBERS - 1 and ps,
            what="the 3 members bound once minCount is 3",
        )
        assert len(bound(pods)) >= MEMBERS - 1
        # ...and True once placed (terminal: never written again).
        placed = wait_until(
            lambda: (
                initially_scheduled(raw, namespace, "resize").get("status") == "True"
                and initially_scheduled(raw, namespace, "resize")
            ),
            what="PodGroupInitiallyScheduled True on the placed PodGroup",
        )
        assert placed["reason"] == "Scheduled"
    finally:
        stack.stop()


def initially_scheduled(raw: RawApi, namespace: str, name: str) -> dict[str, Any]:
    """The PodGroupInitiallyScheduled condition of upstream PodGroup `name` ({} if none)."""
    obj = raw.call("GET", path_of(*UPSTREAM_API, "namespaces", namespace, "podgroups", name))
    for found in (obj.get("status") or {}).get("conditions") or []:
        if found.get("type") == "PodGroupInitiallyScheduled":
            return dict(found)
    return {}


@pytest.mark.parametrize(("mode", "low_left"), [("single", 1), ("all", 0)])
def test_a_high_gang_preempts_one_member_of_a_single_mode_podgroup_and_all_of_an_all_mode_one(
    wl_raw: RawApi,
    workload_cluster: LocalCluster,
    pool: dict[str, str],
    wired_namespace: str,
    mode: str,
    low_left: int,
) -> None:
    """disruptionMode: the low gang's 2 members fill both 4-GPU nodes; a high gang of one
    4-GPU member needs one node. Single: one low member goes, the other keeps running;
    All: the low gang goes whole."""
    raw, namespace = wl_raw, wired_namespace
    suffix = uuid.uuid4().hex[:6]
    low_class, high_class = f"low-{suffix}", f"high-{suffix}"
    low_group = upstream_podgroup("low", 2)
    low_group["spec"]["disruptionMode"] = {mode: {}}
    stack = GangStack(workload_cluster)
    stack.start()
    try:
        with temporary_priority_classes(raw, {low_class: 10, high_class: 1000}):
            create_in(raw, namespace, low_group)
            create_in(raw, namespace, upstream_podgroup("high", 1))
            for i in range(2):
                create(raw, namespace, member_of("low", f"low-{i}", pool, low_class))
            wait_until(
                lambda: len(bound_live_names(raw, namespace, "e2e-member=low")) == 2,
                what="the low gang's 2 members bound",
            )
            create(raw, namespace, member_of("high", "high-0", pool, high_class))
            # Tried before the service's watch has seen the low gang bound, the high gang
            # finds no victim and is held; kube-scheduler tries it again on its own
            # schedule: a pod unschedulable for 5 minutes is flushed back to its queue by a
            # check every 30 s, so up to 330 s after the refusal, then the eviction and
            # the bind. The wait allows that (issue 31: the service should wake it).
            wait_until(
                lambda: bound_live_names(raw, namespace, "e2e-member=high") == {"high-0"},
                timeout=420,
                what="the high gang bound",
            )
            low = bound_live_names(raw, namespace, "e2e-member=low")
            assert len(low) == low_left, low
    finally:
        stack.stop()


def member_of(group: str, name: str, pool: dict[str, str], priority_class: str) -> dict[str, Any]:
    """A bare pod (KWOK keeps it Running) of 4 GPUs naming upstream PodGroup `group`."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"e2e-member": group}},
        "spec": {
            "schedulerName": SCHEDULER_NAME,
            "schedulingGroup": {"podGroupName": group},
            "priorityClassName": priority_class,
            # KWOK deletes an evicted pod at once; a grace period only slows the test.
            "terminationGracePeriodSeconds": 0,
            "nodeSelector": pool,
            "containers": [
                {
                    "name": "main",
                    "image": "registry.example/train:1",
                    "resources": {
                        "requests": {"cpu": "100m", "nvidia.com/gpu": GPUS_PER_NODE},
                        "limits": {"nvidia.com/gpu": GPUS_PER_NODE},
                    },
                }
            ],
        },
    }


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
        # `gang-extender status` says whose gang it is, not "set schedulerName".
        waiting_for = gang_status(workload_cluster, namespace)["mpi"]["WAITING FOR"]
        assert "gang-extender only wires them" in waiting_for, waiting_for
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
