"""Task indexes: lowest free for pods that bring none, checked for pods that bring one.

Never two live members with the same task+index, also under concurrent creates.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from typing import Any

import pytest

from extender.domain.objects.membership import (
    TASK_INDEX_ANNOTATION,
    VOLCANO_GROUP_ANNOTATION,
)
from extender.kube.indexes import (
    Claimant,
    IndexAllocator,
    IndexTakenError,
    NoFreeIndexError,
    PodsUnreadableError,
    api_pod_lister,
)
from extender.kube.rawapi import KubeError
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


@pytest.mark.parametrize(
    ("error", "detail"),
    [
        (
            KubeError(503, "shutting down", "ServiceUnavailable", phrase="Service Unavailable"),
            "API server answered 503 Service Unavailable",
        ),
        (KubeError(0, "API server unreachable: reset"), "API server unreachable: reset"),
    ],
)
def test_a_failed_list_is_pods_unreadable_and_leaves_nothing_remembered(
    error: KubeError, detail: str
) -> None:
    def lister(namespace: str, group: str) -> list[dict[str, Any]]:
        raise error

    allocator = IndexAllocator(lister=lister)
    with pytest.raises(PodsUnreadableError) as raised:
        allocate(allocator)
    assert raised.value.detail == detail
    with pytest.raises(PodsUnreadableError):
        claim(allocator, 0, name="p")
    assert allocator.remembered(namespace=NS, group="g") == {}


def test_exactly_one_of_raw_or_lister() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        IndexAllocator()


def claim(
    allocator: IndexAllocator,
    index: int,
    *,
    name: str = "",
    owner: str = "",
    rewiring: bool = False,
    task: str = "worker",
    dry_run: bool = False,
) -> None:
    asyncio.run(
        allocator.claim(
            namespace=NS,
            group="g",
            task=task,
            index=index,
            claimant=Claimant(name=name, owner=owner, rewiring=rewiring),
            dry_run=dry_run,
        )
    )


def terminating(pod: dict[str, Any]) -> dict[str, Any]:
    pod["metadata"]["deletionTimestamp"] = "2030-01-01T00:00:00Z"
    return pod


class TestClaim:
    """An index the pod brings (annotation, Indexed Job, StatefulSet) is checked, not trusted."""

    def test_a_free_index_is_claimed_and_remembered(self) -> None:
        allocator = IndexAllocator(lister=FakeCluster([member("a", 0)]).list)
        claim(allocator, 1, name="b")
        assert set(allocator.remembered(namespace=NS, group="g")) == {("worker", 1)}

    def test_an_index_a_live_member_holds_is_refused_naming_the_holder(self) -> None:
        allocator = IndexAllocator(lister=FakeCluster([member("a", 0)]).list)
        with pytest.raises(IndexTakenError) as raised:
            claim(allocator, 0, name="b")
        assert (raised.value.holder, raised.value.stored) == ("a", True)
        assert (raised.value.task, raised.value.index) == ("worker", 0)
        assert allocator.remembered(namespace=NS, group="g") == {}

    def test_the_same_index_of_another_task_is_free(self) -> None:
        allocator = IndexAllocator(lister=FakeCluster([member("m", 0, task="master")]).list)
        claim(allocator, 0, name="w", task="worker")

    @pytest.mark.parametrize(
        "holder",
        [
            pytest.param(member("old", 0, phase="Failed"), id="failed"),
            pytest.param(member("old", 0, phase="Succeeded"), id="succeeded"),
            pytest.param(terminating(member("old", 0)), id="terminating"),
        ],
    )
    def test_a_finished_or_terminating_holder_leaves_the_index_to_its_replacement(
        self, holder: dict[str, Any]
    ) -> None:
        claim(IndexAllocator(lister=FakeCluster([holder]).list), 0, name="new")

    def test_a_pod_of_the_same_name_is_the_replacement_itself(self) -> None:
        # A StatefulSet recreates train-0 under the same name; the API server stores one.
        claim(IndexAllocator(lister=FakeCluster([member("train-0", 0)]).list), 0, name="train-0")

    def test_an_index_claimed_but_not_yet_stored_is_refused_to_another_pod(self) -> None:
        clock = Clock()
        allocator = IndexAllocator(lister=FakeCluster().list, hold_seconds=60, clock=clock)
        claim(allocator, 0, name="a")
        clock.now += 15
        with pytest.raises(IndexTakenError) as raised:
            claim(allocator, 0, name="b")
        assert (raised.value.holder, raised.value.stored) == ("a", False)
        assert raised.value.hold_left == 45

    def test_an_unseen_claim_is_freed_after_the_hold(self) -> None:
        clock = Clock()
        allocator = IndexAllocator(lister=FakeCluster().list, hold_seconds=60, clock=clock)
        claim(allocator, 0, name="a")
        clock.now += 61  # the create failed after admission: pod a was never stored
        claim(allocator, 0, name="b")

    def test_a_claim_is_forgotten_once_its_pod_is_listed(self) -> None:
        cluster = FakeCluster()
        allocator = IndexAllocator(lister=cluster.list)
        claim(allocator, 0, name="a")
        cluster.store(member("a", 0))
        claim(allocator, 1, name="b")
        assert set(allocator.remembered(namespace=NS, group="g")) == {("worker", 1)}

    def test_a_claim_is_not_forgotten_because_the_terminating_pod_it_replaces_is_listed(
        self,
    ) -> None:
        # Why: the old pod still shows index 0 while it terminates; it is not the
        # replacement, so the replacement's claim must keep holding index 0.
        allocator = IndexAllocator(lister=FakeCluster([terminating(member("old", 0))]).list)
        claim(allocator, 0)  # the replacement, its name still to be generated
        with pytest.raises(IndexTakenError):
            claim(allocator, 0, name="rival")

    def test_a_retried_create_of_the_same_name_may_take_its_own_unstored_index(self) -> None:
        allocator = IndexAllocator(lister=FakeCluster().list)
        claim(allocator, 0, name="a")  # admitted, then refused by a quota after us
        claim(allocator, 0, name="a")

    def test_a_retried_create_of_the_same_indexed_job_may_take_its_own_unstored_index(
        self,
    ) -> None:
        allocator = IndexAllocator(lister=FakeCluster().list)
        claim(allocator, 0, owner="job-uid")
        claim(allocator, 0, owner="job-uid")
        with pytest.raises(IndexTakenError):
            claim(allocator, 0, owner="other-job-uid")

    def test_a_reinvoked_pod_keeps_the_index_held_for_its_first_call(self) -> None:
        allocator = IndexAllocator(lister=FakeCluster().list)
        assert allocate(allocator) == 0  # first call: a generateName pod, index allocated
        claim(allocator, 0, rewiring=True)  # second call: it now carries index 0
        with pytest.raises(IndexTakenError):
            claim(allocator, 0)  # another pod that merely brings index 0

    def test_allocation_skips_a_claimed_index_and_a_claim_refuses_an_allocated_one(
        self,
    ) -> None:
        allocator = IndexAllocator(lister=FakeCluster().list)
        claim(allocator, 0, name="explicit")
        assert allocate(allocator) == 1
        with pytest.raises(IndexTakenError) as raised:
            claim(allocator, 1, name="late")
        assert (raised.value.holder, raised.value.stored) == ("", False)

    def test_dry_run_checks_but_remembers_nothing(self) -> None:
        allocator = IndexAllocator(lister=FakeCluster([member("a", 0)]).list)
        with pytest.raises(IndexTakenError):
            claim(allocator, 0, name="b", dry_run=True)
        claim(allocator, 1, name="b", dry_run=True)
        assert allocator.remembered(namespace=NS, group="g") == {}
        claim(allocator, 1, name="c")

    def test_api_errors_propagate_and_leave_nothing_remembered(self) -> None:
        def lister(namespace: str, group: str) -> list[dict[str, Any]]:
            raise OSError("connection refused")

        allocator = IndexAllocator(lister=lister)
        with pytest.raises(OSError):
            claim(allocator, 0, name="a")
        assert allocator.remembered(namespace=NS, group="g") == {}

    def test_of_twenty_concurrent_creates_with_one_index_exactly_one_gets_it(self) -> None:
        cluster = FakeCluster(latency=0.02)
        allocator = IndexAllocator(lister=cluster.list)

        async def create(name: str) -> bool:
            try:
                await allocator.claim(
                    namespace=NS,
                    group="g",
                    task="worker",
                    index=0,
                    claimant=Claimant(name=name),
                    dry_run=False,
                )
            except IndexTakenError:
                return False
            await asyncio.sleep(random.random() * 0.005)
            cluster.store(member(name, 0))
            return True

        async def main() -> list[bool]:
            return await asyncio.gather(*(create(f"p{i}") for i in range(20)))

        assert sum(asyncio.run(main())) == 1

    def test_concurrent_claims_and_allocations_never_share_an_index(self) -> None:
        cluster = FakeCluster(latency=0.02)
        allocator = IndexAllocator(lister=cluster.list)

        async def explicit(name: str, index: int) -> int | None:
            try:
                await allocator.claim(
                    namespace=NS,
                    group="g",
                    task="worker",
                    index=index,
                    claimant=Claimant(name=name),
                    dry_run=False,
                )
            except IndexTakenError:
                return None
            cluster.store(member(name, index))
            return index

        async def allocated(name: str) -> int:
            index = await allocator.allocate(
                namespace=NS, group="g", task="worker", limit=None, dry_run=False
            )
            cluster.store(member(name, index))
            return index

        async def main() -> list[int | None]:
            creates = [explicit(f"e{i}", i % 3) for i in range(6)]
            creates += [allocated(f"a{i}") for i in range(6)]
            random.shuffle(creates)
            return await asyncio.gather(*creates)

        admitted = [index for index in asyncio.run(main()) if index is not None]
        assert len(admitted) == len(set(admitted))
        assert len(cluster.pods) == len(admitted) >= 6  # allocation always finds a free one


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
        pods = api_pod_lister(server)(NS, "g")
        assert sorted(pod["metadata"]["name"] for pod in pods) == ["mine", "volcano"]
        assert server.sent == [("GET", "/api/v1/namespaces/team/pods", {}, "application/json")]

    def test_allocates_through_the_api(self) -> None:
        server = FakeApiServer()
        server.put("pods", member("a", 0))
        assert allocate(IndexAllocator(server)) == 1
