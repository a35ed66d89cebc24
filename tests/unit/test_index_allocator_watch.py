"""The index allocator answering from the pod watch: same answers as listing, no list per create.

The fast path (pods fed through `PodIndexFeed` into the allocator's `MemberIndex`)
against the plain path (the namespace listed through `api_pod_lister` per create):
for any pods reached by any sequence of watch events and relists, and any sequence
of allocations and claims, both give the same indexes and the same refusals. While
the watch is not caught up the allocator lists, as it always did.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from extender.domain.objects.membership import TASK_INDEX_ANNOTATION, VOLCANO_GROUP_ANNOTATION
from extender.kube.cache import CacheSink
from extender.kube.indexes import (
    Claimant,
    IndexAllocator,
    IndexTakenError,
    NoFreeIndexError,
    PodIndexFeed,
)
from tests.builders import make_pod

NAMESPACES = ("team-a", "team-b")
NAMES = ("p0", "p1", "p2", "p3", "p4")
TASKS = ("worker", "master")


class Forwarded(CacheSink):
    """The sink behind the feed (ClusterState in the service): records what reaches it."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def on_page(self, kind: str, items: list[dict[str, Any]], first: bool, last: bool) -> None:
        self.calls.append(("page", kind, len(items), first, last))

    def on_event(self, kind: str, event_type: str, obj: dict[str, Any]) -> None:
        self.calls.append(("event", kind, event_type))


class NamespaceLister:
    """A RawApi answering the namespace's pods list, as api_pod_lister asks for it."""

    def __init__(self, pods: list[dict[str, Any]]) -> None:
        self.pods = pods
        self.lists = 0

    def call(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        assert method == "GET"
        namespace = path.split("/")[4]
        self.lists += 1
        return {"items": [p for p in self.pods if p["metadata"]["namespace"] == namespace]}


def never_list(namespace: str, group: str) -> list[dict[str, Any]]:
    raise AssertionError("answered from the watch: no list expected")


def pod(
    name: str,
    *,
    namespace: str = "team-a",
    group: str | None = "g",
    task: str = "worker",
    index: int | None = None,
    phase: str = "Pending",
    deleting: bool = False,
    volcano: str | None = None,
    uid: str | None = None,
) -> dict[str, Any]:
    builder = make_pod(name, namespace).task(task).phase(phase)
    if group is not None:
        builder = builder.group(group)
    if index is not None:
        builder = builder.annotation(TASK_INDEX_ANNOTATION, str(index))
    if volcano is not None:
        builder = builder.annotation(VOLCANO_GROUP_ANNOTATION, volcano)
    obj = builder.obj()
    if deleting:
        obj["metadata"]["deletionTimestamp"] = "2030-01-01T00:00:00Z"
    if uid is not None:
        obj["metadata"]["uid"] = uid
    return obj


def watching_allocator(**kwargs: Any) -> tuple[IndexAllocator, PodIndexFeed, Forwarded]:
    allocator = IndexAllocator(lister=never_list, **kwargs)
    allocator.answer_from_watch(lambda: True)
    then = Forwarded()
    return allocator, allocator.feed(then), then


def allocate(
    allocator: IndexAllocator,
    *,
    namespace: str = "team-a",
    group: str = "g",
    task: str = "worker",
    limit: int | None = None,
    name: str = "",
) -> int:
    return asyncio.run(
        allocator.allocate(
            namespace=namespace,
            group=group,
            task=task,
            limit=limit,
            dry_run=False,
            claimant=Claimant(name=name),
        )
    )


def claim(
    allocator: IndexAllocator,
    index: int,
    *,
    name: str = "",
    namespace: str = "team-a",
    group: str = "g",
    task: str = "worker",
) -> None:
    asyncio.run(
        allocator.claim(
            namespace=namespace,
            group=group,
            task=task,
            index=index,
            claimant=Claimant(name=name),
            dry_run=False,
        )
    )


# ---- the property: fast path == plain path ----

pods = st.builds(
    pod,
    st.sampled_from(NAMES),
    namespace=st.sampled_from(NAMESPACES),
    group=st.sampled_from([None, "g", "h"]),
    task=st.sampled_from(TASKS),
    index=st.none() | st.integers(0, 3),
    phase=st.sampled_from(["Pending", "Running", "Succeeded", "Failed"]),
    deleting=st.booleans(),
    volcano=st.sampled_from([None, None, "g", "h"]),  # "h" on a "g" pod: two groups, denied
    uid=st.sampled_from([f"uid-{i}" for i in range(6)]),
)
watch_events = st.one_of(
    st.tuples(st.sampled_from(["ADDED", "MODIFIED", "DELETED"]), pods),
    st.tuples(st.just("RELIST"), st.lists(pods, max_size=8)),
)
requests = st.one_of(
    st.tuples(
        st.just("allocate"),
        st.sampled_from(NAMESPACES),
        st.sampled_from(["g", "h"]),
        st.sampled_from(TASKS),
        st.none() | st.integers(1, 4),
        st.sampled_from(("", *NAMES)),
    ),
    st.tuples(
        st.just("claim"),
        st.sampled_from(NAMESPACES),
        st.sampled_from(["g", "h"]),
        st.sampled_from(TASKS),
        st.integers(0, 4),
        st.sampled_from(("", *NAMES)),
    ),
)


def final_pods(events: list[tuple[str, Any]], feed: PodIndexFeed) -> list[dict[str, Any]]:
    """Feed the events; return the pods the API server holds at the end (by uid)."""
    stored: dict[str, dict[str, Any]] = {}
    for kind, arg in events:
        if kind == "RELIST":
            pages = [arg[i : i + 3] for i in range(0, len(arg), 3)] or [[]]
            for number, page in enumerate(pages):
                feed.on_page("pods", page, number == 0, number == len(pages) - 1)
            stored = {p["metadata"]["uid"]: p for p in arg}
        else:
            feed.on_event("pods", kind, arg)
            if kind == "DELETED":
                stored.pop(arg["metadata"]["uid"], None)
            else:
                stored[arg["metadata"]["uid"]] = arg
    return list(stored.values())


async def answer(allocator: IndexAllocator, request: tuple[Any, ...]) -> Any:
    op, namespace, group, task, number, name = request
    try:
        if op == "allocate":
            return await allocator.allocate(
                namespace=namespace,
                group=group,
                task=task,
                limit=number,
                dry_run=False,
                claimant=Claimant(name=name),
            )
        await allocator.claim(
            namespace=namespace,
            group=group,
            task=task,
            index=number,
            claimant=Claimant(name=name),
            dry_run=False,
        )
        return "claimed"
    except NoFreeIndexError as full:
        return ("full", full.task, full.limit)
    except IndexTakenError as taken:
        return ("taken", taken.task, taken.index, taken.holder, taken.stored)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(pods, max_size=8),
    st.lists(watch_events, max_size=15),
    st.lists(requests, min_size=1, max_size=12),
)
def test_answers_from_the_watch_equal_answers_from_a_list_per_create(
    listed: list[dict[str, Any]], events: list[tuple[str, Any]], asked: list[tuple[Any, ...]]
) -> None:
    fast, feed, _ = watching_allocator()
    # A watch starts with a full list, then events and relists.
    stored = final_pods([("RELIST", listed), *events], feed)
    # The index holds exactly what the API server holds: pods still there after the
    # events, with what they showed last.
    plain = IndexAllocator(NamespaceLister(stored))  # type: ignore[arg-type]

    async def run(allocator: IndexAllocator) -> list[Any]:
        return [await answer(allocator, request) for request in asked]

    assert asyncio.run(run(fast)) == asyncio.run(run(plain))


# ---- examples ----


def test_allocation_skips_indexes_the_watch_shows() -> None:
    allocator, feed, _ = watching_allocator()
    feed.on_page("pods", [pod("a", index=0), pod("c", index=2)], True, True)
    assert allocate(allocator) == 1


def test_a_held_index_is_forgotten_once_the_watch_delivers_its_pod() -> None:
    allocator, feed, _ = watching_allocator()
    feed.on_page("pods", [], True, True)
    assert allocate(allocator, name="a") == 0
    assert set(allocator.remembered(namespace="team-a", group="g")) == {("worker", 0)}
    feed.on_event("pods", "ADDED", pod("a", index=0))
    assert allocate(allocator, name="b") == 1
    assert set(allocator.remembered(namespace="team-a", group="g")) == {("worker", 1)}


def test_a_held_index_stays_held_until_the_watch_delivers_its_pod() -> None:
    allocator, feed, _ = watching_allocator()
    feed.on_page("pods", [], True, True)
    assert [allocate(allocator, name=f"p{i}") for i in range(3)] == [0, 1, 2]


def test_a_deleted_pod_frees_its_index_and_a_terminating_one_does_not() -> None:
    allocator, feed, _ = watching_allocator()
    feed.on_page("pods", [pod("a", index=0), pod("b", index=1)], True, True)
    feed.on_event("pods", "MODIFIED", pod("a", index=0, deleting=True))
    feed.on_event("pods", "DELETED", pod("b", index=1))
    assert allocate(allocator) == 1


def test_a_claim_is_refused_naming_the_member_the_watch_shows() -> None:
    allocator, feed, _ = watching_allocator()
    feed.on_page("pods", [pod("a", index=0)], True, True)
    with pytest.raises(IndexTakenError) as raised:
        claim(allocator, 0, name="b")
    assert (raised.value.holder, raised.value.stored) == ("a", True)


def test_a_relist_forgets_pods_deleted_while_the_watch_was_down() -> None:
    allocator, feed, _ = watching_allocator()
    feed.on_page("pods", [pod("a", index=0), pod("b", index=1)], True, True)
    feed.on_page("pods", [pod("b", index=1)], True, False)
    feed.on_page("pods", [], False, True)
    assert allocate(allocator) == 0


def test_the_feed_passes_everything_on_unchanged() -> None:
    _, feed, then = watching_allocator()
    feed.on_page("pods", [pod("a", index=0)], True, True)
    feed.on_page("nodes", [{"metadata": {"name": "n"}}], True, True)
    feed.on_event("pods", "DELETED", pod("a", index=0))
    feed.on_event("namespaces", "ADDED", {"metadata": {"name": "x"}})
    assert then.calls == [
        ("page", "pods", 1, True, True),
        ("page", "nodes", 1, True, True),
        ("event", "pods", "DELETED"),
        ("event", "namespaces", "ADDED"),
    ]


def test_an_unreadable_pod_is_skipped_and_the_rest_still_applied(
    caplog: pytest.LogCaptureFixture,
) -> None:
    allocator, feed, then = watching_allocator()
    broken = {"metadata": {"name": "x", "uid": "u-x", "labels": ["not", "a", "map"]}}
    feed.on_page("pods", [broken, pod("a", index=0)], True, True)
    assert allocate(allocator) == 1
    assert "skipped an unreadable pod" in caplog.text
    assert then.calls == [("page", "pods", 2, True, True)]


def test_until_the_watch_is_caught_up_every_create_lists_the_group() -> None:
    raw = NamespaceLister([pod("a", index=0)])
    allocator = IndexAllocator(raw)  # type: ignore[arg-type]
    caught_up = False
    allocator.answer_from_watch(lambda: caught_up)
    feed = allocator.feed(Forwarded())
    # The watch is behind: it has not delivered pod "a" yet; the list has it.
    assert allocate(allocator, name="b") == 1
    assert raw.lists == 1
    feed.on_page("pods", [pod("a", index=0), pod("b", index=1)], True, True)
    caught_up = True
    assert allocate(allocator, name="c") == 2
    assert raw.lists == 1  # answered from the watch
    caught_up = False  # the watch failed: back to a list per create
    raw.pods += [pod("b", index=1), pod("c", index=2)]
    assert allocate(allocator, name="d") == 3
    assert raw.lists == 2


def test_without_a_watch_the_allocator_lists_per_create() -> None:
    raw = NamespaceLister([pod("a", index=0)])
    allocator = IndexAllocator(raw)  # type: ignore[arg-type]
    assert allocate(allocator) == 1
    assert raw.lists == 1


def test_twenty_concurrent_creates_delivered_late_by_the_watch_get_distinct_indexes() -> None:
    allocator, feed, _ = watching_allocator()
    feed.on_page("pods", [], True, True)

    async def create(name: str) -> int:
        index = await allocator.allocate(
            namespace="team-a",
            group="g",
            task="worker",
            limit=None,
            dry_run=False,
            claimant=Claimant(name=name),
        )
        # stored, then delivered by the watch, some time after admission answered
        await asyncio.sleep(random.random() * 0.005)
        feed.on_event("pods", "ADDED", pod(name, index=index))
        return index

    async def main() -> list[int]:
        return await asyncio.gather(*(create(f"p{i}") for i in range(20)))

    assert sorted(asyncio.run(main())) == list(range(20))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_pod_watch_silent_for_longer_than_the_hold_is_not_trusted() -> None:
    # A watch whose connection died without an error delivers nothing until its read
    # times out; a hold may lapse meanwhile for a pod it never delivered.
    clock = Clock()
    raw = NamespaceLister([pod("a", index=0), pod("b", index=1)])
    allocator = IndexAllocator(raw, hold_seconds=60, clock=clock)  # type: ignore[arg-type]
    allocator.answer_from_watch(lambda: True)
    feed = allocator.feed(Forwarded())
    feed.on_page("pods", [pod("a", index=0)], True, True)
    assert allocate(allocator, name="x") == 1  # from the watch, which has not shown "b"
    assert raw.lists == 0
    clock.now += 61
    assert allocate(allocator, name="y") == 2  # listed: "b" holds 1; "x"'s hold lapsed
    assert raw.lists == 1
    feed.on_event("pods", "ADDED", pod("b", index=1))  # heard from again
    assert allocate(allocator, name="z") == 3  # from the watch: "a" 0, "b" 1, "y"'s hold 2
    assert raw.lists == 1


def test_nothing_is_answered_from_a_watch_that_never_delivered() -> None:
    raw = NamespaceLister([pod("a", index=0)])
    allocator = IndexAllocator(raw)  # type: ignore[arg-type]
    allocator.answer_from_watch(lambda: True)
    assert allocate(allocator) == 1
    assert raw.lists == 1
