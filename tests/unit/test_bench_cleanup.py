"""The bench's cleanup between runs: a namespace's pods deleted one request each (all
pages of names, a pod already gone counted as deleted), and the wait for them sized
by how many there were, so the next scheduler's run starts on empty nodes."""

from __future__ import annotations

from typing import Any

import pytest

from bench import env as bench_env
from bench.kubeclient import ApiError, delete_each, delete_nodes, delete_pods_each
from bench.workloads import common


class PagedPods:
    """A FastApi stand-in: pod names in pages of two; `gone` answers a DELETE 404."""

    def __init__(
        self,
        names: list[str],
        gone: frozenset[str] = frozenset(),
        broken: frozenset[str] = frozenset(),
    ) -> None:
        self.names, self.gone, self.broken = names, set(gone), set(broken)
        self.deleted: list[tuple[str, Any]] = []
        self.listed_with: list[str | None] = []

    def call(self, method: str, path: str, body: Any = None, **kw: Any) -> dict[str, Any]:
        query = kw.get("query") or {}
        if method == "GET":
            self.listed_with.append(query.get("labelSelector"))
            start = int(query.get("continue") or 0)
            page = self.names[start : start + 2]
            more = start + 2 < len(self.names)
            return {
                "items": [{"metadata": {"name": n}} for n in page],
                "metadata": {"continue": str(start + 2)} if more else {},
            }
        name = path.rsplit("/", 1)[1]
        if name in self.gone:
            raise ApiError(404, b"not found")
        if name in self.broken:
            raise ApiError(500, b"etcd")
        self.deleted.append((path, query))
        return {}


def test_every_page_of_pods_is_deleted_one_request_each_with_no_grace() -> None:
    api = PagedPods(["a", "b", "c", "d", "e"], gone=frozenset({"c"}))
    result = delete_pods_each(api, "ns", workers=2)  # type: ignore[arg-type]
    assert (result.done, result.errors) == (5, 0), "a pod already gone counts as deleted"
    assert sorted(path for path, _ in api.deleted) == [
        f"/api/v1/namespaces/ns/pods/{n}" for n in ("a", "b", "d", "e")
    ]
    assert all(query == {"gracePeriodSeconds": 0} for _, query in api.deleted)


def test_a_delete_that_fails_otherwise_is_counted_as_an_error() -> None:
    result = delete_pods_each(PagedPods(["a", "b"], broken=frozenset({"b"})), "ns")  # type: ignore[arg-type]
    assert (result.done, result.errors) == (1, 1)
    assert "500" in result.first_error


@pytest.mark.parametrize(("pods", "waited"), [(0, 120.0), (100, 120.0), (8000, 400.0)])
def test_the_wait_for_a_namespace_to_empty_grows_with_its_pods(
    monkeypatch: pytest.MonkeyPatch, pods: int, waited: float
) -> None:
    seen: dict[str, float] = {}

    class Env:
        api = PagedPods([])

        def clear_namespace(self, namespace: str, *, namespace_too: bool = False) -> int:
            return pods

    def wait_for(probe: Any, *, timeout: float, what: str, interval: float) -> None:
        seen["timeout"] = timeout
        assert probe() is True  # the namespace lists no pod

    monkeypatch.setattr(common, "wait_for", wait_for)
    common.clear(Env(), "ns")  # type: ignore[arg-type]
    assert seen["timeout"] == waited


def test_podgroups_are_deleted_one_request_each_and_an_unserved_kind_is_empty() -> None:
    groups = PagedPods(["g0", "g1", "g2"])
    result = delete_each(groups, "/apis/x/v1/namespaces/ns/podgroups", workers=2)  # type: ignore[arg-type]
    assert (result.done, result.errors) == (3, 0)
    assert all(query == {} for _, query in groups.deleted)  # no grace period asked for them

    class NotServed(PagedPods):
        def call(self, method: str, path: str, body: Any = None, **kw: Any) -> dict[str, Any]:
            raise ApiError(404, b"the server could not find the requested resource")

    result = delete_each(NotServed([]), "/apis/y/v1/namespaces/ns/podgroups")  # type: ignore[arg-type]
    assert (result.done, result.errors) == (0, 0)


def test_a_workloads_nodes_are_deleted_one_request_each_by_its_label() -> None:
    nodes = PagedPods(["n0", "n1", "n2"])
    result = delete_nodes(nodes, "bench=gang", workers=2)  # type: ignore[arg-type]
    assert (result.done, result.errors) == (3, 0)
    assert set(nodes.listed_with) == {"bench=gang"}
    assert sorted(path for path, _ in nodes.deleted) == [f"/api/v1/nodes/n{i}" for i in range(3)]


@pytest.mark.parametrize("already_gone", [False, True])
def test_a_gang_case_namespace_is_deleted_before_its_pods_so_a_binding_gang_goes_with_it(
    monkeypatch: pytest.MonkeyPatch, already_gone: bool
) -> None:
    """The service does not count a gang whose members go with their namespace as
    partial; deleted from a namespace that stays, it must (round 21's gang g142)."""
    monkeypatch.setattr(bench_env, "NAMESPACE_TERMINATING_SECONDS", 0.0)
    api = PagedPods(["a", "b"], gone=frozenset({"ns"} if already_gone else set()))
    env = bench_env.BenchEnv(cluster=None, stack=None, api=api)  # type: ignore[arg-type]
    assert env.clear_namespace("ns", namespace_too=True) == 2
    deleted = [path for path, _ in api.deleted if "/podgroups/" not in path]
    pods = ["/api/v1/namespaces/ns/pods/a", "/api/v1/namespaces/ns/pods/b"]
    if already_gone:
        assert sorted(deleted) == pods
    else:
        assert deleted[0] == "/api/v1/namespaces/ns"
        assert sorted(deleted[1:]) == pods

    kept = PagedPods(["a"])
    bench_env.BenchEnv(cluster=None, stack=None, api=kept).clear_namespace("ns")  # type: ignore[arg-type]
    assert [path for path, _ in kept.deleted if "/podgroups/" not in path] == [
        "/api/v1/namespaces/ns/pods/a"
    ]
