"""/readyz: ready only once the first lists are applied and the CA bundle is written."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from extender.config import Settings
from extender.kube.cache import CacheSink, Resource, WatchCache, Watcher
from extender.kube.rawapi import KubeError
from extender.kube.webhook_config import WebhookConfigError
from extender.metrics import Metrics
from extender.service import GangService

PODS = Resource("pods", "/api/v1/pods")


class DeferredLoop:
    """Stands in for a busy event loop: handed-over calls wait until `run_pending`."""

    def __init__(self) -> None:
        self.pending: list[tuple[Callable[..., None], tuple[Any, ...]]] = []
        self.lock = threading.Lock()

    def call_soon_threadsafe(self, fn: Callable[..., None], *args: Any) -> None:
        with self.lock:
            self.pending.append((fn, args))

    def run_pending(self) -> None:
        with self.lock:
            calls, self.pending = self.pending, []
        for fn, args in calls:
            fn(*args)


class CountingSink(CacheSink):
    def __init__(self) -> None:
        self.applied: list[str] = []

    def on_page(self, kind: str, items: list[dict[str, Any]], first: bool, last: bool) -> None:
        self.applied += [i["metadata"]["name"] for i in items]

    def on_event(self, kind: str, event_type: str, obj: dict[str, Any]) -> None:
        self.applied.append(obj["metadata"]["name"])


class TwoPagesThenQuiet:
    def __init__(self) -> None:
        self.watching = threading.Event()

    def call(self, method: str, path: str, *, query: dict[str, Any], timeout: float) -> Any:
        if "continue" not in query:
            return {"metadata": {"continue": "2"}, "items": [{"metadata": {"name": "a"}}]}
        return {"metadata": {"resourceVersion": "7"}, "items": [{"metadata": {"name": "b"}}]}

    def stream(self, path: str, *, query: dict[str, Any], read_timeout: float) -> Iterator[Any]:
        self.watching.set()
        threading.Event().wait(3600)
        yield {}


def test_synced_only_once_the_last_page_is_applied_on_the_loop() -> None:
    api, sink, loop = TwoPagesThenQuiet(), CountingSink(), DeferredLoop()
    cache = WatchCache(api, sink, loop, Metrics(), resources=(PODS,))  # type: ignore[arg-type]
    [watcher] = cache.watchers
    watcher.start()
    assert api.watching.wait(5)  # the watch thread is done listing ...
    assert not watcher.synced.is_set()  # ... but the loop has not applied the pages yet
    assert not cache.synced()
    loop.run_pending()
    assert sink.applied == ["a", "b"]
    assert watcher.synced.is_set()
    assert cache.synced()
    watcher.stop()


def test_an_absent_optional_api_is_synced_through_the_loop() -> None:
    class Missing:
        def call(self, *args: Any, **kwargs: Any) -> Any:
            from extender.kube.rawapi import KubeError

            raise KubeError(404, "404 page not found")

    loop = DeferredLoop()
    optional = Resource("coscheduling-podgroups", "/apis/x/v1/podgroups", optional=True)
    watcher = Watcher(Missing(), optional, CountingSink(), loop, Metrics())  # type: ignore[arg-type]
    watcher.start()
    for _ in range(500):
        if loop.pending:
            break
        threading.Event().wait(0.01)
    assert watcher.absent
    assert not watcher.synced.is_set()
    loop.run_pending()
    assert watcher.synced.is_set()
    watcher.stop()


class SyncedCache:
    def synced(self) -> bool:
        return True

    def stop(self) -> None:
        pass


@pytest.fixture
def service(monkeypatch: pytest.MonkeyPatch) -> Iterator[GangService]:
    monkeypatch.setattr("extender.service.load_api_client", lambda path: object())
    svc = GangService(
        Settings(
            webhook_config_name="gang-extender",
            ca_bundle_retry_min_seconds=0.001,
            ca_bundle_retry_max_seconds=0.002,
        )
    )
    svc.cache = SyncedCache()  # type: ignore[assignment]
    yield svc
    svc.binder.close()


async def test_not_ready_until_the_ca_bundle_is_written(
    service: GangService, monkeypatch: pytest.MonkeyPatch
) -> None:
    outcomes: list[Exception | None] = [
        WebhookConfigError("MutatingWebhookConfiguration gang-extender does not exist"),
        KubeError(503, "the server is shutting down", "ServiceUnavailable"),
        None,
    ]
    written: list[bytes] = []

    def write_ca_bundle(raw: Any, name: str, ca_pem: bytes) -> None:
        outcome = outcomes.pop(0)
        if outcome is not None:
            raise outcome
        written.append(ca_pem)

    monkeypatch.setattr("extender.service.write_ca_bundle", write_ca_bundle)
    assert not await service._write_ca_bundle(b"CA", retry_in=0.001)
    ready, why = service.ready()
    assert not ready
    assert "CA bundle" in why and "gang-extender" in why
    await asyncio.wait_for(service._keep_writing_ca_bundle(b"CA"), 5)
    assert written == [b"CA"]
    assert service.ready() == (True, "ok")
    errors = {
        s.labels["kind"]: s.value
        for m in service.metrics.registry.collect()
        if m.name == "gang_extender_api_write_errors"
        for s in m.samples
        if s.name.endswith("_total")
    }
    assert errors == {"ca-bundle": 2.0}


def test_a_provided_cert_needs_no_ca_bundle(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("extender.service.load_api_client", lambda path: object())
    svc = GangService(Settings(tls_cert="/c.pem", tls_key="/k.pem"))  # type: ignore[arg-type]
    svc.cache = SyncedCache()  # type: ignore[assignment]
    assert svc.ready() == (True, "ok")
    svc.binder.close()
