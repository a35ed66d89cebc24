"""Watch cache: list-then-watch of the resources in kube/resources.py (Nodes, Pods,
PodGroups: ours, scheduler-plugins', Volcano's, Kubernetes'; Namespaces; DRA's
DeviceClasses, ResourceSlices, ResourceClaims and ResourceClaimTemplates), as raw JSON.

An optional API is found by listing it: a 404 on every version the resource names
means "not served", not an error, and it is looked for again every
`optional_api_recheck_seconds`. A 403 on one counts the same, with a warning: a
replica whose RBAC lacks an optional kind must not stay unready for it.

One thread per resource lists, then watches from the list's resourceVersion with
bookmarks. The list is read whole where its items can be cut apart as it arrives
(kube/list_split.py), else streamed where the API server can (a watch with
`sendInitialEvents`, ended by the `k8s.io/initial-events-end` bookmark, whose
stream then goes on as the watch), else read in pages; every way it reaches the
sink in pages of `list_page_size` (bounded memory at 100,000 pods). A 410 Gone
(expired resourceVersion) or any stream error relists; every restart is counted.
Events go to a sink on the event loop thread (`loop.call_soon_threadsafe`), which
keeps the core single-threaded.

`synced` means what client-go's HasSynced means: the first complete list has been
applied to the sink. It is set on the event loop right after the last page was
applied (never on the watch thread, which runs ahead of the loop), and it stays set
through later relists: while one runs, the sink keeps the last complete view and
only adds to it until the final page removes what is gone, so it is never less
complete than a view that was good enough a moment ago. (Clearing it would make
every routine 410 relist take the leader out of its Service.)
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from extender.config import Settings
from extender.kube.list_split import ListSplitError, ListSplitter
from extender.kube.rawapi import KubeError, RawApi
from extender.kube.resources import (
    COSCHEDULING_PODGROUPS,
    DEVICE_CLASSES,
    NAMESPACES,
    NODES,
    PODGROUPS,
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    UPSTREAM_PODGROUPS,
    UPSTREAM_WORKLOADS,
    VOLCANO_PODGROUPS,
    Resource,
)
from extender.kube.sync_gc import pause_gc_until_synced
from extender.metrics import Metrics

log = logging.getLogger(__name__)

_Answer = TypeVar("_Answer")


@dataclass(frozen=True)
class CacheTuning:
    """How the cache lists, watches and backs off; each value's reason is in `Settings`."""

    list_page_size: int
    watch_seconds: int
    retry_min_seconds: float
    retry_max_seconds: float
    missing_api_recheck_seconds: float
    sync_gc_pause_max_seconds: float
    watch_list: bool = True
    whole_list: bool = True

    @classmethod
    def from_settings(cls, settings: Settings) -> CacheTuning:
        return cls(
            list_page_size=settings.list_page_size,
            watch_seconds=settings.watch_timeout_seconds,
            retry_min_seconds=settings.watch_retry_min_seconds,
            retry_max_seconds=settings.watch_retry_max_seconds,
            missing_api_recheck_seconds=settings.optional_api_recheck_seconds,
            sync_gc_pause_max_seconds=settings.sync_gc_pause_max_seconds,
            watch_list=settings.watch_list,
            whole_list=settings.whole_list,
        )


# The annotation on the bookmark that ends a streamed list's initial events.
INITIAL_EVENTS_END = "k8s.io/initial-events-end"
# A watch's read times out this long after the server should have closed it: a
# connection that died silently is noticed, a slow close is not cut off.
WATCH_READ_SLACK_SECONDS = 30
# Settings' defaults, without reading the environment.
DEFAULT_TUNING = CacheTuning.from_settings(Settings.model_construct())


class CacheSink:
    """Receives cache traffic on the event loop thread."""

    def on_page(self, kind: str, items: list[dict[str, Any]], first: bool, last: bool) -> None:
        raise NotImplementedError

    def on_event(self, kind: str, event_type: str, obj: dict[str, Any]) -> None:
        raise NotImplementedError


class Watcher:
    def __init__(
        self,
        raw: RawApi,
        resource: Resource,
        sink: CacheSink,
        loop: asyncio.AbstractEventLoop,
        metrics: Metrics,
        tuning: CacheTuning = DEFAULT_TUNING,
    ) -> None:
        self.raw = raw
        self.tuning = tuning
        self.resource = resource
        self.sink = sink
        self.loop = loop
        self.metrics = metrics
        self.synced = threading.Event()
        self.absent = False  # optional API not installed
        self.path = resource.path  # the served version of the resource, once listed
        # The last list is applied and its watch has not failed since: events arrive as
        # they happen. Set and cleared on the event loop, in order with the events, so
        # a reader there never sees it set over a view with a gap (the task-index
        # allocator answers from the watch only then).
        self.watching = False
        # Called on the event loop after each list is applied (WatchCache sets it).
        self.on_synced: Callable[[], None] | None = None
        # The API server refused a streamed list once: pages from then on.
        self._paged_only = False
        # A list read whole could not be cut into items once: streamed or paged from then on.
        self._whole_refused = False
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"watch-{resource.kind}", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _deliver(self, fn: Callable[..., None], *args: Any) -> None:
        self.loop.call_soon_threadsafe(fn, *args)

    def _run(self) -> None:
        delay = self.tuning.retry_min_seconds
        version: str | None = None
        while not self._stop.is_set():
            try:
                if version is None:
                    version = self._list()
                version = self._watch(version)
                delay = self.tuning.retry_min_seconds
            except KubeError as err:
                self._lose_watch()
                if err.status in (403, 404) and self.resource.optional:
                    if err.status == 403 and not self.absent:
                        log.warning(
                            "no permission to list %s (%s): treated as not served; "
                            "grant list and watch on it to read it",
                            self.resource.kind,
                            self.path,
                        )
                    self.absent = True
                    self._deliver(self._mark_synced)
                    self._stop.wait(self.tuning.missing_api_recheck_seconds)
                    version = None
                    continue
                cause = "expired" if err.status == 410 else "error"
                self.metrics.watch_restarts.labels(resource=self.resource.kind, cause=cause).inc()
                if err.status == 410:
                    version = None  # relist right away; expiry is routine
                    continue
                log.warning(
                    "watch %s failed: %s; retrying in %.1fs", self.resource.kind, err, delay
                )
                version = None
                self._stop.wait(delay)
                delay = min(delay * 2, self.tuning.retry_max_seconds)
            except Exception as err:  # a broken stream, bad JSON: relist, never die
                self._lose_watch()
                self.metrics.watch_restarts.labels(resource=self.resource.kind, cause="error").inc()
                log.warning(
                    "watch %s broke: %r; relisting in %.1fs", self.resource.kind, err, delay
                )
                version = None
                self._stop.wait(delay)
                delay = min(delay * 2, self.tuning.retry_max_seconds)

    def _list(self) -> str:
        """Every object to the sink in pages, the last one marked; then the version to
        watch from. One list request read whole where its items can be cut apart as it
        arrives (50,000 pods fetched and parsed in 1.0-1.5 s, kube/list_split.py); else
        streamed where the API server can (a watch that starts with the current state,
        WatchList: 3.0-3.3 s; 100,000 pods in 6.1-6.4 s, against 7.9-8.7 s in pages of
        1,000); else in pages of `list_page_size`."""
        if self.tuning.whole_list and not self._whole_refused:
            try:
                return self._whole_list()
            except ListSplitError as err:
                self._whole_refused = True
                log.info(
                    "%s: cannot read the list whole (%s); listing it another way from now on",
                    self.resource.kind,
                    err,
                )
        if self.tuning.watch_list and not self._paged_only:
            try:
                return self._streamed_list()
            except KubeError as err:
                # 422/400: the API server refuses the streaming parameters (its WatchList
                # gate off, or older than 1.27): list in pages from now on.
                if err.status not in (400, 422):
                    raise
                self._paged_only = True
                log.info(
                    "%s: the API server does not stream lists (%s); listing in pages",
                    self.resource.kind,
                    err,
                )
        return self._paged_list()

    def _paged_list(self) -> str:
        query: dict[str, Any] = {"limit": self.tuning.list_page_size}
        if self.resource.field_selector:
            query["fieldSelector"] = self.resource.field_selector
        first = True
        while True:
            page = self._get_page(query, first)
            meta = page.get("metadata") or {}
            token = meta.get("continue")
            items = page.get("items") or []
            _type_items(page, items)
            if not token:
                self.absent = False
            self._deliver(self._apply_page, items, first, not token)
            first = False
            if not token:
                return str(meta.get("resourceVersion", ""))
            query["continue"] = token

    def _whole_list(self) -> str:
        """One list request (served from the API server's cache), its items handed over
        in pages of `list_page_size` as they arrive. If its items cannot be cut apart
        (ListSplitError), pages handed over are left as they are: the list that follows
        starts over with a first page, and its last page drops what it did not name."""
        query: dict[str, Any] = {}
        if self.resource.field_selector:
            query["fieldSelector"] = self.resource.field_selector
        read_timeout = self.tuning.watch_seconds + WATCH_READ_SLACK_SECONDS
        pieces = self._first_served(
            lambda path: self.raw.pieces(path, query=query, read_timeout=read_timeout)
        )
        splitter = ListSplitter()
        items: list[dict[str, Any]] = []
        first, size = True, self.tuning.list_page_size
        for piece in pieces:
            if self._stop.is_set():
                return ""
            items += splitter.feed(piece)
            while len(items) >= size:
                page, items = items[:size], items[size:]
                _type_items(splitter.envelope or {}, page)
                self._deliver(self._apply_page, page, first, False)
                first = False
        items += splitter.finish()
        envelope = splitter.envelope or {}
        _type_items(envelope, items)
        self.absent = False
        self._deliver(self._apply_page, items, first, True)
        return str((envelope.get("metadata") or {}).get("resourceVersion", ""))

    def _streamed_list(self) -> str:
        """The list as a watch's initial events, handed over in pages like a paged list
        (the same memory bound), up to the bookmark that ends them; then the same
        stream goes on as the watch, and its last version is returned."""
        query: dict[str, Any] = {
            "watch": "true",
            "sendInitialEvents": "true",
            "resourceVersionMatch": "NotOlderThan",
            "allowWatchBookmarks": "true",
            "timeoutSeconds": self.tuning.watch_seconds,
        }
        if self.resource.field_selector:
            query["fieldSelector"] = self.resource.field_selector
        events = self._open_stream(query)
        items: list[dict[str, Any]] = []
        first = True
        for event in events:
            if self._stop.is_set():
                return ""
            kind = event.get("type")
            obj = event.get("object") or {}
            if kind == "ERROR":
                raise KubeError(int(obj.get("code") or 500), str(obj.get("message", "")))
            if kind == "BOOKMARK":
                meta = obj.get("metadata") or {}
                if (meta.get("annotations") or {}).get(INITIAL_EVENTS_END) != "true":
                    continue
                self.absent = False
                self._deliver(self._apply_page, items, first, True)
                return self._follow(events, str(meta.get("resourceVersion", "")))
            if kind != "ADDED":
                raise KubeError(0, f"a streamed list sent a {kind} event before its end")
            items.append(obj)
            if len(items) >= self.tuning.list_page_size:
                self._deliver(self._apply_page, items, first, False)
                items, first = [], False
        # The stream ended without the end bookmark: a server that takes the parameters
        # but does not stream the list. Pages from now on; this relist starts over.
        self._paged_only = True
        raise KubeError(0, "the streamed list ended before its initial-events-end bookmark")

    def _open_stream(self, query: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """The first served version's event stream (like `_get_page` for a first page)."""

        def opened(path: str) -> Iterator[dict[str, Any]]:
            events = self.raw.stream(
                path, query=query, read_timeout=self.tuning.watch_seconds + WATCH_READ_SLACK_SECONDS
            )
            # A refusal (404: not this version) comes with the first event.
            head = next(events, None)
            return events if head is None else itertools.chain((head,), events)

        return self._first_served(opened)

    def _get_page(self, query: dict[str, Any], first: bool) -> dict[str, Any]:
        """One list page; the first page of a relist finds which version is served."""
        if not first:
            return self.raw.call("GET", self.path, query=query, timeout=60)
        return self._first_served(lambda path: self.raw.call("GET", path, query=query, timeout=60))

    def _first_served(self, ask: Callable[[str], _Answer]) -> _Answer:
        """`ask` of the first of the resource's versions that is served (not a 404);
        that version's path is kept for the watches and pages after it."""
        missing: KubeError | None = None
        for path in self.resource.paths:
            try:
                answer = ask(path)
            except KubeError as err:
                if err.status != 404:
                    raise
                missing = missing or err
                continue
            self.path = path
            return answer
        assert missing is not None
        raise missing

    def _apply_page(self, items: list[dict[str, Any]], first: bool, last: bool) -> None:
        """On the event loop: hand a page to the sink; after the final one, the list is in."""
        self.sink.on_page(self.resource.kind, items, first, last)
        if last:
            self.watching = True
            self._mark_synced()

    def _lose_watch(self) -> None:
        """Events may be missed from here until the relist's last page (cleared on the loop)."""
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody reads it
            self._deliver(setattr, self, "watching", False)

    def _mark_synced(self) -> None:
        """On the event loop, after everything handed over before it was applied."""
        self.synced.set()
        self.metrics.cache_synced.labels(resource=self.resource.kind).set(1)
        if self.on_synced is not None:
            self.on_synced()

    def _watch(self, version: str) -> str:
        query: dict[str, Any] = {
            "watch": "true",
            "resourceVersion": version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": self.tuning.watch_seconds,
        }
        if self.resource.field_selector:
            query["fieldSelector"] = self.resource.field_selector
        events = self.raw.stream(
            self.path,
            query=query,
            read_timeout=self.tuning.watch_seconds + WATCH_READ_SLACK_SECONDS,
        )
        return self._follow(events, version)

    def _follow(self, events: Iterator[dict[str, Any]], version: str) -> str:
        """Hand a watch's events to the sink until it ends; the last version seen."""
        for event in events:
            if self._stop.is_set():
                break
            kind = event.get("type")
            obj = event.get("object") or {}
            if kind == "ERROR":
                raise KubeError(int(obj.get("code") or 500), str(obj.get("message", "")))
            version = str((obj.get("metadata") or {}).get("resourceVersion", version))
            if kind == "BOOKMARK":
                continue
            self._deliver(self.sink.on_event, self.resource.kind, str(kind), obj)
        return version


class WatchCache:
    def __init__(
        self,
        raw: RawApi,
        sink: CacheSink,
        loop: asyncio.AbstractEventLoop,
        metrics: Metrics,
        resources: tuple[Resource, ...] = (
            NODES,
            PODS,
            PODGROUPS,
            COSCHEDULING_PODGROUPS,
            VOLCANO_PODGROUPS,
            UPSTREAM_PODGROUPS,
            UPSTREAM_WORKLOADS,
            NAMESPACES,
            DEVICE_CLASSES,
            RESOURCE_SLICES,
            RESOURCE_CLAIMS,
            RESOURCE_CLAIM_TEMPLATES,
        ),
        tuning: CacheTuning = DEFAULT_TUNING,
        on_synced: Callable[[], None] | None = None,
    ) -> None:
        """`on_synced`: called on the event loop once every resource's first list is
        applied (and after later relists: it must be idempotent), so what waits for
        a synced cache (a new leader's recovery, hence readiness) need not poll."""
        self.watchers = [Watcher(raw, r, sink, loop, metrics, tuning) for r in resources]
        self.loop = loop
        self.tuning = tuning
        self.on_synced = on_synced
        for watcher in self.watchers:
            watcher.on_synced = self._one_synced

    def _one_synced(self) -> None:
        if self.on_synced is not None and self.synced():
            self.on_synced()

    def start(self) -> None:
        """Start every watcher, with the cyclic GC paused until the first lists are
        applied (kube/sync_gc.py says why)."""
        pause_gc_until_synced(
            [w.synced for w in self.watchers], self.loop, self.tuning.sync_gc_pause_max_seconds
        )
        for watcher in self.watchers:
            watcher.start()

    def stop(self) -> None:
        for watcher in self.watchers:
            watcher.stop()

    def synced(self) -> bool:
        return all(w.synced.is_set() for w in self.watchers)

    def watching(self, kind: str) -> bool:
        """`kind`'s list is applied and its watch has not failed since (see Watcher.watching)."""
        return any(w.watching for w in self.watchers if w.resource.kind == kind)

    def absent(self, kind: str) -> bool:
        return any(w.absent for w in self.watchers if w.resource.kind == kind)


def _type_items(page: dict[str, Any], items: list[dict[str, Any]]) -> None:
    """Give list items the apiVersion and kind their list names: kube-apiserver leaves
    them out of the items of built-in kinds (a watch event's object has them), and an
    object that owns others (a scheduling.k8s.io PodGroup owns its group's Secret,
    Service and ConfigMap) must say what it is in the ownerReference."""
    api_version, list_kind = page.get("apiVersion"), page.get("kind")
    if not isinstance(api_version, str) or not isinstance(list_kind, str):
        return
    kind = list_kind.removesuffix("List")
    for item in items:
        if isinstance(item, dict):
            item.setdefault("apiVersion", api_version)
            item.setdefault("kind", kind)
