"""/readyz: ready only once the first lists are applied and the CA bundle is written."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from extender.bootstrap import CaBundle, readiness
from extender.config import Settings
from extender.kube.cache import CacheSink, WatchCache, Watcher
from extender.kube.rawapi import KubeError
from extender.kube.resources import Resource
from extender.kube.webhook_config import WebhookConfigError
from extender.metrics import Metrics
from extender.service import Deps, create_service, log_task_stacks
from tests.watch_fakes import PAGED

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
    cache = WatchCache(api, sink, loop, Metrics(), resources=(PODS,), tuning=PAGED)  # type: ignore[arg-type]
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
    watcher = Watcher(Missing(), optional, CountingSink(), loop, Metrics(), PAGED)  # type: ignore[arg-type]
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


class FakeRaw:
    def call(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("no API call expected")


def fake_deps(write_ca_bundle: Callable[[str, bytes], None] | None = None) -> Deps:
    return Deps(
        raw=FakeRaw(),  # type: ignore[arg-type]
        write_ca_bundle=write_ca_bundle,
    )


async def test_not_ready_until_the_ca_bundle_is_written() -> None:
    outcomes: list[Exception | None] = [
        WebhookConfigError("MutatingWebhookConfiguration gang-extender does not exist"),
        KubeError(503, "the server is shutting down", "ServiceUnavailable"),
        None,
    ]
    written: list[tuple[str, bytes]] = []

    def write_ca_bundle(name: str, ca_pem: bytes) -> None:
        outcome = outcomes.pop(0)
        if outcome is not None:
            raise outcome
        written.append((name, ca_pem))

    metrics = Metrics()
    settings = Settings(
        webhook_config_name="gang-extender",
        ca_bundle_retry_min_seconds=0.001,
        ca_bundle_retry_max_seconds=0.002,
    )
    bundle = CaBundle(settings, metrics, write_ca_bundle)
    assert not await bundle.write(b"CA", retry_in=0.001)
    ready, why = readiness(caches_synced=True, ca_bundle=bundle, leader=None)
    assert not ready
    assert "CA bundle" in why and "gang-extender" in why
    await asyncio.wait_for(bundle.keep_writing(b"CA"), 5)
    assert written == [("gang-extender", b"CA")]
    assert readiness(caches_synced=True, ca_bundle=bundle, leader=None) == (True, "ok")
    errors = {
        s.labels["kind"]: s.value
        for m in metrics.registry.collect()
        if m.name == "gang_extender_api_write_errors"
        for s in m.samples
        if s.name.endswith("_total")
    }
    assert errors == {"ca-bundle": 2.0}


async def test_the_service_writes_the_ca_bundle_through_its_deps() -> None:
    written: list[tuple[str, bytes]] = []
    service = create_service(
        Settings(webhook_config_name="gang-extender"),
        fake_deps(lambda name, ca_pem: written.append((name, ca_pem))),
    )
    try:
        assert service.ready() == (False, "caches not synced")
        assert not service.ca_bundle.written
        assert await service.ca_bundle.write(b"CA", retry_in=1.0)
        assert written == [("gang-extender", b"CA")]
        assert readiness(caches_synced=True, ca_bundle=service.ca_bundle, leader=None) == (
            True,
            "ok",
        )
    finally:
        service.binder.close()


def test_a_provided_cert_without_a_secret_webhook_path_needs_no_ca_bundle() -> None:
    svc = create_service(
        Settings(tls_cert="/c.pem", tls_key="/k.pem", webhook_path_secret=None),  # type: ignore[arg-type]
        fake_deps(),
    )
    assert svc.ready() == (False, "caches not synced")
    assert readiness(caches_synced=True, ca_bundle=svc.ca_bundle, leader=svc.leader) == (
        True,
        "ok",
    )
    svc.binder.close()


def test_a_provided_cert_still_writes_the_secret_webhook_path_before_ready() -> None:
    # cert-manager injects the CA; the secret path is ours to write (extender.api.webhook_path).
    svc = create_service(
        Settings(tls_cert="/c.pem", tls_key="/k.pem"),  # type: ignore[arg-type]
        fake_deps(),
    )
    assert not svc.ca_bundle.written
    svc.binder.close()


class _SyncedCache:
    def synced(self) -> bool:
        return True

    def stop(self) -> None:
        pass


def test_a_synced_single_replica_is_ready_only_once_the_plans_are_rebuilt() -> None:
    svc = create_service(
        Settings(tls_cert="/c.pem", tls_key="/k.pem", webhook_path_secret=None),  # type: ignore[arg-type]
        fake_deps(),
    )
    try:
        svc.cache = _SyncedCache()  # type: ignore[assignment]
        svc.failover.synced = svc.cache.synced
        assert svc.ready() == (
            False,
            "recovering planned gangs from their planned-node annotations",
        )
        svc.failover.step()
        assert svc.ready() == (True, "ok")
        assert svc.failover.acting()  # without leader election: always the writer
    finally:
        svc.binder.close()


def test_with_leader_election_a_replica_that_never_won_neither_is_ready_nor_acts() -> None:
    svc = create_service(
        Settings(
            tls_cert="/c.pem",  # type: ignore[arg-type]
            tls_key="/k.pem",  # type: ignore[arg-type]
            leader_elect=True,
            webhook_path_secret=None,
        ),
        fake_deps(),
    )
    try:
        svc.cache = _SyncedCache()  # type: ignore[assignment]
        svc.failover.synced = svc.cache.synced
        svc.failover.step()
        assert svc.ready() == (False, "not the leader")
        assert not svc.failover.acting()
    finally:
        svc.binder.close()


def test_the_cache_says_when_every_first_list_is_in_so_recovery_need_not_wait_for_a_poll() -> None:
    api, sink, loop = TwoPagesThenQuiet(), CountingSink(), DeferredLoop()
    told: list[bool] = []
    nodes = Resource("nodes", "/api/v1/nodes")
    cache = WatchCache(
        api,  # type: ignore[arg-type]
        sink,
        loop,  # type: ignore[arg-type]
        Metrics(),
        resources=(PODS, nodes),
        tuning=PAGED,
        on_synced=lambda: told.append(cache.synced()),
    )
    pods_watcher, nodes_watcher = cache.watchers
    pods_watcher.start()
    assert api.watching.wait(5)
    loop.run_pending()  # the pods are in; the nodes are not listed yet
    assert pods_watcher.synced.is_set()
    assert told == []
    api.watching.clear()
    nodes_watcher.start()
    for _ in range(500):
        if loop.pending:
            break
        threading.Event().wait(0.01)
    for _ in range(500):  # both pages of the nodes' list handed over
        if len(loop.pending) >= 2:
            break
        threading.Event().wait(0.01)
    loop.run_pending()
    assert told == [True]  # once, on the loop, with everything synced
    cache.stop()


async def test_sigusr2_logs_every_task_and_the_line_it_waits_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """What an operator reads when a loop seems stuck (docs/troubleshooting.md)."""

    async def waits_for_a_wiring_write() -> None:
        await asyncio.sleep(3600)

    task = asyncio.create_task(waits_for_a_wiring_write(), name="reconcile")
    await asyncio.sleep(0)
    try:
        with caplog.at_level(logging.WARNING, logger="extender.service"):
            log_task_stacks()
    finally:
        task.cancel()
    lines = [r.getMessage() for r in caplog.records]
    assert any(line.startswith("task reconcile: waits_for_a_wiring_write:") for line in lines), (
        lines
    )
