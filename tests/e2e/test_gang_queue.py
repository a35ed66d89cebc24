"""Queue order on the real kube-scheduler, API server and KWOK GPU nodes (issue 13, item 1).

Two gangs wait for the same two GPUs, held by a running pod. The higher-priority
gang (its PriorityClass), created later, is bound first when the pod that holds
the room is deleted; the lower gang stays held, and its hold names the gang ahead
while both wait (kube-scheduler asks about neither then: its own filters see no GPU).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from extender.devcluster.priority_classes import temporary_priority_classes
from extender.kube.rawapi import RawApi, path_of
from tests.e2e.gang_fixtures import (  # noqa: F401 (no_partial_gangs is a fixture)
    bound,
    condition_message,
    create,
    delete_pod,
    gang_pod,
    get_podgroup,
    list_pods,
    no_partial_gangs,
    podgroup,
    wait_until,
)

HIGH_PRIORITY = 1000

pytestmark = pytest.mark.usefixtures("no_partial_gangs")


@pytest.fixture
def high_priority_class(raw: RawApi) -> Iterator[str]:
    """A PriorityClass that never preempts: the test is about order, not eviction."""
    name = f"e2e-queue-high-{uuid.uuid4().hex[:6]}"
    with temporary_priority_classes(raw, {name: HIGH_PRIORITY}, preemptionPolicy="Never"):
        yield name


def member(name: str, group: str, selector: dict[str, str], priority_class: str = "") -> Any:
    pod = gang_pod(name, group, gpus=1, node_selector=selector)
    if priority_class:
        pod["spec"]["priorityClassName"] = priority_class
    return pod


def messages_about(raw: RawApi, namespace: str, names: set[str]) -> list[str]:
    """Every Event message about those pods or their PodGroup (FailedScheduling, GangWaiting)."""
    events = raw.call("GET", path_of("api", "v1", "namespaces", namespace, "events"))["items"]
    return [
        str(e.get("message", ""))
        for e in events
        if (e.get("involvedObject") or {}).get("name") in names
    ]


def test_a_higher_priority_gang_created_later_is_bound_first_when_room_appears(
    gang_stack, raw, namespace, gpu_nodes, high_priority_class
) -> None:
    pool = gpu_nodes(1, gpus=2)
    selector = pool.node_selector
    create(raw, namespace, gang_pod("holder", "", gpus=2, node_selector=selector))
    wait_until(
        lambda: bound(list_pods(raw, namespace)), what="the pod holding both GPUs to be bound"
    )

    # The low gang first (older), then the high one: both need both GPUs.
    create(raw, namespace, podgroup("low", 2))
    for i in range(2):
        create(raw, namespace, member(f"low-{i}", "low", selector))
    create(raw, namespace, podgroup("high", 2))
    for i in range(2):
        create(raw, namespace, member(f"high-{i}", "high", selector, high_priority_class))
    high_pods = [p for p in list_pods(raw, namespace) if p["metadata"]["name"].startswith("high")]
    assert {p["spec"].get("priority") for p in high_pods} == {HIGH_PRIORITY}

    # While both wait for the room (neither planned), the low gang's hold already
    # names the gang that goes first.
    ahead = f"waiting behind {namespace}/high (priority {HIGH_PRIORITY})"
    names = {"low", "low-0", "low-1"}
    wait_until(
        lambda: (
            ahead in condition_message(get_podgroup(raw, namespace, "low"))
            or any(ahead in m for m in messages_about(raw, namespace, names))
        ),
        what="the low gang's hold to name the held gang ahead before room appears",
    )

    delete_pod(raw, namespace, "holder")
    wait_until(
        lambda: (
            {p["metadata"]["name"] for p in bound(list_pods(raw, namespace))}
            == {"high-0", "high-1"}
        ),
        what="the high-priority gang to be bound",
    )
    assert [
        p["metadata"]["name"]
        for p in bound(list_pods(raw, namespace))
        if p["metadata"]["name"].startswith("low")
    ] == []

    wait_until(
        lambda: (
            ahead in condition_message(get_podgroup(raw, namespace, "low"))
            or any(ahead in m for m in messages_about(raw, namespace, names))
        ),
        what="the low gang's hold to name the gang ahead",
    )
