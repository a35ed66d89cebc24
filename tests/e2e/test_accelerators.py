"""Every accelerator on the real kube-scheduler, API server and KWOK nodes (issue 29).

A gang of MIG slices (`nvidia.com/mig-1g.10gb`) and one of `amd.com/gpu` are each
held whole, with a hold naming the resource, while their nodes are short, then
bound whole on the fewest nodes once a node that holds them joins; the gauge of
accelerators per pool carries the resource as a label. A gang whose PodGroup
prefers the NVLink clique label (`nvidia.com/gpu.clique`, policies/binpack-nvlink.yaml)
stays in one clique. With GPU routing on, a plain pod of any accelerator resource is
routed to the gang scheduler, and one of another extended resource is not.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from extender.devcluster.stack import GangStack
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
from tests.e2e.test_bind_integrity import gpu_routing  # noqa: F401 (a fixture)
from tests.e2e.test_metrics import scrape, value

SET_LABEL = "e2e.gang-extender.io/accelerator-set"
METRIC_POOL_LABEL = "gang-extender.io/pool"  # what gang_extender_gpus groups nodes by
CLIQUE = "nvidia.com/gpu.clique"

pytestmark = pytest.mark.usefixtures("no_partial_gangs")


def create_gang(
    raw: Any,
    namespace: str,
    name: str,
    size: int,
    amount: int,
    resource: str,
    selector: dict[str, str],
    **spec: Any,
) -> None:
    create(raw, namespace, podgroup(name, size, **spec))
    for i in range(size):
        create(
            raw,
            namespace,
            gang_pod(f"{name}-{i}", name, gpus=amount, resource=resource, node_selector=selector),
        )


def held_then_bound_whole(
    raw: Any, namespace: str, gpu_nodes: Any, resource: str, *, size: int, amount: int
) -> tuple[dict[str, str], list[str]]:
    """A node too small for the gang: held whole, the hold naming `resource`; then a
    node and a bigger one join: bound whole on the one that holds it all. Returns
    the node set's selector and the node the gang went to."""
    selector = {SET_LABEL: f"set-{uuid.uuid4().hex[:6]}"}
    pool = selector[SET_LABEL]
    labels = {**selector, METRIC_POOL_LABEL: pool}
    gpu_nodes(1, gpus=amount, labels=labels, resource=resource)
    create_gang(raw, namespace, "acc", size, amount, resource, selector)
    need = size * amount
    message = wait_until(
        lambda: (lambda m: m if "placeable" in m else None)(
            condition_message(get_podgroup(raw, namespace, "acc"))
        ),
        what="the gang's hold message",
    )
    assert f"needs {need} {resource} in all" in message, message
    assert bound(list_pods(raw, namespace)) == []  # held whole: no member bound
    # Two nodes join: one that holds the whole gang, one that holds all but one member.
    whole = gpu_nodes(1, gpus=need, labels=labels, resource=resource).nodes
    gpu_nodes(1, gpus=need - amount, labels=labels, resource=resource)
    pods = wait_until(
        lambda: (lambda ps: ps if len(bound(ps)) == size else None)(list_pods(raw, namespace)),
        what=f"all {size} members bound",
    )
    # Fewest nodes: the one node that holds all of it.
    assert {p["spec"]["nodeName"] for p in pods} == set(whole)
    return selector, whole


def test_a_mig_slice_gang_is_held_whole_then_bound_whole_on_the_fewest_nodes(
    gang_stack, raw, namespace, gpu_nodes
) -> None:
    held_then_bound_whole(raw, namespace, gpu_nodes, "nvidia.com/mig-1g.10gb", size=2, amount=3)


def test_an_amd_gang_is_held_whole_then_bound_whole_and_counted_under_its_resource(
    gang_stack: GangStack, raw, namespace, gpu_nodes
) -> None:
    selector, _ = held_then_bound_whole(raw, namespace, gpu_nodes, "amd.com/gpu", size=3, amount=2)
    pool = selector[SET_LABEL]
    # 2 + 6 + 4 amd.com/gpu in the pool, 6 of them bound to the gang.
    samples = wait_until(
        lambda: (
            lambda s: (
                s
                if value(
                    s,
                    "gang_extender_gpus",
                    default=-1.0,
                    pool=pool,
                    resource="amd.com/gpu",
                    state="bound",
                )
                == 6
                else None
            )
        )(scrape(gang_stack)),
        what="the amd.com/gpu gauge of the pool",
    )
    free = value(samples, "gang_extender_gpus", pool=pool, resource="amd.com/gpu", state="free")
    assert free == 12 - 6
    assert (
        "gang_extender_gpus",
        (("pool", pool), ("resource", "nvidia.com/gpu"), ("state", "bound")),
    ) not in samples  # the pool has no nvidia.com/gpu


def test_a_gang_preferring_the_nvlink_clique_stays_in_one_clique(
    gang_stack, raw, namespace, gpu_nodes
) -> None:
    selector = {SET_LABEL: f"set-{uuid.uuid4().hex[:6]}"}
    one, two = f"{namespace}.1", f"{namespace}.2"
    # Clique 1: two 4-GPU nodes; clique 2: a 6-GPU and a 2-GPU node. No node holds
    # 2 x 4 GPUs, so any placement takes two nodes; binpack alone may take the 6-GPU
    # node and one of clique 1's. Only clique 1 holds the gang in one clique.
    first = gpu_nodes(2, gpus=4, labels={**selector, CLIQUE: one}).nodes
    second = gpu_nodes(1, gpus=6, labels={**selector, CLIQUE: two}).nodes
    second += gpu_nodes(1, gpus=2, labels={**selector, CLIQUE: two}).nodes
    create_gang(
        raw,
        namespace,
        "nvl",
        2,
        4,
        "nvidia.com/gpu",
        selector,
        topology={"preferred": [CLIQUE]},
    )
    pods = wait_until(
        lambda: (lambda ps: ps if len(bound(ps)) == 2 else None)(list_pods(raw, namespace)),
        what="both members bound",
    )
    used = {p["spec"]["nodeName"] for p in pods}
    assert used == set(first), used


@pytest.mark.usefixtures("gpu_routing")
def test_routing_sends_plain_pods_of_every_accelerator_and_only_those(
    gang_stack, raw, injected_namespace
) -> None:
    # deploy/webhook.yaml's requests-accelerators matchCondition, on the real API
    # server, and the service's own check behind it.
    for name, resource, routed in (
        ("amd", "amd.com/gpu", True),
        ("mig", "nvidia.com/mig-1g.10gb", True),
        ("neuron", "aws.amazon.com/neuroncore", True),
        ("other", "example.com/fpga", False),
    ):
        pod = create(
            raw,
            injected_namespace,
            gang_pod(name, "", gpus=1, resource=resource, scheduler="default-scheduler"),
        )
        expected = "gang-extender" if routed else "default-scheduler"
        assert pod["spec"]["schedulerName"] == expected, (resource, pod["spec"]["schedulerName"])
