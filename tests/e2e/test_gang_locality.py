"""Locality on the real kube-scheduler, API server and KWOK GPU nodes (issue 13 item 4).

A gang goes on the fewest nodes that hold it; a PodGroup's `spec.topology` keeps it
inside one value of a required label and on as few values of a preferred one as fit.

Each test labels its own nodes with a `SET_LABEL` value of its own and pins its pods
to them with a nodeSelector, so tests sharing the session cluster keep apart.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from extender.domain.objects.policy import KUEUE_REQUIRED_TOPOLOGY
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

SET_LABEL = "e2e.gang-extender.io/locality-set"
ZONE = "topology.kubernetes.io/zone"
RACK = "e2e.gang-extender.io/rack"

pytestmark = pytest.mark.usefixtures("no_partial_gangs")


def node_set(
    gpu_nodes: Any, *groups: tuple[int, int, dict[str, str]]
) -> tuple[dict[str, str], dict[str, dict[str, str]], list[list[str]]]:
    """Nodes made as (count, gpus, labels) groups, all under one fresh set label.

    Returns the nodeSelector that reaches them, each node's labels by name, and
    the node names of each group.
    """
    selector = {SET_LABEL: f"set-{uuid.uuid4().hex[:6]}"}
    labels_of: dict[str, dict[str, str]] = {}
    names: list[list[str]] = []
    for count, gpus, labels in groups:
        pool = gpu_nodes(count, gpus=gpus, labels={**selector, **labels})
        names.append(list(pool.nodes))
        for name in pool.nodes:
            labels_of[name] = labels
    return selector, labels_of, names


def bound_gang(raw: Any, namespace: str, size: int, what: str) -> list[dict[str, Any]]:
    return wait_until(
        lambda: (lambda ps: ps if len(bound(ps)) == size else None)(list_pods(raw, namespace)),
        what=what,
    )


def create_gang(
    raw: Any,
    namespace: str,
    name: str,
    size: int,
    gpus: int,
    selector: dict[str, str],
    *,
    annotations: dict[str, str] | None = None,
    **spec: Any,
) -> None:
    create(raw, namespace, podgroup(name, size, **spec))
    for i in range(size):
        create(
            raw,
            namespace,
            gang_pod(
                f"{name}-{i}", name, gpus=gpus, node_selector=selector, annotations=annotations
            ),
        )


def test_three_one_gpu_workers_all_land_on_the_four_gpu_node_not_across_two(
    gang_stack, raw, namespace, gpu_nodes
) -> None:
    selector, _, (_, four) = node_set(gpu_nodes, (1, 2, {}), (1, 4, {}))
    create_gang(raw, namespace, "trio", 3, 1, selector)
    pods = bound_gang(raw, namespace, 3, "all 3 workers bound")
    assert {p["spec"]["nodeName"] for p in pods} == set(four)


def test_a_gang_with_a_required_zone_never_spans_zones(
    gang_stack, raw, namespace, gpu_nodes
) -> None:
    zone_a, zone_b = f"{namespace}-a", f"{namespace}-b"
    # Fewest nodes alone would put three members on zone b's 3-GPU node and the
    # fourth in zone a; zone a alone holds all four, on its two nodes.
    selector, labels_of, _ = node_set(gpu_nodes, (2, 2, {ZONE: zone_a}), (1, 3, {ZONE: zone_b}))
    create_gang(raw, namespace, "zoned", 4, 1, selector, topology={"required": ZONE})
    pods = bound_gang(raw, namespace, 4, "all 4 members bound in one zone")
    assert {labels_of[p["spec"]["nodeName"]][ZONE] for p in pods} == {zone_a}

    # A gang no single zone holds now (zone b has 3 GPUs free) waits, and says so.
    create_gang(raw, namespace, "toobig", 4, 1, selector, topology={"required": ZONE})
    message = wait_until(
        lambda: (lambda m: m if "no single" in m else None)(
            condition_message(get_podgroup(raw, namespace, "toobig"))
        ),
        what="toobig's hold message",
    )
    assert message.startswith(
        f"gang {namespace}/toobig: no single {ZONE} domain fits all 4 members (needs 4 nvidia.com/gpu in all;"
    ), message
    toobig = [p for p in list_pods(raw, namespace) if p["metadata"]["name"].startswith("toobig-")]
    assert bound(toobig) == []


def test_a_kueue_required_topology_annotation_keeps_the_gang_in_one_zone(
    gang_stack, raw, namespace, gpu_nodes
) -> None:
    zone_a, zone_b = f"{namespace}-a", f"{namespace}-b"
    # Without the annotation zone a's 3-GPU node would take three members, zone b the last.
    selector, labels_of, _ = node_set(gpu_nodes, (1, 3, {ZONE: zone_a}), (2, 2, {ZONE: zone_b}))
    create_gang(
        raw, namespace, "kueued", 4, 1, selector, annotations={KUEUE_REQUIRED_TOPOLOGY: ZONE}
    )
    pods = bound_gang(raw, namespace, 4, "all 4 members bound in one zone")
    assert {labels_of[p["spec"]["nodeName"]][ZONE] for p in pods} == {zone_b}


def test_a_gang_preferring_racks_uses_one_rack_when_one_fits(
    gang_stack, raw, namespace, gpu_nodes
) -> None:
    # Fewest nodes alone takes a 3-GPU node and then the tightest node for the last
    # worker (a 2-GPU node in another rack); rack r3 holds all four on its two nodes.
    selector, labels_of, _ = node_set(
        gpu_nodes,
        (1, 2, {RACK: f"{namespace}-r1"}),
        (1, 2, {RACK: f"{namespace}-r2"}),
        (2, 3, {RACK: f"{namespace}-r3"}),
    )
    create_gang(raw, namespace, "racked", 4, 1, selector, topology={"preferred": [RACK]})
    pods = bound_gang(raw, namespace, 4, "all 4 members bound")
    assert {labels_of[p["spec"]["nodeName"]][RACK] for p in pods} == {f"{namespace}-r3"}
