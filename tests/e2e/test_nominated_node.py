"""With `nominate_planned_node`, a planned member is nominated on its planned node, and
kube-scheduler tries it there alone.

The planned-node write then sets the pod's `status.nominatedNodeName` with the
annotation (docs/design.md#the-planned-node-and-nominatednodename). kube-scheduler checks
a nominated node before any other, and when it passes calls the extender with that one
name: shown here on the real kube-scheduler and API server by the service's
`gang_extender_filter_candidate_nodes` histogram and the pod itself. The setting is off
by default, so this module runs its own control plane and service with it on.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client as k8s

from extender.devcluster.cluster import LocalCluster, new_namespace
from extender.devcluster.stack import GangStack
from extender.domain.objects.membership import ADMISSION_GATE, PLANNED_NODE_ANNOTATION
from extender.kube.rawapi import RawApi
from tests.e2e.conftest import POOL_LABEL
from tests.e2e.gang_fixtures import (
    bound,
    create,
    gang_pod,
    get_pod,
    gpu_pool_for,
    list_pods,
    own_control_plane,
    podgroup,
    running_stack,
    service_metric,
    ungate,
    wait_until,
)


@pytest.fixture(scope="module")
def nominating_cluster(
    bin_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalCluster]:
    yield from own_control_plane(tmp_path_factory.mktemp("nominating-cluster"), bin_dir)


@pytest.fixture(scope="module")
def nominating_stack(nominating_cluster: LocalCluster) -> Iterator[GangStack]:
    yield from running_stack(nominating_cluster, env={"GANG_NOMINATE_PLANNED_NODE": "true"})


@pytest.fixture(scope="module")
def n_api(nominating_cluster: LocalCluster) -> Iterator[k8s.ApiClient]:
    with nominating_cluster.api_client() as client:
        yield client


def filter_sample(stack: GangStack, series: str) -> float:
    """One series of the `gang_extender_filter_candidate_nodes` histogram, so far."""
    prefix = f"gang_extender_filter_candidate_nodes{series} "
    for line in stack.metrics_text().splitlines():
        if line.startswith(prefix):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"gang_extender_filter_candidate_nodes{series} not in the metrics")


def one_node_filters(stack: GangStack) -> float:
    """Filter requests so far that offered a single node."""
    return filter_sample(stack, '_bucket{le="1.0"}')


def filters_so_far(stack: GangStack) -> float:
    """Filter requests so far, whatever the number of nodes they offered."""
    return filter_sample(stack, "_count")


def four_gpu_pool(
    api: k8s.ApiClient, request: pytest.FixtureRequest, prefix: str
) -> tuple[RawApi, dict[str, str], str]:
    """The test's own 4-GPU nodes (their node selector) and a fresh namespace."""
    pool = gpu_pool_for(api, request, gpus=4, label=POOL_LABEL)
    return RawApi(api), pool, new_namespace(api, prefix)


def test_a_held_member_is_tried_again_on_its_planned_node_alone_once_its_gang_is_planned(
    nominating_stack: GangStack, n_api: k8s.ApiClient, request: pytest.FixtureRequest
) -> None:
    raw, pool, namespace = four_gpu_pool(n_api, request, "nominated")
    before = one_node_filters(nominating_stack)
    create(raw, namespace, podgroup("nom", 2, scheduleTimeoutSeconds=120))
    create(raw, namespace, gang_pod("nom-0", "nom", gpus=2, node_selector=pool))
    # Alone, nom-0 is held: its filter is offered the pool's nodes and refused.
    wait_until(
        lambda: (
            (p := get_pod(raw, namespace, "nom-0"))
            and any(c.get("type") == "PodScheduled" for c in p["status"].get("conditions") or [])
        ),
        timeout=60,
        what="nom-0 tried and held",
    )
    assert one_node_filters(nominating_stack) == before
    # nom-1 completes the gang but stays gated (another controller's gate), so nom-0
    # is the one kube-scheduler tries again: the plan's write nominated its node.
    create(raw, namespace, gang_pod("nom-1", "nom", gpus=2, node_selector=pool, gated=True))
    wait_until(
        lambda: service_metric(nominating_stack, "gang_extender_bind_barrier_waiting") >= 1,
        timeout=60,
        what="nom-0 in the barrier",
    )
    pod = get_pod(raw, namespace, "nom-0")
    assert pod is not None
    node = pod["metadata"]["annotations"][PLANNED_NODE_ANNOTATION]
    assert pod["status"].get("nominatedNodeName") == node
    assert one_node_filters(nominating_stack) >= before + 1

    ungate(raw, namespace, "nom-1")

    def gang_bound() -> dict[str, str] | None:
        placed = {
            p["metadata"]["name"]: p["spec"]["nodeName"] for p in bound(list_pods(raw, namespace))
        }
        return placed if len(placed) == 2 else None

    placed = wait_until(gang_bound, timeout=60, what="the gang bound whole")
    assert placed == {"nom-0": node, "nom-1": node}
    # The API server clears a nomination when the pod is bound.
    assert all(not p["status"].get("nominatedNodeName") for p in list_pods(raw, namespace))
    assert service_metric(nominating_stack, "gang_extender_partial_gangs_total") == 0


def test_a_gang_behind_the_admission_gate_is_nominated_before_its_gate_lifts(
    nominating_stack: GangStack, n_api: k8s.ApiClient, request: pytest.FixtureRequest
) -> None:
    raw, pool, namespace = four_gpu_pool(n_api, request, "gated-nominated")
    one_node_before, filters_before = (
        one_node_filters(nominating_stack),
        filters_so_far(nominating_stack),
    )
    create(raw, namespace, podgroup("gnom", 2, scheduleTimeoutSeconds=120))
    for i in range(2):
        member = gang_pod(f"gnom-{i}", "gnom", gpus=2, node_selector=pool)
        member["spec"]["schedulingGates"] = [{"name": ADMISSION_GATE}]
        create(raw, namespace, member)

    def gang_bound() -> dict[str, str] | None:
        placed = {
            p["metadata"]["name"]: p["spec"]["nodeName"] for p in bound(list_pods(raw, namespace))
        }
        return placed if len(placed) == 2 else None

    placed = wait_until(gang_bound, timeout=60, what="the gated gang bound whole")
    assert len(set(placed.values())) == 1
    # The service planned the gang behind the gate, nominated each member, then lifted
    # its gate: kube-scheduler's first and only attempt at each offered one node.
    filters = filters_so_far(nominating_stack) - filters_before
    assert filters == 2
    assert one_node_filters(nominating_stack) - one_node_before == filters
    assert service_metric(nominating_stack, "gang_extender_partial_gangs_total") == 0
