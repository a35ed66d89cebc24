"""Task indexes for pods that bring none: lowest free, never twice, also under concurrent creates."""

from __future__ import annotations

import asyncio
import random
import threading
import time
from typing import Any

import pytest

from extender.domain.membership import (
    TASK_INDEX_ANNOTATION,
    VOLCANO_GROUP_ANNOTATION,
)
from extender.kube.indexes import IndexAllocator, NoFreeIndexError, api_pod_lister
from tests.builders import make_pod
from tests.unit.test_webhook_wiring import FakeApiServer

NS = "team"


class FakeCluster:
    """The group's pods as the API server would list them; thread-safe (the lister runs in one)."""

    def __init__(self, pods: list[dict[str, Any]] | None = None, *, latency: float = 0.0) -> None:
        self.pods = list(pods or [])
        self.latency = latency
        self.lists = 0
        self._lock = threading.Lock()

    def list(self, namespace: str, group: str) -> list[dict[str, Any]]:
        time.sleep(self.latency * random.random())
        with self._lock:
            self.lists += 1
            return list(self.pods)

    def store(self, pod: dict[str, Any]) -> None:
        with self._lock:
            self.pods.append(pod)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def member(
    name: str, index: int, *, task: str = "worker", phase: str = "Running"
) -> dict[str, Any]:
    return (
        make_pod(name, NS)
        .group("g")
        .task(task)
        .annotation(TASK_INDEX_ANNOTATION, str(index))
        .phase(phase)
        .obj()
    )


def allocate(
    allocator: IndexAllocator,
    *,
    task: str = "worker",
    limit: int | None = None,
    dry_run: bool = False,
    group: str = "g",
) -> int:
    return asyncio.run(
        allocator.allocate(namespace=NS, group=group, task=task, limit=limit, dry_run=dry_run)
    )


def test_the_lowest_free_index_fills_holes_first() -> None:
    cluster = FakeCluster([member("a", 0), member("c", 2)])
    assert allocate(IndexAllocator(lister=cluster.list)) == 1


def test_tasks_are_numbered_separately() -> None:
    cluster = FakeCluster([member("m", 0, task="master")])
    assert allocate(IndexAllocator(lister=cluster.list), task="worker") == 0


def test_a_finished_pod_frees_its_index_for_its_replacement() -> None:
    cluster = FakeCluster([member("a", 0, phase="Failed"), member("b", 1)])
    assert allocate(IndexAllocator(lister=cluster.list)) == 0


def test_an_index_handed_out_but_not_yet_stored_is_not_handed_out_again() -> None:
    allocator = IndexAllocator(lister=FakeCluster().list)
    assert [allocate(allocator) for _ in range(3)] == [0, 1, 2]


def test_an_unseen_index_is_freed_after_the_hold() -> None:
    clock = Clock()
    allocator = IndexAllocator(lister=FakeCluster().list, hold_seconds=60, clock=clock)
    assert allocate(allocator) == 0
    clock.now += 61  # the create failed after admission: no pod ever showed index 0
    assert allocate(allocator) == 0


def test_a_remembered_index_is_forgotten_once_its_pod_is_listed() -> None:
    cluster = FakeCluster()
    allocator = IndexAllocator(lister=cluster.list)
    assert allocate(allocator) == 0
    cluster.store(member("a", 0))
    assert allocate(allocator) == 1
    assert set(allocator.remembered(namespace=NS, group="g")) == {("worker", 1)}


def test_dry_run_remembers_nothing() -> None:
    allocator = IndexAllocator(lister=FakeCluster().list)
    assert allocate(allocator, dry_run=True) == 0
    assert allocator.remembered(namespace=NS, group="g") == {}
    assert allocate(allocator) == 0


def test_a_full_layout_raises_instead_of_handing_out_an_out_of_range_index() -> None:
    cluster = FakeCluster([member("a", 0), member("b", 1)])
    with pytest.raises(NoFreeIndexError) as raised:
        allocate(IndexAllocator(lister=cluster.list), limit=2)
    assert raised.value.limit == 2


def test_release_frees_an_index_whose_pod_was_denied() -> None:
    allocator = IndexAllocator(lister=FakeCluster().list)
    assert allocate(allocator) == 0
    allocator.release(namespace=NS, group="g", task="worker", index=0)
    assert allocate(allocator) == 0


def test_twenty_concurrent_creates_get_twenty_distinct_indexes() -> None:
    cluster = FakeCluster(latency=0.05)
    allocator = IndexAllocator(lister=cluster.list)

    async def create(name: str) -> int:
        index = await allocator.allocate(
            namespace=NS, group="g", task="worker", limit=None, dry_run=False
        )
        # The API server stores the pod some time after admission answered.
        await asyncio.sleep(random.random() * 0.005)
        cluster.store(member(name, index))
        return index

    async def main() -> list[int]:
        return await asyncio.gather(*(create(f"p{i}") for i in range(20)))

    assert sorted(asyncio.run(main())) == list(range(20))


def test_one_group_is_listed_by_one_allocation_at_a_time() -> None:
    # Why: a list taken before a pod was stored, judged after that pod's index was
    # forgotten as "seen", would hand the index out again. The lock rules that out.
    active = 0
    most = 0
    guard = threading.Lock()

    def lister(namespace: str, group: str) -> list[dict[str, Any]]:
        nonlocal active, most
        with guard:
            active += 1
            most = max(most, active)
        time.sleep(0.005)
        with guard:
            active -= 1
        return []

    allocator = IndexAllocator(lister=lister)

    async def main() -> list[int]:
        return await asyncio.gather(
            *(
                allocator.allocate(namespace=NS, group="g", task="w", limit=None, dry_run=False)
                for _ in range(10)
            )
        )

    assert sorted(asyncio.run(main())) == list(range(10))
    assert most == 1


def test_groups_do_not_wait_for_each_other() -> None:
    release = threading.Event()

    def lister(namespace: str, group: str) -> list[dict[str, Any]]:
        if group == "slow":
            release.wait(timeout=5)
        return []

    allocator = IndexAllocator(lister=lister)

    async def main() -> int:
        slow = asyncio.create_task(
            allocator.allocate(namespace=NS, group="slow", task="w", limit=None, dry_run=False)
        )
        fast = await asyncio.wait_for(
            allocator.allocate(namespace=NS, group="fast", task="w", limit=None, dry_run=False),
            timeout=2,
        )
        release.set()
        await slow
        return fast

    assert asyncio.run(main()) == 0


def test_api_errors_propagate_and_leave_nothing_remembered() -> None:
    def lister(namespace: str, group: str) -> list[dict[str, Any]]:
        raise OSError("connection refused")

    allocator = IndexAllocator(lister=lister)
    with pytest.raises(OSError):
        allocate(allocator)
    assert allocator.remembered(namespace=NS, group="g") == {}


def test_exactly_one_of_api_client_or_lister() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        IndexAllocator()


class TestApiPodLister:
    def test_lists_the_namespace_and_keeps_the_groups_pods(self) -> None:
        server = FakeApiServer()
        for pod in [
            member("mine", 0),
            make_pod("volcano", NS).annotation(VOLCANO_GROUP_ANNOTATION, "g").obj(),
            make_pod("other", NS).group("h").obj(),
            make_pod("torn", NS).group("g").annotation(VOLCANO_GROUP_ANNOTATION, "h").obj(),
            make_pod("loner", NS).obj(),
        ]:
            server.put("pods", pod)
        pods = api_pod_lister(server.client())(NS, "g")
        assert sorted(pod["metadata"]["name"] for pod in pods) == ["mine", "volcano"]

    def test_allocates_through_the_api(self) -> None:
        server = FakeApiServer()
        server.put("pods", member("a", 0))
        assert allocate(IndexAllocator(server.client())) == 1
