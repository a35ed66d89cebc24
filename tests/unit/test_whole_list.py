"""The watch cache reading a list whole (one answer from the API server's cache, cut into
items as it arrives): pages to the sink, the watch from the list's version, and the
ways back to a streamed list when an answer cannot be cut apart."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from typing import Any

import orjson

from extender.kube.cache import DEFAULT_TUNING, Watcher
from extender.kube.rawapi import KubeError
from extender.kube.resources import Resource
from extender.metrics import Metrics
from tests.unit.test_watch_cache import ImmediateLoop, RecordingSink, bookmark, pod

PODS = Resource("pods", "/api/v1/pods")
TUNING = dataclasses.replace(DEFAULT_TUNING, list_page_size=2, retry_min_seconds=0.01)
END = {"k8s.io/initial-events-end": "true"}


def answer(names: list[str], rv: str = "40") -> bytes:
    return orjson.dumps(
        {
            "kind": "PodList",
            "apiVersion": "v1",
            "metadata": {"resourceVersion": rv},
            "items": [pod(name, "1") for name in names],
        }
    )


class WholeListApi:
    """Answers each whole list from `lists` in order (bytes, cut into 5-byte pieces; or
    an exception, raised when asked or, as ("cut", bytes), after those bytes); watches
    from `watches` in order (events, or an exception), then blocks."""

    def __init__(self, lists: list[Any], watches: list[Any] | None = None) -> None:
        self.lists = lists
        self.watches = watches or []
        self.asked: list[tuple[str, dict[str, Any]]] = []
        self.watched: list[dict[str, Any]] = []
        self.done = threading.Event()

    def pieces(self, path: str, *, query: dict[str, Any], read_timeout: float) -> Iterator[bytes]:
        self.asked.append((path, dict(query)))
        step = self.lists.pop(0)
        if isinstance(step, Exception):
            raise step
        if isinstance(step, tuple):
            return self._cut_off(step[1])
        return iter([step[at : at + 5] for at in range(0, len(step), 5)])

    @staticmethod
    def _cut_off(body: bytes) -> Iterator[bytes]:
        yield body
        raise KubeError(0, "API server unreachable: connection reset")

    def stream(self, path: str, *, query: dict[str, Any], read_timeout: float) -> Iterator[Any]:
        self.watched.append(dict(query))
        step = self.watches.pop(0) if self.watches else None
        if isinstance(step, Exception):
            raise step
        yield from step or []
        if step is None:
            self.done.set()
            threading.Event().wait(3600)


def run(api: WholeListApi, resource: Resource = PODS, tuning: Any = TUNING) -> RecordingSink:
    sink = RecordingSink()
    metrics = Metrics()
    watcher = Watcher(api, resource, sink, ImmediateLoop(), metrics, tuning)  # type: ignore[arg-type]
    watcher.start()
    assert api.done.wait(10)
    watcher.stop()
    sink.watcher = watcher  # type: ignore[attr-defined]
    sink.metrics = metrics  # type: ignore[attr-defined]
    return sink


def test_a_list_read_whole_reaches_the_sink_in_pages_and_the_watch_starts_from_its_version() -> (
    None
):
    api = WholeListApi([answer(["a", "b", "c", "d", "e"], rv="40")])
    sink = run(api)
    assert sink.calls == [
        ("page", ["a", "b"], True, False),
        ("page", ["c", "d"], False, False),
        ("page", ["e"], False, True),
    ]
    assert api.asked == [("/api/v1/pods", {})]  # one request, no paging, no version
    assert api.watched[0]["resourceVersion"] == "40"
    assert "sendInitialEvents" not in api.watched[0]
    assert sink.watcher.synced.is_set()  # type: ignore[attr-defined]


def test_items_read_whole_say_their_kind_as_list_items_do_not() -> None:
    delivered: list[dict[str, Any]] = []

    class KeepingSink(RecordingSink):
        def on_page(self, kind: str, items: list[dict[str, Any]], first: bool, last: bool) -> None:
            delivered.extend(items)

    api = WholeListApi([answer(["a", "b", "c"])])
    watcher = Watcher(api, PODS, KeepingSink(), ImmediateLoop(), Metrics(), TUNING)  # type: ignore[arg-type]
    watcher.start()
    assert api.done.wait(10)
    watcher.stop()
    assert [(i["apiVersion"], i["kind"]) for i in delivered] == [("v1", "Pod")] * 3


def test_an_empty_list_read_whole_is_one_last_page() -> None:
    sink = run(WholeListApi([answer([])]))
    assert sink.calls == [("page", [], True, True)]


def test_the_field_selector_goes_with_the_list() -> None:
    scheduled = Resource("pods", "/api/v1/pods", field_selector="spec.nodeName!=")
    api = WholeListApi([answer(["a"])])
    run(api, scheduled)
    assert api.asked == [("/api/v1/pods", {"fieldSelector": "spec.nodeName!="})]
    assert api.watched[0]["fieldSelector"] == "spec.nodeName!="


def test_an_answer_that_cannot_be_cut_apart_is_streamed_and_whole_lists_are_not_asked_again() -> (
    None
):
    not_a_list = b'{"kind":"PodList","items":["a","b"]}'
    api = WholeListApi(
        [not_a_list],
        watches=[
            [{"type": "ADDED", "object": pod("s", "2")}, bookmark("50", END)],
            KubeError(410, "too old resource version"),  # the relist after it: streamed
            [bookmark("60", END)],
        ],
    )
    sink = run(api)
    assert len(api.asked) == 1
    # streamed list, its watch (410), streamed relist, its watch
    assert [q.get("sendInitialEvents") for q in api.watched] == ["true", None, "true", None]
    assert ("page", ["s"], True, True) in sink.calls


def test_a_list_cut_off_midway_is_read_again_from_its_first_page() -> None:
    whole = answer(["a", "b", "c", "d", "e"], rv="41")
    api = WholeListApi([("cut", whole[: whole.index(b'"name":"d"')]), whole])
    sink = run(api)
    assert sink.calls == [
        ("page", ["a", "b"], True, False),  # the cut-off answer's whole pages
        ("page", ["a", "b"], True, False),  # the relist starts over ...
        ("page", ["c", "d"], False, False),
        ("page", ["e"], False, True),  # ... and its last page ends it
    ]
    restarts = sink.metrics.watch_restarts.labels(resource="pods", cause="error")  # type: ignore[attr-defined]
    assert restarts._value.get() == 1
    assert api.watched[0]["resourceVersion"] == "41"


def test_a_version_not_served_is_skipped_and_one_served_nowhere_is_absent() -> None:
    versions = Resource(
        "upstream-podgroups",
        "/apis/scheduling.k8s.io/v1beta1/podgroups",
        optional=True,
        alternatives=("/apis/scheduling.k8s.io/v1alpha3/podgroups",),
    )
    api = WholeListApi([KubeError(404, "404 page not found"), answer(["g"])])
    sink = run(api, versions)
    assert [path for path, _ in api.asked] == list(versions.paths)
    assert sink.calls == [("page", ["g"], True, True)]
    assert sink.watcher.path == versions.paths[1]  # type: ignore[attr-defined]

    nowhere = WholeListApi([KubeError(404, "404 page not found")] * 2)
    watcher = Watcher(nowhere, versions, RecordingSink(), ImmediateLoop(), Metrics(), TUNING)  # type: ignore[arg-type]
    watcher.start()
    assert watcher.synced.wait(5)
    watcher.stop()
    assert watcher.absent
