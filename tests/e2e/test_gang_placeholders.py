"""Placeholder pods keep a busy default scheduler off a starving gang's GPUs (issue 13,
item 2), on the real kube-scheduler, API server and KWOK GPU nodes.

A 4-GPU gang of gang-extender waits on a 4-GPU node where 1-GPU pods of the DEFAULT
scheduler keep finishing and being replaced. Those never ask the extender, so the
reservation alone cannot stop them; once it starts, each GPU that frees there is
requested by a placeholder pod (label gang-extender.io/placeholder), which the
default scheduler counts like any pod: no 1-GPU pod created after the placeholder
appeared is bound on the node, the gang is bound when the last GPU frees, and no
placeholder remains after it binds.

A pod that only carries the placeholder label (anyone who may create pods can
write it) is no gang's room and is never deleted: only sealed pods the service
created are placeholders (docs/deploy.md#trust-model).

Not shown here, because it does not hold: a default-scheduler pod already PENDING
when a GPU frees races the placeholder for it (both react to the same delete
event) and often wins. Each replacement here gives up once refused, so none is
pending when the next GPU frees (podgroup.md#starvation says so).
"""

from __future__ import annotations

from typing import Any

import pytest

from extender.domain.objects.membership import GROUP_LABEL
from extender.domain.objects.model import PLACEHOLDER_LABEL
from extender.kube.rawapi import RawApi
from tests.e2e.gang_fixtures import (  # noqa: F401 (no_partial_gangs is a fixture)
    bound,
    bound_live_names,
    condition_message,
    create,
    default_scheduler_pods,
    delete_pod,
    gang_pod,
    get_pod,
    get_podgroup,
    list_pods,
    live,
    no_partial_gangs,
    podgroup,
    pods_by_name,
    starve_until_reserved,
    starving_gang_bound,
    unschedulable,
    wait_until,
)

pytestmark = pytest.mark.usefixtures("no_partial_gangs")

STARVATION_SECONDS = 5
SMALL = "e2e-default-small"


default_pod = default_scheduler_pods(SMALL)


def bound_smalls(raw: RawApi, namespace: str) -> set[str]:
    return bound_live_names(raw, namespace, f"role={SMALL}")


def placeholders(raw: RawApi, namespace: str) -> list[dict[str, Any]]:
    return list_pods(raw, namespace, f"{PLACEHOLDER_LABEL}=big")


def gpus_taken(raw: RawApi, namespace: str, node: str, gone: str) -> int:
    """GPUs requested on `node` by pods bound there (placeholders and members included),
    once the deleted pod `gone` is gone from the list."""
    pods = list_pods(raw, namespace)
    if any(p["metadata"]["name"] == gone for p in pods):
        return 0
    return sum(
        int(c["resources"].get("requests", {}).get("nvidia.com/gpu", 0))
        for p in live(bound(pods))
        if p["spec"].get("nodeName") == node
        for c in p["spec"]["containers"]
    )


def describe(raw: RawApi, namespace: str) -> str:
    """Every pod: name, node, phase (for a failure message)."""
    return ", ".join(
        f"{p['metadata']['name']}@{p['spec'].get('nodeName') or '-'}"
        f"/{(p.get('status') or {}).get('phase')}"
        for p in list_pods(raw, namespace)
    )


def get_pod_node(raw: RawApi, namespace: str, name: str) -> str:
    return str(((get_pod(raw, namespace, name) or {}).get("spec") or {}).get("nodeName") or "")


def test_a_gang_starved_by_the_default_schedulers_pods_gets_placeholders_and_is_bound(
    gang_stack, raw, namespace, gpu_nodes
) -> None:
    pool = gpu_nodes(1, gpus=4)
    selector, node = pool.node_selector, pool.nodes[0]
    next_index = starve_until_reserved(
        raw, namespace, pool, default_pod, f"role={SMALL}", starvation_seconds=STARVATION_SECONDS
    )

    # From here on: each GPU that frees is requested by a placeholder, and a 1-GPU pod
    # of the default scheduler created after one appeared finds no room on the node.
    # (A GPU free when the reservation started may be held by one already.)
    before = bound_smalls(raw, namespace)
    after: list[str] = []
    # A replacement still pending now would race the placeholder for the next GPU that
    # frees (both react to the same delete event; see podgroup.md#starvation): each
    # replacement here gives up once refused, so what is shown is the placeholders' hold.
    pending = [
        p for p in list_pods(raw, namespace, f"role={SMALL}") if not p["spec"].get("nodeName")
    ]
    for pod in pending:
        delete_pod(raw, namespace, pod["metadata"]["name"])
    while not starving_gang_bound(raw, namespace):
        left = sorted(before & bound_smalls(raw, namespace))
        if not left:
            break
        delete_pod(raw, namespace, left[0])
        wait_until(
            lambda gone=left[0]: (
                gpus_taken(raw, namespace, node, gone) >= 4 or starving_gang_bound(raw, namespace)
            ),
            what="the freed GPU to be taken (by a placeholder, we hope), or the gang bound",
        )
        if not placeholders(raw, namespace) and not starving_gang_bound(raw, namespace):
            continue  # none yet: what follows is not the placeholders' doing
        replacement = f"small-{next_index}"
        create(raw, namespace, default_pod(next_index, selector))
        after.append(replacement)
        next_index += 1
        wait_until(
            lambda r=replacement: (
                unschedulable(get_pod(raw, namespace, r)) or starving_gang_bound(raw, namespace)
            ),
            what="the replacement to be refused by the default scheduler, or the gang bound",
        )
        if not get_pod_node(raw, namespace, replacement):
            delete_pod(raw, namespace, replacement)  # refused: it gives up
    if not starving_gang_bound(raw, namespace):
        wait_until(
            lambda: starving_gang_bound(raw, namespace),
            what=f"the starving gang to be bound (before={sorted(before)}, after={after}, "
            f"pods: {describe(raw, namespace)})",
        )

    assert after, "no placeholder pod appeared on the reserved node"
    pods = pods_by_name(raw, namespace)
    members = [p for p in pods.values() if (p["metadata"].get("labels") or {}).get(GROUP_LABEL)]
    assert {p["spec"].get("nodeName") for p in members} == {node}
    taken = [name for name in after if name in pods and pods[name]["spec"].get("nodeName") == node]
    assert taken == [], f"default-scheduler pods created after the placeholder took GPUs: {taken}"
    wait_until(
        lambda: not placeholders(raw, namespace), what="no placeholder left after the gang bound"
    )


def test_a_pod_that_only_carries_the_placeholder_label_is_no_gangs_room_and_survives(
    gang_stack, raw, namespace, gpu_nodes
) -> None:
    """Issue 30, finding 6: any pod labelled gang-extender.io/placeholder counted as that
    gang's room and was deleted by the service as an unwanted placeholder."""
    pool = gpu_nodes(2, gpus=2)
    gpus = {"nvidia.com/gpu": "2"}
    planted = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "train-hold-planted",
            "labels": {PLACEHOLDER_LABEL: "train", "app.kubernetes.io/managed-by": "gang-extender"},
        },
        "spec": {
            "nodeName": pool.nodes[0],  # bound directly, as the service binds its own
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "work",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": gpus, "limits": gpus},
                }
            ],
        },
    }
    create(raw, namespace, planted)
    # A gang of that name needing both nodes' GPUs: with the planted pod counted as its
    # room it would be planned over it (and the pod deleted to make the room real).
    create(raw, namespace, podgroup("train", 2))
    for i in range(2):
        create(
            raw,
            namespace,
            gang_pod(f"train-{i}", "train", gpus=2, node_selector=pool.node_selector),
        )
    held = wait_until(
        lambda: (
            (msg := condition_message(get_podgroup(raw, namespace, "train")))
            and f"gang {namespace}/train:" in msg
            and msg
        ),
        what="the gang's hold message (written on a tick after the planted pod was seen)",
    )
    assert "planned" not in held, held
    pod = get_pod(raw, namespace, "train-hold-planted")
    assert pod is not None and not pod["metadata"].get("deletionTimestamp"), "never deleted"
    assert bound_live_names(raw, namespace, "gang-extender.io/group=train") == set()
