"""A small, fast client for the bench's own traffic to the API server.

The bench creates tens of thousands of objects; the `kubernetes` package's
models cost milliseconds each, so this speaks raw JSON bytes over one
keep-alive `http.client` connection per thread, authenticated with the local
cluster's admin certificate. Only 127.0.0.1 is ever contacted.
"""

from __future__ import annotations

import http.client
import logging
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode, urlparse

import orjson

from extender.devcluster.cluster import LocalCluster

log = logging.getLogger("bench.kubeclient")

#: A watch is reopened after this long (the server ends it); reads wait a bit longer.
WATCH_SECONDS = 300
#: Consecutive list/watch failures before a BindWatch gives up.
WATCH_MAX_FAILURES = 5


class ApiError(Exception):
    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(f"{status}: {body[:300]!r}")
        self.status = status
        self.body = body


class FastApi:
    """Raw JSON over keep-alive HTTPS to the local API server (thread-safe: one conn per thread)."""

    def __init__(self, cluster: LocalCluster, timeout: float = 60.0) -> None:
        url = urlparse(cluster.server)
        assert url.hostname in ("127.0.0.1", "localhost"), "the bench only talks to loopback"
        self.host = url.hostname
        self.port = int(url.port or 443)
        conf = cluster.api_client().configuration
        ctx = ssl.create_default_context(cafile=conf.ssl_ca_cert)
        ctx.load_cert_chain(conf.cert_file, conf.key_file)
        self.context = ctx
        self.timeout = timeout
        self._local = threading.local()

    def _conn(self) -> http.client.HTTPSConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = http.client.HTTPSConnection(
                self.host, self.port, context=self.context, timeout=self.timeout
            )
            self._local.conn = conn
        return conn

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: dict[str, Any] | None = None,
        content_type: str = "application/json",
    ) -> tuple[int, bytes]:
        if query:
            path = f"{path}?{urlencode(query)}"
        data = body if isinstance(body, bytes | None) else orjson.dumps(body)
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = content_type
        for attempt in (1, 2):
            conn = self._conn()
            try:
                conn.request(method, path, body=data, headers=headers)
                resp = conn.getresponse()
                return resp.status, resp.read()
            except (http.client.HTTPException, OSError):
                conn.close()
                self._local.conn = None
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def call(self, method: str, path: str, body: Any = None, **kw: Any) -> dict[str, Any]:
        status, data = self.request(method, path, body, **kw)
        if not 200 <= status < 300:
            raise ApiError(status, data)
        return orjson.loads(data) if data else {}

    def create(self, collection: str, obj: dict[str, Any]) -> dict[str, Any]:
        return self.call("POST", collection, obj)


@dataclass
class BulkResult:
    done: int = 0
    errors: int = 0
    first_error: str = ""
    seconds: float = 0.0

    @property
    def rate(self) -> float:
        return self.done / self.seconds if self.seconds else 0.0


def bulk(
    items: Iterable[Any],
    fn: Callable[[Any], object],
    *,
    workers: int = 16,
    deadline: float | None = None,
) -> BulkResult:
    """Run fn over items on a thread pool; count successes and errors (bounded by deadline)."""
    result = BulkResult()
    lock = threading.Lock()
    started = time.monotonic()

    def one(item: Any) -> None:
        if deadline is not None and time.monotonic() > deadline:
            with lock:
                result.errors += 1
                result.first_error = result.first_error or "deadline passed"
            return
        try:
            fn(item)
            ok, err = True, ""
        except Exception as exc:  # counted and reported, never fatal for a bulk step
            ok, err = False, repr(exc)
        with lock:
            if ok:
                result.done += 1
            else:
                result.errors += 1
                result.first_error = result.first_error or err

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="bulk") as pool:
        list(pool.map(one, items))
    result.seconds = time.monotonic() - started
    return result


def pods_path(namespace: str) -> str:
    return f"/api/v1/namespaces/{namespace}/pods"


def delete_pods_each(api: FastApi, namespace: str, *, workers: int = 16) -> BulkResult:
    """Delete a namespace's pods one request each, `workers` at a time (grace 0).

    The API server's DELETE of a collection deletes its items one at a time
    (kube-apiserver's --delete-collection-workers, 1 by default): 8,000 bound pods
    outlasted a 60 s answer and a 120 s wait after it (docs/benchmarks.md round 15).
    A pod already gone (404) counts as deleted."""

    return delete_each(api, pods_path(namespace), workers=workers, grace_zero=True)


def delete_each(
    api: FastApi,
    path: str,
    *,
    selector: str | None = None,
    workers: int = 16,
    grace_zero: bool = False,
) -> BulkResult:
    """Delete every object of the collection at `path` one request each, `workers` at a
    time; an object already gone (404) counts as deleted, a collection not served
    (404 on the list) as empty. One DELETE of a collection of 1,000 PodGroups outlasted
    the API server's 60 s answer at 5,000 nodes (docs/benchmarks.md round 17)."""
    try:
        listed = names(api, path, selector)
    except ApiError as err:
        if err.status != 404:
            raise
        listed = []
    query = {"gracePeriodSeconds": 0} if grace_zero else None

    def delete(name: str) -> None:
        try:
            api.call("DELETE", f"{path}/{name}", query=query)
        except ApiError as err:
            if err.status != 404:
                raise

    return bulk(listed, delete, workers=workers)


def delete_nodes(api: FastApi, selector: str, *, workers: int = 16) -> BulkResult:
    """Delete the nodes `selector` picks one request each, `workers` at a time: one
    DELETE of a collection of 5,000 nodes outlasted the API server's answer (round 17)."""
    return delete_each(api, "/api/v1/nodes", selector=selector, workers=workers)


def names(api: FastApi, path: str, selector: str | None = None) -> list[str]:
    """The names of a collection's objects, every page of them."""
    found: list[str] = []
    token = None
    while True:
        query: dict[str, Any] = {"limit": 5000}
        if selector:
            query["labelSelector"] = selector
        if token:
            query["continue"] = token
        page = api.call("GET", path, query=query)
        found.extend(item["metadata"]["name"] for item in page.get("items") or [])
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return found


def count(api: FastApi, path: str, selector: str | None = None) -> int:
    """How many objects a collection has."""
    return len(names(api, path, selector))


def wait_for(probe: Callable[[], Any], *, timeout: float, what: str, interval: float = 0.25) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")


@dataclass
class BindWatch:
    """Watches one namespace's pods; records when each pod was first seen with a node.

    Times are `time.monotonic()` at event arrival in this process, the same
    clock the creators use, so create->bind intervals are comparable.
    """

    api: FastApi
    namespace: str
    bound_at: dict[str, float] = field(default_factory=dict)
    node_of: dict[str, str] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _ready: threading.Event = field(default_factory=threading.Event)
    _cond: threading.Condition = field(default_factory=threading.Condition)
    error: str = ""

    def start(self) -> BindWatch:
        self._thread = threading.Thread(target=self._run, name="bind-watch", daemon=True)
        self._thread.start()
        if not self._ready.wait(30):
            raise TimeoutError("bind watch did not start")
        return self

    def _events(self, version: str) -> Iterator[dict[str, Any]]:
        conn = http.client.HTTPSConnection(
            self.api.host, self.api.port, context=self.api.context, timeout=WATCH_SECONDS + 30
        )
        query = urlencode(
            {"watch": "true", "resourceVersion": version, "timeoutSeconds": WATCH_SECONDS}
        )
        try:
            conn.request("GET", f"{pods_path(self.namespace)}?{query}")
            resp = conn.getresponse()
            if resp.status != 200:
                raise ApiError(resp.status, resp.read())
            self._ready.set()
            pending = b""
            while not self._stop.is_set():
                chunk = resp.read1(65536)
                if not chunk:
                    return
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield orjson.loads(line)
        finally:
            conn.close()

    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                listing = self.api.call("GET", pods_path(self.namespace))
                for pod in listing.get("items") or []:
                    self._see(pod)
                version = listing["metadata"]["resourceVersion"]
                while not self._stop.is_set():
                    for event in self._events(version):
                        obj = event.get("object") or {}
                        if event.get("type") == "ERROR":  # e.g. 410 Gone: list again
                            raise ApiError(int(obj.get("code") or 500), orjson.dumps(obj))
                        version = (obj.get("metadata") or {}).get("resourceVersion", version)
                        if event.get("type") in ("ADDED", "MODIFIED"):
                            self._see(obj)
                    failures = 0
            except Exception as exc:  # relist; surfaced by wait_bound when it persists
                failures += 1
                if failures >= WATCH_MAX_FAILURES:
                    self.error = repr(exc)
                    self._ready.set()
                    return
                time.sleep(0.5)

    def _see(self, pod: dict[str, Any]) -> None:
        node = (pod.get("spec") or {}).get("nodeName")
        name = pod["metadata"]["name"]
        if node and name not in self.bound_at:
            with self._cond:
                self.bound_at[name] = time.monotonic()
                self.node_of[name] = node
                self._cond.notify_all()

    def wait_bound(self, names: Iterable[str], timeout: float) -> bool:
        """True when every named pod is bound; False at the timeout."""
        wanted = set(names)
        deadline = time.monotonic() + timeout
        with self._cond:
            while not wanted <= self.bound_at.keys():
                if self.error:
                    raise RuntimeError(f"bind watch failed: {self.error}")
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 1.0))
        return True

    def stop(self) -> None:
        self._stop.set()
