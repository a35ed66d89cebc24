"""Kueue beside the session's cluster for e2e modules: its manager, a watched namespace,
a ClusterQueue on a fresh GPU pool, and the Jobs and Workloads the tests read.

A module asks for Kueue with a module-scoped fixture `kueue` of its own, made with
`running_kueue` (each module may configure it: waitForPodsReady, ...); the fixtures
here take it by that name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest
from kubernetes import client as k8s

from extender.devcluster.cluster import LocalCluster, new_namespace
from extender.devcluster.kueue import (
    QUEUE_NAME_LABEL,
    KueueManager,
    KueueUnavailable,
    create_queues,
    ensure_kueue,
    kueue_path,
)
from extender.domain.objects.membership import INJECT_NAMESPACE_LABEL, MIN_AVAILABLE_ANNOTATION
from extender.kube.rawapi import RawApi, path_of
from tests.e2e.gang_fixtures import delete_namespace, gang_pod, indexed_job_of

if TYPE_CHECKING:  # conftest imports this module's fixtures
    from tests.e2e.conftest import GpuPool

KUEUE_NAMESPACE_LABEL = "e2e.gang-extender.io/kueue"


def running_kueue(
    cluster: LocalCluster, frameworks: tuple[str, ...] = ("batch/job",), **config: Any
) -> Iterator[KueueManager]:
    """Kueue's manager for a module, its webhooks limited to namespaces labelled
    KUEUE_NAMESPACE_LABEL, with the integration `frameworks`; `config` adds to its
    Configuration. Skips where it is not built."""
    try:
        kueue_dir = ensure_kueue()
    except KueueUnavailable as exc:
        pytest.skip(f"Kueue is not built here ({exc}); hack/build-kueue.sh builds it")
    manager = KueueManager(
        cluster,
        kueue_dir,
        namespace_labels={KUEUE_NAMESPACE_LABEL: "enabled"},
        extra_config=config,
        frameworks=frameworks,
    )
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


@pytest.fixture
def gpu_queue(
    raw: RawApi, queued_namespace: str, gpu_nodes: Callable[..., GpuPool]
) -> Iterator[str]:
    """A ResourceFlavor on a fresh pool of 2 four-GPU nodes, a ClusterQueue of 4 GPUs, and
    a LocalQueue `gpus` in the namespace. Yields the ClusterQueue's name."""
    pool = gpu_nodes(2, gpus=4)
    flavor = f"flavor-{pool.name}"
    cluster_queue = f"cq-{pool.name}"
    create_queues(
        raw,
        flavor=flavor,
        cluster_queue=cluster_queue,
        local_queue="gpus",
        namespace=queued_namespace,
        quota={"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "4"},
        node_labels=pool.node_selector,
    )
    yield cluster_queue
    raw.call("DELETE", kueue_path(queued_namespace, "localqueues", "gpus"))
    raw.call("DELETE", kueue_path(None, "clusterqueues", cluster_queue))
    raw.call("DELETE", kueue_path(None, "resourceflavors", flavor))


def queued_gpu_job(name: str, members: int) -> dict[str, Any]:
    """An Indexed Job of `members` one-GPU gang members, in LocalQueue `gpus`.

    Its pods are created gated: KWOK marks a Job's pod Succeeded the moment it runs,
    and a group whose members all finished is not wired (the order-dependent failure
    of issue 30). The test lets them go with a pod IP (`hold_unready`), so they stay
    bound and running as a real trainer would."""
    template = gang_pod(
        "", name, gpus=1, annotations={MIN_AVAILABLE_ANNOTATION: str(members)}, gated=True
    )
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
