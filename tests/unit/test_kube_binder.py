"""The API binder: the Binding it posts, how a refusal reaches the coordinator, and the
tuning the service gives it from `Settings`."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from extender.config import Settings
from extender.kube.rawapi import KubeError, RawApi
from extender.kube.writers import ApiBinder
from extender.ports.binding import BindError
from extender.service import Deps, create_service


class FakeRaw:
    """RawApi.call that records each request; `hold` keeps calls in flight until set."""

    def __init__(self, *, fail: KubeError | None = None, hold: bool = False) -> None:
        self.calls: list[tuple[str, str, Any, Any]] = []
        self.fail = fail
        self.release = threading.Event()
        if not hold:
            self.release.set()
        self._lock = threading.Lock()
        self.in_flight = 0
        self.most_in_flight = 0

    def call(self, method: str, path: str, *, body: Any = None, timeout: Any = None) -> Any:
        with self._lock:
            self.calls.append((method, path, body, timeout))
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            self.release.wait(timeout=10)
            if self.fail is not None:
                raise self.fail
            return {}
        finally:
            with self._lock:
                self.in_flight -= 1


async def test_a_binding_is_posted_with_the_pods_uid_and_the_given_timeout() -> None:
    raw = FakeRaw()
    binder = ApiBinder(raw, timeout_seconds=3.5)  # type: ignore[arg-type]
    try:
        await binder.bind(namespace="ns", name="p", uid="u-1", node="n1")
    finally:
        binder.close()
    assert raw.calls == [
        (
            "POST",
            "/api/v1/namespaces/ns/pods/p/binding",
            {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": "p", "namespace": "ns", "uid": "u-1"},
                "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"},
            },
            3.5,
        )
    ]


async def test_a_refused_binding_is_a_bind_error_with_the_api_servers_words() -> None:
    raw = FakeRaw(fail=KubeError(409, 'pod "p" is already assigned to node "n2"', "Conflict"))
    binder = ApiBinder(raw)  # type: ignore[arg-type]
    try:
        with pytest.raises(BindError, match='409 Conflict: pod "p" is already assigned'):
            await binder.bind(namespace="ns", name="p", uid="u-1", node="n1")
    finally:
        binder.close()


async def test_no_more_bindings_are_in_flight_than_the_binder_has_workers() -> None:
    raw = FakeRaw(hold=True)
    binder = ApiBinder(raw, workers=2)  # type: ignore[arg-type]
    try:
        binds = [
            asyncio.create_task(binder.bind(namespace="ns", name=f"p{i}", uid=f"u{i}", node="n1"))
            for i in range(3)
        ]
        deadline = time.monotonic() + 5
        while raw.in_flight < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)  # time for a third worker, were there one
        assert raw.in_flight == 2
        raw.release.set()
        await asyncio.gather(*binds)
    finally:
        raw.release.set()
        binder.close()
    assert raw.most_in_flight == 2
    assert len(raw.calls) == 3


def test_the_binders_defaults_are_the_settings_defaults() -> None:
    raw = FakeRaw()
    binder = ApiBinder(raw)  # type: ignore[arg-type]
    try:
        assert binder.timeout_seconds == Settings().binding_timeout_seconds == 10.0
        assert binder._pool._max_workers == Settings().binder_workers == 32
    finally:
        binder.close()


def test_the_service_builds_its_binder_from_the_settings() -> None:
    service = create_service(
        Settings(binding_timeout_seconds=4.0, binder_workers=3, webhook_config_name=None),
        Deps(raw=RawApi(object())),  # type: ignore[arg-type]
    )
    try:
        assert isinstance(service.binder, ApiBinder)
        assert service.binder.timeout_seconds == 4.0
        assert service.binder._pool._max_workers == 3
    finally:
        service.binder.close()
