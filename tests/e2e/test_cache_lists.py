"""The watch cache's ways of listing, on a real API server.

The cache reads a list whole first (one answer from the API server's cache, cut into
items as it arrives: extender/kube/list_split.py); with that off (`whole_list:
false`) it streams the list as a watch (`sendInitialEvents`, Kubernetes' WatchList,
on by default from 1.34); where that is refused, it reads pages. This module runs a
control plane of its own with kube-apiserver's WatchList gate off, as 1.33 ships:
with whole lists on, every kind (built-in and custom resources, whose lists come
with sorted keys) must be read whole with no fallback; with them off, the API server
refuses the streamed list and the service must fall back to pages. Either way it
must sync and schedule a gang whose members were created before it started (so they
reach it in a list, not in a watch event) whole.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client as k8s

from extender.devcluster.cluster import LocalCluster, new_namespace
from extender.devcluster.stack import GangStack
from extender.kube.rawapi import RawApi
from tests.e2e.conftest import POOL_LABEL
from tests.e2e.gang_fixtures import (
    bound,
    create,
    gang_pod,
    gpu_pool_for,
    list_pods,
    own_control_plane,
    podgroup,
    wait_until,
)


@pytest.fixture(scope="module")
def paged_cluster(
    bin_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalCluster]:
    yield from own_control_plane(
        tmp_path_factory.mktemp("paged-lists"),
        bin_dir,
        feature_gates={"kube-apiserver": {"WatchList": False}},
    )


def test_lists_read_whole_with_no_fallback_and_a_gang_created_before_the_start_binds_whole(
    paged_cluster: LocalCluster, request: pytest.FixtureRequest
) -> None:
    log = _start_with_a_listed_gang(paged_cluster, request, "whole")
    # No kind (nodes, pods, our PodGroup CRD, namespaces) fell back to a stream or pages.
    assert "cannot read the list whole" not in log
    assert "does not stream lists" not in log
    assert "watch pods failed" not in log and "watch pods broke" not in log


def test_an_api_server_without_streamed_lists_is_listed_in_pages_and_a_gang_binds_whole(
    paged_cluster: LocalCluster, request: pytest.FixtureRequest
) -> None:
    # Whole lists off: the streamed list is tried, refused, and pages are read.
    log = _start_with_a_listed_gang(paged_cluster, request, "paged", {"GANG_WHOLE_LIST": "false"})
    # Every kind fell back, once each, and nothing else went wrong on the way.
    assert "pods: the API server does not stream lists" in log
    assert "nodes: the API server does not stream lists" in log
    assert "watch pods failed" not in log and "watch pods broke" not in log


def _start_with_a_listed_gang(
    cluster: LocalCluster,
    request: pytest.FixtureRequest,
    prefix: str,
    env: dict[str, str] | None = None,
) -> str:
    """Create a gang, then start the service (so the gang reaches it in the first list,
    not in a watch event), see both members bound to the pool; the service's log of
    this start."""
    with cluster.api_client() as api:
        raw = RawApi(api)
        pool = gpu_pool_for(api, request, gpus=2, label=POOL_LABEL)
        namespace = new_namespace(api, prefix)
        stack = GangStack(cluster, env=env)
        stack.install_crds()
        create(raw, namespace, podgroup("train", 2))
        for i in range(2):
            create(raw, namespace, gang_pod(f"train-{i}", "train", gpus=2, node_selector=pool))
        log_start = _log_size(cluster)
        stack.start()  # returns once the service is Ready: its caches synced
        try:
            pods = wait_until(
                lambda: len(bound(list_pods(raw, namespace))) == 2 and list_pods(raw, namespace),
                what="both members bound",
            )
            assert {p["spec"]["nodeName"] for p in pods} == set(_pool_nodes(api, pool))
            return _log_since(cluster, log_start)
        finally:
            stack.stop()


def _log_size(cluster: LocalCluster) -> int:
    path = cluster.log_dir / "gang-extender.log"
    return path.stat().st_size if path.exists() else 0


def _log_since(cluster: LocalCluster, start: int) -> str:
    """This test's service log (the module's services append to one file)."""
    with (cluster.log_dir / "gang-extender.log").open("rb") as log:
        log.seek(start)
        return log.read().decode(errors="replace")


def _pool_nodes(api: k8s.ApiClient, selector: dict[str, str]) -> list[str]:
    label = ",".join(f"{k}={v}" for k, v in selector.items())
    nodes = k8s.CoreV1Api(api).list_node(label_selector=label).items
    return [n.metadata.name for n in nodes]
