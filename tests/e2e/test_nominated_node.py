"""A planned member is nominated on its planned node, and kube-scheduler tries it there alone.

The planned-node write sets the pod's `status.nominatedNodeName` with the annotation
(docs/design.md#the-planned-node-and-nominatednodename). kube-scheduler checks a
nominated node before any other, and when it passes calls the extender with that one
name: shown here on the real kube-scheduler and API server by the service's
`gang_extender_filter_candidate_nodes` histogram and the pod itself.
"""

from __future__ import annotations

from typing import Any

import pytest

from extender.domain.objects.membership import PLANNED_NODE_ANNOTATION
from tests.e2e.gang_fixtures import (  # noqa: F401 (no_partial_gangs is a fixture)
    bound,
    create,
    gang_pod,
    get_pod,
    list_pods,
    no_partial_gangs,
    podgroup,
    ungate,
    wait_until,
)

pytestmark = pytest.mark.usefixtures("no_partial_gangs")

ONE_NODE_BUCKET = 'gang_extender_filter_candidate_nodes_bucket{le="1.0"}'


def one_node_filters(gang_stack: Any) -> float:
    """Filter requests so far that offered a single node."""
    for line in gang_stack.metrics_text().splitlines():
        if line.startswith(ONE_NODE_BUCKET + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{ONE_NODE_BUCKET} not in the service's metrics")


def barrier_waiting(gang_stack: Any) -> int:
    for line in gang_stack.metrics_text().splitlines():
        if line.startswith("gang_extender_bind_barrier_waiting "):
            return int(float(line.rsplit(" ", 1)[1]))
    return 0


def test_a_held_member_is_tried_again_on_its_planned_node_alone_once_its_gang_is_planned(
    gang_stack, raw, namespace, gpu_nodes
) -> None:
    pool = gpu_nodes(3, gpus=4)
    before = one_node_filters(gang_stack)
    create(raw, namespace, podgroup("nom", 2, scheduleTimeoutSeconds=120))
    create(raw, namespace, gang_pod("nom-0", "nom", gpus=2, node_selector=pool.node_selector))
    # Alone, nom-0 is held: its filter is offered the pool's three nodes and refused.
    wait_until(
        lambda: (
            (p := get_pod(raw, namespace, "nom-0"))
            and any(c.get("type") == "PodScheduled" for c in p["status"].get("conditions") or [])
        ),
        timeout=60,
        what="nom-0 tried and held",
    )
    assert one_node_filters(gang_stack) == before
    # nom-1 completes the gang but stays gated (another controller's gate), so nom-0
    # is the one kube-scheduler tries again: the plan's write nominated its node.
    create(
        raw,
        namespace,
        gang_pod("nom-1", "nom", gpus=2, node_selector=pool.node_selector, gated=True),
    )
    wait_until(lambda: barrier_waiting(gang_stack) >= 1, timeout=60, what="nom-0 in the barrier")
    pod = get_pod(raw, namespace, "nom-0")
    assert pod is not None
    node = pod["metadata"]["annotations"][PLANNED_NODE_ANNOTATION]
    assert node in pool.nodes
    assert pod["status"].get("nominatedNodeName") == node
    assert one_node_filters(gang_stack) >= before + 1

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
