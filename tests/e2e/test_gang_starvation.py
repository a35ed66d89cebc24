"""No starvation on the real kube-scheduler, API server and KWOK GPU nodes (issue 13, item 2).

A 4-GPU gang waits on a 4-GPU node where 1-GPU pods keep finishing and being
replaced. Before its starvationSeconds each freed GPU goes to a replacement (the
gang never fits); once its reservation starts (its PodGroup condition says
"reserving <node>"), no 1-GPU pod is bound there any more: the replacements are
refused by the extender's filter, naming the gang, and the gang is bound when the
last GPU it needs frees. The 1-GPU pods use gang-extender's profile, so
kube-scheduler asks the extender about them.
"""

from __future__ import annotations

from typing import Any

import pytest

from extender.kube.rawapi import RawApi, path_of
from tests.e2e.gang_fixtures import (  # noqa: F401 (no_partial_gangs is a fixture)
    bound,
    bound_live_names,
    create,
    delete_pod,
    gang_pod,
    get_pod,
    no_partial_gangs,
    pods_by_name,
    starve_until_reserved,
    starving_gang_bound,
    unschedulable,
    wait_until,
)

pytestmark = pytest.mark.usefixtures("no_partial_gangs")

STARVATION_SECONDS = 5
SMALL = "e2e-small"


def small_pod(index: int, selector: dict[str, str]) -> dict[str, Any]:
    pod = gang_pod(f"small-{index}", "", gpus=1, node_selector=selector)
    pod["metadata"]["labels"]["role"] = SMALL
    return pod


def bound_smalls(raw: RawApi, namespace: str) -> set[str]:
    return bound_live_names(raw, namespace, f"role={SMALL}")


def refusals(raw: RawApi, namespace: str) -> list[str]:
    """FailedScheduling Event messages about the 1-GPU pods."""
    events = raw.call("GET", path_of("api", "v1", "namespaces", namespace, "events"))["items"]
    return [
        str(e.get("message", ""))
        for e in events
        if e.get("reason") == "FailedScheduling"
        and str((e.get("involvedObject") or {}).get("name", "")).startswith("small-")
    ]


def test_a_big_gang_starved_by_churning_one_gpu_pods_reserves_its_node_and_is_bound(
    gang_stack, raw, namespace, gpu_nodes
) -> None:
    pool = gpu_nodes(1, gpus=4)
    selector, node = pool.node_selector, pool.nodes[0]
    next_index = starve_until_reserved(
        raw, namespace, pool, small_pod, f"role={SMALL}", starvation_seconds=STARVATION_SECONDS
    )

    # From here on: the 1-GPU pods bound now are the only ones ever bound on the node.
    before = bound_smalls(raw, namespace)
    after: list[str] = []
    while not starving_gang_bound(raw, namespace):
        left = sorted(before & bound_smalls(raw, namespace))
        if not left:
            break
        delete_pod(raw, namespace, left[0])
        replacement = f"small-{next_index}"
        create(raw, namespace, small_pod(next_index, selector))
        after.append(replacement)
        next_index += 1
        wait_until(
            lambda r=replacement: (
                unschedulable(get_pod(raw, namespace, r)) or starving_gang_bound(raw, namespace)
            ),
            what="the replacement to be refused, or the gang to be bound",
        )
    wait_until(lambda: starving_gang_bound(raw, namespace), what="the starving gang to be bound")

    assert bound_smalls(raw, namespace) <= before, "a 1-GPU pod took a GPU the gang reserved"
    pods = pods_by_name(raw, namespace)
    assert {p["spec"].get("nodeName") for n, p in pods.items() if n.startswith("big-")} == {node}
    assert all(not pods[name]["spec"].get("nodeName") for name in after)
    # The extender's filter said why: the GPUs are the gang's (kube-scheduler's
    # FailedScheduling Events on the refused 1-GPU pods). kube-scheduler writes its
    # Events asynchronously, after the pod's condition: on a loaded machine they can
    # still be on their way when the gang is bound.
    wait_until(
        lambda: any(f"reserved for gang {namespace}/big" in m for m in refusals(raw, namespace)),
        what=f"a FailedScheduling Event saying the GPUs are reserved for gang {namespace}/big",
    )
