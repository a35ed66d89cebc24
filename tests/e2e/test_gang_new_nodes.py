"""A gang held for room goes whole onto a bigger node that joins (issue: performance round 3).

The demo's scenario on the real kube-scheduler, API server and KWOK nodes: the seed
gang (a master without GPU and three 1-GPU workers) is held on a 2-GPU node, a 4-GPU
node joins, and the gang lands on that node alone. The new node joins with the
not-ready taint, loses it a moment later, and kube-scheduler's informer sees each
change after the service's watch: members asked in between were offered the old node
alone, and the gang used to be split over both (3+1, one demo run in two). Three
such gangs, each in its own pool, go through it at once, so one run meets the race
several times.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client as k8s

from extender.devcluster.nodes import add_gpu_nodes, wait_for_nodes_ready
from tests.e2e.conftest import POOL_LABEL
from tests.e2e.gang_fixtures import (  # noqa: F401 (no_partial_gangs is a fixture)
    bound,
    condition_message,
    create,
    gang_pod,
    get_podgroup,
    list_pods,
    no_partial_gangs,
    podgroup,
    wait_until,
)

POOLS = 3

pytestmark = pytest.mark.usefixtures("no_partial_gangs")


@pytest.fixture
def big_nodes(api: k8s.ApiClient, core: k8s.CoreV1Api) -> Iterator[list[str]]:
    """Names of the 4-GPU nodes the test adds, deleted after it."""
    created: list[str] = []
    yield created
    for name in created:
        try:
            core.delete_node(name)
        except k8s.ApiException as exc:
            if exc.status != 404:
                raise


def test_seed_gangs_held_on_2_gpu_nodes_go_whole_onto_4_gpu_nodes_that_join(
    api, gang_stack, raw, namespace, gpu_nodes, big_nodes
) -> None:
    pools = [gpu_nodes(1, gpus=2) for _ in range(POOLS)]
    for i, pool in enumerate(pools):
        group = f"seed-{i}"
        create(raw, namespace, podgroup(group, 4, minTaskMember={"master": 1, "worker": 3}))
        create(
            raw,
            namespace,
            gang_pod(
                f"{group}-master",
                group,
                cpu="500m",
                memory="1Gi",
                task="master",
                node_selector=pool.node_selector,
            ),
        )
        for w in range(3):
            create(
                raw,
                namespace,
                gang_pod(
                    f"{group}-worker-{w}",
                    group,
                    gpus=1,
                    cpu="1",
                    memory="2Gi",
                    task="worker",
                    node_selector=pool.node_selector,
                ),
            )
    for i in range(POOLS):
        wait_until(
            lambda i=i: "placeable" in condition_message(get_podgroup(raw, namespace, f"seed-{i}")),
            what=f"seed-{i} held for room",
        )
    assert bound(list_pods(raw, namespace)) == []

    for pool in pools:
        big_nodes.extend(
            add_gpu_nodes(
                api,
                1,
                gpus=4,
                labels={POOL_LABEL: pool.name},
                name_prefix=f"gpu-big-{pool.name}",
            )
        )
    wait_for_nodes_ready(api, big_nodes)
    wait_until(
        lambda: len(bound(list_pods(raw, namespace))) == 4 * POOLS,
        what="every member of every gang bound",
    )
    placed = {pod["metadata"]["name"]: pod["spec"]["nodeName"] for pod in list_pods(raw, namespace)}
    for i, big in enumerate(big_nodes):
        group = f"seed-{i}"
        nodes = {node for name, node in placed.items() if name.startswith(f"{group}-")}
        assert nodes == {big}, f"{group} placed on {sorted(nodes)}, not on {big} alone"
