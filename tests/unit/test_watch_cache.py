"""The watch cache: paged and streamed lists, watch events, 410 Gone relists, errors that
never kill it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from extender.kube.cache import CacheSink, Watcher
from extender.kube.rawapi import KubeError
from extender.kube.resources import Resource
from extender.metrics import Metrics
from tests.watch_fakes import PAGED, STREAMED

PODS = Resource("pods", "/api/v1/pods")


class ImmediateLoop:
    """Stands in for the event loop: runs handed-over calls at once."""

    def call_soon_threadsafe(self, fn: Any, *args: Any) -> None:
        fn(*args)


class RecordingSink(CacheSink):
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.done = threading.Event()

    def on_page(self, kind: str, items: list[dict[str, Any]], first: bool, last: bool) -> None:
        self.calls.append(("page", [i["metadata"]["name"] for i in items], first, last))

    def on_event(self, kind: str, event_type: str, obj: dict[str, Any]) -> None:
        self.calls.append(("event", event_type, obj["metadata"]["name"]))


def pod(name: str, rv: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": rv}}


class ScriptedApi:
    """Lists in two pages; the first watch sends an event then 410 Gone; later watches block."""

    def __init__(self, sink: RecordingSink) -> None:
        self.sink = sink
        self.lists = 0
        self.watches: list[dict[str, Any]] = []

    def call(
        self, method: str, path: str, *, query: dict[str, Any], timeout: float
    ) -> dict[str, Any]:
        if "continue" not in query:
            self.lists += 1
            return {
                "metadata": {"continue": "page2", "resourceVersion": "10"},
                "items": [pod("a", "5")],
            }
        return {"metadata": {"resourceVersion": "10"}, "items": [pod("b", "6")]}

    def stream(
        self, path: str, *, query: dict[str, Any], read_timeout: float
    ) -> Iterator[dict[str, Any]]:
        self.watches.append(dict(query))
        if len(self.watches) == 1:
            yield {"type": "BOOKMARK", "object": pod("", "11")}
            yield {"type": "ADDED", "object": pod("c", "12")}
            yield {"type": "ERROR", "object": {"code": 410, "message": "too old resource version"}}
        elif len(self.watches) == 2:
            raise KubeError(0, "API server unreachable: connection refused")
        else:
            self.sink.done.set()
            threading.Event().wait(3600)
            yield {}


def test_paged_list_then_watch_then_relist_after_410_and_retry_after_error() -> None:
    sink = RecordingSink()
    api = ScriptedApi(sink)
    metrics = Metrics()
    watcher = Watcher(api, PODS, sink, ImmediateLoop(), metrics, PAGED)  # type: ignore[arg-type]
    watcher.start()
    assert sink.done.wait(10)
    watcher.stop()
    assert sink.calls[:3] == [
        ("page", ["a"], True, False),
        ("page", ["b"], False, True),
        ("event", "ADDED", "c"),
    ]
    # 410 Gone: a fresh list, not a watch from the expired version.
    assert sink.calls[3:5] == [("page", ["a"], True, False), ("page", ["b"], False, True)]
    assert api.watches[0]["resourceVersion"] == "10"
    assert api.watches[0]["allowWatchBookmarks"] == "true"
    assert api.lists >= 3  # initial, after 410, after the connection error
    restarts = {
        (s.labels["cause"]): s.value
        for m in metrics.registry.collect()
        if m.name == "gang_extender_watch_restarts"
        for s in m.samples
        if s.name.endswith("_total")
    }
    assert restarts == {"expired": 1.0, "error": 1.0}
    assert watcher.synced.is_set()


class MissingCrdApi:
    def __init__(self) -> None:
        self.asked = threading.Event()

    def call(
        self, method: str, path: str, *, query: dict[str, Any], timeout: float
    ) -> dict[str, Any]:
        self.asked.set()
        raise KubeError(404, "404 page not found")

    def stream(self, *args: Any, **kwargs: Any) -> Iterator[dict[str, Any]]:
        raise AssertionError("no watch without a list")


def test_an_optional_api_that_is_not_installed_counts_as_synced() -> None:
    api = MissingCrdApi()
    sink = RecordingSink()
    optional = Resource(
        "coscheduling-podgroups", "/apis/scheduling.x-k8s.io/v1alpha1/podgroups", optional=True
    )
    watcher = Watcher(api, optional, sink, ImmediateLoop(), Metrics(), PAGED)  # type: ignore[arg-type]
    watcher.start()
    assert watcher.synced.wait(5)
    assert watcher.absent
    watcher.stop()
    assert sink.calls == []


def test_the_configured_page_size_and_watch_timeout_reach_the_api_server() -> None:
    """Settings -> CacheTuning -> the list and watch queries (not the built-in defaults)."""
    from extender.config import Settings
    from extender.kube.cache import CacheTuning

    settings = Settings(
        list_page_size=7, watch_timeout_seconds=42, watch_list=False, whole_list=False
    )
    sink = RecordingSink()
    api = ScriptedApi(sink)
    listed: list[dict[str, Any]] = []
    call = api.call

    def recording_call(method: str, path: str, *, query: dict[str, Any], timeout: float) -> Any:
        listed.append(dict(query))
        return call(method, path, query=query, timeout=timeout)

    api.call = recording_call  # type: ignore[method-assign]
    tuning = CacheTuning.from_settings(settings)
    watcher = Watcher(api, PODS, sink, ImmediateLoop(), Metrics(), tuning)  # type: ignore[arg-type]
    watcher.start()
    assert sink.done.wait(10)
    watcher.stop()
    assert {q["limit"] for q in listed} == {7}
    assert api.watches[0]["timeoutSeconds"] == 42


def test_default_tuning_is_the_settings_defaults() -> None:
    from extender.config import Settings
    from extender.kube.cache import DEFAULT_TUNING, CacheTuning

    assert CacheTuning.from_settings(Settings()) == DEFAULT_TUNING


class WatchingRecorder(RecordingSink):
    """Records, with each call, whether the watcher said its watch was caught up."""

    watcher: Watcher

    def on_page(self, kind: str, items: list[dict[str, Any]], first: bool, last: bool) -> None:
        super().on_page(kind, items, first, last)
        self.calls[-1] += (self.watcher.watching,)

    def on_event(self, kind: str, event_type: str, obj: dict[str, Any]) -> None:
        super().on_event(kind, event_type, obj)
        self.calls[-1] += (self.watcher.watching,)


def test_watching_holds_from_a_complete_list_until_the_watch_fails_and_again_after_the_relist() -> (
    None
):
    """What the webhook's index allocator reads: never set over a view with a gap."""
    sink = WatchingRecorder()
    api = ScriptedApi(sink)
    watcher = Watcher(api, PODS, sink, ImmediateLoop(), Metrics(), PAGED)  # type: ignore[arg-type]
    sink.watcher = watcher
    assert not watcher.watching  # nothing listed yet
    watcher.start()
    assert sink.done.wait(10)  # the third watch: after the 410 and the connection error
    watcher.stop()
    # first list: not before its last page is applied; the event after it: caught up
    assert sink.calls[:3] == [
        ("page", ["a"], True, False, False),
        ("page", ["b"], False, True, False),
        ("event", "ADDED", "c", True),
    ]
    # the 410 cleared it: the relists after the 410 and after the error ran without it
    assert [call[-1] for call in sink.calls[3:]] == [False] * len(sink.calls[3:])
    assert watcher.watching  # the last relist is in and its watch is open


# ---- streamed lists (WatchList: a watch that starts with the current state) ----

END = {"k8s.io/initial-events-end": "true"}


def bookmark(rv: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "type": "BOOKMARK",
        "object": {"metadata": {"resourceVersion": rv, "annotations": annotations or {}}},
    }


def added(name: str, rv: str) -> dict[str, Any]:
    return {"type": "ADDED", "object": pod(name, rv)}


class StreamingApi:
    """Answers each watch from `script` in order: a list of events (then blocks, once
    the script is used up) or an exception; paged lists answer one page."""

    def __init__(self, script: list[Any], done: threading.Event) -> None:
        self.script = script
        self.done = done
        self.watches: list[tuple[str, dict[str, Any]]] = []
        self.lists: list[dict[str, Any]] = []

    def call(
        self, method: str, path: str, *, query: dict[str, Any], timeout: float
    ) -> dict[str, Any]:
        self.lists.append(dict(query))
        return {"metadata": {"resourceVersion": "30"}, "items": [pod("paged", "29")]}

    def stream(
        self, path: str, *, query: dict[str, Any], read_timeout: float
    ) -> Iterator[dict[str, Any]]:
        self.watches.append((path, dict(query)))
        step = self.script.pop(0) if self.script else None
        if isinstance(step, Exception):
            raise step
        yield from step or []
        if step is None or not self.script:
            self.done.set()
            threading.Event().wait(3600)


def run_watcher(api: StreamingApi, sink: RecordingSink, resource: Resource = PODS) -> Watcher:
    import dataclasses

    from extender.kube.cache import DEFAULT_TUNING

    tuning = dataclasses.replace(
        DEFAULT_TUNING, list_page_size=2, retry_min_seconds=0.01, whole_list=False
    )
    watcher = Watcher(api, resource, sink, ImmediateLoop(), Metrics(), tuning)  # type: ignore[arg-type]
    watcher.start()
    assert api.done.wait(10)
    watcher.stop()
    return watcher


def test_a_streamed_list_reaches_the_sink_in_pages_and_its_stream_goes_on_as_the_watch() -> None:
    sink = RecordingSink()
    events = [
        added("a", "5"),
        added("b", "6"),
        bookmark("7"),  # an ordinary bookmark inside the initial events: not the end
        added("c", "8"),
        bookmark("9", END),
        added("d", "10"),
    ]
    api = StreamingApi([events], sink.done)
    watcher = run_watcher(api, sink)
    assert sink.calls == [
        ("page", ["a", "b"], True, False),
        ("page", ["c"], False, True),
        ("event", "ADDED", "d"),
    ]
    assert watcher.synced.is_set() and watcher.watching
    assert api.lists == []  # no paged list
    [(path, query)] = api.watches
    assert path == "/api/v1/pods"
    assert query["sendInitialEvents"] == "true"
    assert query["resourceVersionMatch"] == "NotOlderThan"
    assert query["allowWatchBookmarks"] == "true"
    assert "resourceVersion" not in query  # a consistent read: the state as of now


def test_after_a_streamed_list_the_next_watch_starts_from_the_stream_s_last_version() -> None:
    sink = RecordingSink()
    api = StreamingApi(
        [[added("a", "5"), bookmark("9", END), added("d", "10"), bookmark("12")], []], sink.done
    )
    run_watcher(api, sink)
    assert api.watches[1][1]["resourceVersion"] == "12"
    assert "sendInitialEvents" not in api.watches[1][1]


def test_an_api_server_that_refuses_streamed_lists_is_listed_in_pages_from_then_on() -> None:
    """WatchList off (1.33's default) answers 422; the relist after a 410 is paged too."""
    sink = RecordingSink()
    refused = KubeError(
        422, "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled"
    )
    gone = [{"type": "ERROR", "object": {"code": 410, "message": "too old resource version"}}]
    api = StreamingApi([refused, gone, []], sink.done)
    watcher = run_watcher(api, sink)
    assert [q.get("sendInitialEvents") for _, q in api.watches] == ["true", None, None]
    assert len(api.lists) == 2  # the first list, then the relist after the 410: both paged
    assert sink.calls == [("page", ["paged"], True, True), ("page", ["paged"], True, True)]
    assert watcher.synced.is_set()


def test_a_stream_that_ends_before_its_end_bookmark_is_relisted_in_pages() -> None:
    """A server that takes the parameters but never ends the initial events: nothing it
    sent is applied as a complete list, and the relist is paged."""
    sink = RecordingSink()
    api = StreamingApi([[added("a", "5")], []], sink.done)
    watcher = run_watcher(api, sink)
    assert sink.calls == [("page", ["paged"], True, True)]
    assert [q.get("sendInitialEvents") for _, q in api.watches] == ["true", None]
    assert watcher.synced.is_set()


def test_an_expired_streamed_list_is_streamed_again() -> None:
    """A 410 inside the initial events is routine expiry, not a refusal: stream again."""
    sink = RecordingSink()
    gone = {"type": "ERROR", "object": {"code": 410, "message": "too old resource version"}}
    api = StreamingApi(
        [[added("a", "5"), added("b", "6"), gone], [added("a", "5"), bookmark("9", END)]], sink.done
    )
    run_watcher(api, sink)
    assert [q.get("sendInitialEvents") for _, q in api.watches] == ["true", "true"]
    assert sink.calls == [
        ("page", ["a", "b"], True, False),  # the expired attempt's first page ...
        ("page", ["a"], True, True),  # ... and the complete list, which starts over
    ]
    assert api.lists == []


def test_a_streamed_list_finds_the_first_served_version_and_watches_it() -> None:
    from extender.kube.resources import UPSTREAM_PODGROUPS

    sink = RecordingSink()
    missing = KubeError(404, "404 page not found")
    api = StreamingApi([missing, [bookmark("3", END)], []], sink.done)
    watcher = run_watcher(api, sink, UPSTREAM_PODGROUPS)
    assert [p for p, _ in api.watches[:2]] == list(UPSTREAM_PODGROUPS.paths[:2])
    assert watcher.path == UPSTREAM_PODGROUPS.paths[1]
    assert api.watches[2][0] == UPSTREAM_PODGROUPS.paths[1]  # the watch after it
    assert sink.calls == [("page", [], True, True)]
    assert watcher.synced.is_set() and not watcher.absent


def test_an_optional_api_served_nowhere_is_absent_and_synced_when_streamed() -> None:
    optional = Resource(
        "coscheduling-podgroups", "/apis/scheduling.x-k8s.io/v1alpha1/podgroups", optional=True
    )
    sink = RecordingSink()
    api = StreamingApi([KubeError(404, "404 page not found")], sink.done)
    watcher = Watcher(api, optional, sink, ImmediateLoop(), Metrics(), STREAMED)  # type: ignore[arg-type]
    watcher.start()
    assert watcher.synced.wait(5)
    watcher.stop()
    assert watcher.absent
    assert sink.calls == []
