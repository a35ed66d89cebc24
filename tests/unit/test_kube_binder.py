"""The API binder: the Binding it posts, how a refusal reaches the coordinator, and the
tuning the service gives it from `Settings`."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
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
    raw = FakeRaw(fail=KubeError(403, 'pods "p" is forbidden: denied', "Forbidden"))
    binder = ApiBinder(raw)  # type: ignore[arg-type]
    try:
        with pytest.raises(BindError, match='403 Forbidden: pods "p" is forbidden') as refused:
            await binder.bind(namespace="ns", name="p", uid="u-1", node="n1")
    finally:
        binder.close()
    assert len(raw.calls) == 1, "a refusal is not retried"
    assert (refused.value.gone, refused.value.bound_to) == (False, None)


class ScriptedRaw:
    """RawApi.call answering POST binding and GET pod from scripts (KubeError: raised)."""

    def __init__(self, posts: list[Any], gets: Sequence[Any] = ()) -> None:
        self.posts = list(posts)
        self.gets = list(gets)
        self.calls: list[tuple[str, Any]] = []

    def call(self, method: str, path: str, *, body: Any = None, timeout: Any = None) -> Any:
        self.calls.append((method, timeout))
        answer = (self.posts if method == "POST" else self.gets).pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def pod_state(node: str | None, uid: str = "u-1", deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"uid": uid}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-25T00:00:00Z"
    return {"metadata": meta, "spec": {"nodeName": node} if node else {}}


SERVER_ERROR = KubeError(500, "etcdserver: leader changed", "InternalError")


async def bind_with(raw: ScriptedRaw, **kw: Any) -> None:
    retries: list[int] = []
    binder = ApiBinder(
        raw,  # type: ignore[arg-type]
        retry_backoff_seconds=0.001,
        on_retry=lambda: retries.append(1),
        **kw,
    )
    try:
        await binder.bind(namespace="ns", name="p", uid="u-1", node="n1")
    finally:
        binder.close()
        raw.retries = len(retries)  # type: ignore[attr-defined]


async def test_a_binding_that_failed_with_a_500_is_read_back_and_posted_again() -> None:
    raw = ScriptedRaw(posts=[SERVER_ERROR, {}], gets=[pod_state(None)])
    await bind_with(raw)
    assert [m for m, _ in raw.calls] == ["POST", "GET", "POST"]
    assert raw.retries == 1  # type: ignore[attr-defined]


async def test_a_binding_whose_answer_was_lost_but_landed_is_a_success() -> None:
    raw = ScriptedRaw(posts=[KubeError(0, "timed out")], gets=[pod_state("n1")])
    await bind_with(raw)
    assert [m for m, _ in raw.calls] == ["POST", "GET"]


async def test_a_conflict_because_our_earlier_attempt_landed_is_a_success() -> None:
    raw = ScriptedRaw(
        posts=[KubeError(409, "already assigned", "Conflict")], gets=[pod_state("n1")]
    )
    await bind_with(raw)


@pytest.mark.parametrize(
    ("read_back", "gone", "bound_to"),
    [
        pytest.param(pod_state("n2"), False, "n2", id="bound elsewhere by someone else"),
        pytest.param(KubeError(404, "not found", "NotFound"), True, None, id="deleted"),
        pytest.param(pod_state(None, uid="u-2"), True, None, id="re-created under a new uid"),
        pytest.param(pod_state(None, deleting=True), True, None, id="being deleted"),
    ],
)
async def test_a_failed_binding_read_back_says_why_it_can_never_succeed(
    read_back: Any, gone: bool, bound_to: str | None
) -> None:
    raw = ScriptedRaw(posts=[SERVER_ERROR], gets=[read_back])
    with pytest.raises(BindError) as failed:
        await bind_with(raw)
    assert (failed.value.gone, failed.value.bound_to) == (gone, bound_to)


async def test_a_replica_that_lost_the_lease_while_retrying_posts_no_more_bindings() -> None:
    """Issue 30, finding 6: the retries went on for binding_timeout_seconds without
    asking whether this replica still leads, so a deposed leader kept binding."""
    leading = [True]
    refused: list[int] = []

    class LosesTheLease(ScriptedRaw):
        def call(self, method: str, path: str, *, body: Any = None, timeout: Any = None) -> Any:
            if method == "GET":
                leading[0] = False  # the Lease lapses while the first answer is read back
            return super().call(method, path, body=body, timeout=timeout)

    raw = LosesTheLease(posts=[SERVER_ERROR, {}], gets=[pod_state(None)])
    with pytest.raises(BindError, match="not the leader"):
        await bind_with(raw, acting=lambda: leading[0], on_not_acting=lambda: refused.append(1))
    assert [m for m, _ in raw.calls] == ["POST", "GET"], "no second POST once deposed"
    assert refused == [1]


async def test_retries_stop_within_the_binding_timeout() -> None:
    clock = iter(float(t) for t in range(100))
    raw = ScriptedRaw(posts=[SERVER_ERROR] * 10, gets=[pod_state(None)] * 10)
    with pytest.raises(BindError, match="gave up after 3s"):
        await bind_with(raw, timeout_seconds=3.0, clock=lambda: next(clock))
    posts = [timeout for method, timeout in raw.calls if method == "POST"]
    assert posts[0] == 3.0
    assert all(t < 3.0 for t in posts[1:]), "later attempts only get what is left"


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
        assert binder.retry_backoff_seconds == Settings().binding_retry_backoff_seconds
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
