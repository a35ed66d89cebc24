"""A busy default scheduler, with pods already pending, cannot take the GPUs a
starving gang has reserved (issue 13, item 2), on the real kube-scheduler, API
server and KWOK GPU nodes.

Placeholder pods alone lose that race (test_gang_placeholders.py says why). Here the
gang runs in a namespace the webhook wires, so its members carry the toleration of
the reservation fence: once the reservation starts, the node is tainted
gang-extender.io/reserved:NoSchedule, the default scheduler's pending 1-GPU pods are
kept off it as each GPU frees, the gang is bound when the last one frees, and the
taint is gone once it is.
"""

from __future__ import annotations

import pytest

from extender.domain.cluster.fences import FENCE_TAINT_KEY
from extender.domain.objects.membership import GROUP_LABEL
from extender.kube.rawapi import RawApi, path_of
from tests.e2e.gang_fixtures import (  # noqa: F401 (no_partial_gangs is a fixture)
    STARVING_GANG,
    bound_live_names,
    create,
    default_scheduler_pods,
    delete_pod,
    gang_pod,
    get_pod,
    list_pods,
    no_partial_gangs,
    pods_by_name,
    starve_until_reserved,
    starving_gang_bound,
    unschedulable,
    wait_until,
)

pytestmark = pytest.mark.usefixtures("no_partial_gangs")

STARVATION_SECONDS = 5
SMALL = "e2e-default-pending"
PENDING_REPLACEMENTS = 2


default_pod = default_scheduler_pods(SMALL)


def fence_of(raw: RawApi, node: str) -> str | None:
    """The value of the node's fence taint, None when it has none."""
    taints = (raw.call("GET", path_of("api", "v1", "nodes", node)).get("spec") or {}).get(
        "taints"
    ) or []
    return next((t.get("value") for t in taints if t["key"] == FENCE_TAINT_KEY), None)


def test_pending_default_scheduler_pods_never_take_a_gpu_of_a_fenced_reservation(
    gang_stack, raw, injected_namespace, gpu_nodes
) -> None:
    namespace = injected_namespace
    pool = gpu_nodes(1, gpus=4)
    selector, node = pool.node_selector, pool.nodes[0]
    next_index = starve_until_reserved(
        raw, namespace, pool, default_pod, f"role={SMALL}", starvation_seconds=STARVATION_SECONDS
    )
    members = list_pods(raw, namespace, f"{GROUP_LABEL}={STARVING_GANG}")
    assert all(
        any(t.get("key") == FENCE_TAINT_KEY for t in m["spec"].get("tolerations") or [])
        for m in members
    ), "the webhook gave the members the fence toleration"
    value = wait_until(lambda: fence_of(raw, node), what=f"the fence taint on {node}")
    assert value == f"{namespace}.{STARVING_GANG}"

    # The busy default scheduler: replacements wait, pending, for any GPU that frees.
    pending = []
    for _ in range(PENDING_REPLACEMENTS):
        pod = default_pod(next_index, selector)
        create(raw, namespace, pod)
        pending.append(pod["metadata"]["name"])
        next_index += 1
    for name in pending:
        wait_until(
            lambda n=name: unschedulable(get_pod(raw, namespace, n)),
            what=f"{name} to be found no room by the default scheduler",
        )
    before = sorted(bound_live_names(raw, namespace, f"role={SMALL}"))
    for name in before:
        delete_pod(raw, namespace, name)  # each frees a GPU while the replacements pend
        wait_until(
            lambda n=name: n not in {p["metadata"]["name"] for p in list_pods(raw, namespace)},
            what=f"{name} to be gone",
        )
    wait_until(lambda: starving_gang_bound(raw, namespace), what="the starving gang to be bound")

    pods = pods_by_name(raw, namespace)
    on_node = sorted(n for n in pending if pods[n]["spec"].get("nodeName") == node)
    assert on_node == [], f"pending default-scheduler pods took reserved GPUs: {on_node}"
    gang = [p for p in pods.values() if (p["metadata"].get("labels") or {}).get(GROUP_LABEL)]
    assert {p["spec"].get("nodeName") for p in gang} == {node}
    wait_until(lambda: fence_of(raw, node) is None, what="the fence taint gone once bound")
    # Still pending: the gang holds all four GPUs now, and nothing over-committed the node.
    assert all(not pods_by_name(raw, namespace)[n]["spec"].get("nodeName") for n in pending)
