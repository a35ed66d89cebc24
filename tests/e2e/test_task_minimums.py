"""Task minimums on the real kube-scheduler, API server and KWOK GPU nodes (issue 12, item 1).

A group declaring `minTaskMember {master: 1, worker: 3}` (on its PodGroup, or as the
members' `gang-extender.io/tasks` annotation) is never bound without its master,
however many workers exist: it waits, saying which task is short, and once the
master exists the master and three workers are bound together.

Each test has its own pool of fake GPU nodes with room for exactly four one-GPU
members: creation order alone would plan four of the five workers, and no master.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from extender.domain.objects.membership import MIN_AVAILABLE_ANNOTATION, TASKS_ANNOTATION
from extender.kube.rawapi import RawApi
from tests.e2e.gang_fixtures import (  # noqa: F401 (no_partial_gangs is a fixture)
    BindRecorder,
    bound,
    condition_message,
    create,
    gang_pod,
    get_podgroup,
    list_pods,
    no_partial_gangs,
    podgroup,
    unschedulable_message,
    wait_until,
)

HOLD_OBSERVATION_SECONDS = 6  # long enough for several scheduler retries of a held gang
WORKERS = 5

pytestmark = pytest.mark.usefixtures("no_partial_gangs")


def create_members(
    raw: RawApi,
    namespace: str,
    group: str,
    task: str,
    names: list[str],
    node_selector: dict[str, str],
    annotations: dict[str, str] | None = None,
) -> None:
    for name in names:
        create(
            raw,
            namespace,
            gang_pod(
                name,
                group,
                gpus=1,
                task=task,
                node_selector=node_selector,
                annotations=annotations,
            ),
        )


def bind_master_with_the_oldest_workers(
    raw: RawApi, namespace: str, group: str, create_master: Any, recorder: BindRecorder
) -> None:
    """Create the master; the master and the three oldest workers are bound, nothing else."""
    nothing_bound_before = time.time()
    create_master()
    expected = {f"{group}-master", *(f"{group}-worker-{i}" for i in range(3))}
    wait_until(
        lambda: {p["metadata"]["name"] for p in bound(list_pods(raw, namespace))} >= expected,
        what="the master and three workers bound",
    )
    time.sleep(HOLD_OBSERVATION_SECONDS)  # the two other workers have no room: they stay
    recorder.stop()
    assert {p["metadata"]["name"] for p in bound(list_pods(raw, namespace))} == expected
    assert set(recorder.first_bound) == expected
    assert min(recorder.first_bound.values()) >= nothing_bound_before, (
        "a member was bound before the master existed"
    )


def test_five_workers_wait_for_their_master_then_bind_with_it(
    gang_stack, raw, namespace, gpu_nodes
) -> None:
    pool = gpu_nodes(1, gpus=4)
    recorder = BindRecorder(raw, namespace)
    create(raw, namespace, podgroup("hvd", 4, minTaskMember={"master": 1, "worker": 3}))
    workers = [f"hvd-worker-{i}" for i in range(WORKERS)]
    create_members(raw, namespace, "hvd", "worker", workers, pool.node_selector)

    held = (
        f"gang {namespace}/hvd: task master: 0/1 members exist; waiting for the rest to be created"
    )
    wait_until(
        lambda: condition_message(get_podgroup(raw, namespace, "hvd")) == held,
        what="the PodGroup condition to name the short task",
    )
    assert get_podgroup(raw, namespace, "hvd")["status"]["conditions"][0]["reason"] == (
        "WaitingForMembers"
    )
    time.sleep(HOLD_OBSERVATION_SECONDS)
    assert bound(list_pods(raw, namespace)) == [], "no worker may be bound without the master"

    bind_master_with_the_oldest_workers(
        raw,
        namespace,
        "hvd",
        lambda: create_members(raw, namespace, "hvd", "master", ["hvd-master"], pool.node_selector),
        recorder,
    )


def test_workers_annotated_with_their_task_layout_wait_for_their_master(
    gang_stack, raw, namespace, gpu_nodes
) -> None:
    pool = gpu_nodes(1, gpus=4)
    recorder = BindRecorder(raw, namespace)
    annotations = {MIN_AVAILABLE_ANNOTATION: "4", TASKS_ANNOTATION: "master=1,worker=3"}
    workers = [f"anno-worker-{i}" for i in range(WORKERS)]
    create_members(raw, namespace, "anno", "worker", workers, pool.node_selector, annotations)

    # The hold reaches each worker's PodScheduled condition through kube-scheduler.
    wait_until(
        lambda: all(
            f"gang {namespace}/anno: task master: 0/1 members exist" in unschedulable_message(p)
            for p in list_pods(raw, namespace)
        ),
        what="every worker's PodScheduled condition to name the short task",
    )
    time.sleep(HOLD_OBSERVATION_SECONDS)
    assert bound(list_pods(raw, namespace)) == [], "no worker may be bound without the master"

    bind_master_with_the_oldest_workers(
        raw,
        namespace,
        "anno",
        lambda: create_members(
            raw, namespace, "anno", "master", ["anno-master"], pool.node_selector, annotations
        ),
        recorder,
    )
