"""The watch cache on an API server that does not stream lists.

Every other e2e module runs on an API server that streams lists (a watch with
`sendInitialEvents`, Kubernetes' WatchList, on by default from 1.34), which is how
the cache reads them first. This module runs a control plane of its own with
kube-apiserver's WatchList gate off, as 1.33 ships: the API server refuses the
streamed list, and the service must fall back to paged lists, sync, and schedule a
gang whose members were created before it started (so they reach it in a list, not
in a watch event) whole.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client as k8s

from extender.devcluster.cluster import LocalCluster, new_namespace
from extender.devcluster.stack import GangStack
from extender.kube.rawapi import RawApi
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

POOL_LABEL = "e2e.gang-extender.io/pool"


@pytest.fixture(scope="module")
def paged_cluster(
    bin_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalCluster]:
    yield from own_control_plane(
        tmp_path_factory.mktemp("paged-lists"),
        bin_dir,
        feature_gates={"kube-apiserver": {"WatchList": False}},
    )


def test_an_api_server_without_streamed_lists_is_listed_in_pages_and_a_gang_binds_whole(
    paged_cluster: LocalCluster, request: pytest.FixtureRequest
) -> None:
    with paged_cluster.api_client() as api:
        raw = RawApi(api)
        pool = gpu_pool_for(api, request, gpus=2, label=POOL_LABEL)
        namespace = new_namespace(api, "paged")
        stack = GangStack(paged_cluster)
        stack.install_crds()
        # Before the service starts: the gang reaches it in the first (paged) list.
        create(raw, namespace, podgroup("train", 2))
        for i in range(2):
            create(raw, namespace, gang_pod(f"train-{i}", "train", gpus=2, node_selector=pool))
        stack.start()  # returns once the service is Ready: its caches synced
        try:
            pods = wait_until(
                lambda: len(bound(list_pods(raw, namespace))) == 2 and list_pods(raw, namespace),
                what="both members bound",
            )
            assert {p["spec"]["nodeName"] for p in pods} == set(_pool_nodes(api, pool))
            log = (paged_cluster.log_dir / "gang-extender.log").read_text()
            # Every kind fell back, once each, and nothing else went wrong on the way.
            assert "pods: the API server does not stream lists" in log
            assert "nodes: the API server does not stream lists" in log
            assert "watch pods failed" not in log and "watch pods broke" not in log
        finally:
            stack.stop()


def _pool_nodes(api: k8s.ApiClient, selector: dict[str, str]) -> list[str]:
    label = ",".join(f"{k}={v}" for k, v in selector.items())
    nodes = k8s.CoreV1Api(api).list_node(label_selector=label).items
    return [n.metadata.name for n in nodes]
