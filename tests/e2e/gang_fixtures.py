"""Fixtures and helpers for e2e tests of the product: the service + gang scheduler on the cluster.

`gang_stack` runs `gang-extender serve` and a second stock kube-scheduler with
deploy/scheduler/scheduler-config.yaml against the session cluster, exactly as
`gang-extender dev up` does.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from kubernetes import client as k8s

from extender.devcluster.cluster import LocalCluster, new_namespace
from extender.devcluster.stack import GangStack
from extender.domain.membership import (
    GROUP_LABEL,
    INJECT_NAMESPACE_LABEL,
    SCHEDULER_NAME,
    TASK_LABEL,
)
from extender.kube.rawapi import KubeError, RawApi, path_of
from extender.kube.writers import podgroup_path

# Bounded waits: generous for a loaded 2-core CI machine; they bound hangs, they do not measure.
SETTLE_SECONDS = 90


@pytest.fixture(scope="session")
def gang_stack(cluster: LocalCluster) -> Iterator[GangStack]:
    stack = GangStack(cluster)
    stack.start()
    try:
        yield stack
    finally:
        stack.stop()


@pytest.fixture(scope="session")
def raw(api: k8s.ApiClient) -> RawApi:
    return RawApi(api)


def service_metric(stack: GangStack, name: str) -> float:
    """One unlabelled sample of the service's own metrics; 0 when not exported yet."""
    for line in stack.metrics_text().splitlines():
        if line.startswith(f"{name} "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


@pytest.fixture
def no_partial_gangs(gang_stack: GangStack) -> Iterator[None]:
    """After the test: the service counted no partial gang (issue #11: never one, anywhere)."""
    yield
    assert service_metric(gang_stack, "gang_extender_partial_gangs_total") == 0, (
        "a gang was left partial: look for GangPartial Events"
    )


@pytest.fixture
def injected_namespace(
    api: k8s.ApiClient, core: k8s.CoreV1Api, gang_stack: GangStack
) -> Iterator[str]:
    """A fresh namespace labelled gang-extender.io/inject=enabled."""
    name = new_namespace(api, "wired", labels={INJECT_NAMESPACE_LABEL: "enabled"})
    yield name
    delete_namespace(core, name)


def parse_status_table(output: str) -> dict[str, dict[str, str]]:
    """`gang-extender status` output as {group name: {column: cell}} (columns are padded)."""
    from extender.cli import STATUS_HEADER

    lines = output.splitlines()
    starts = [re.search(rf"(?<!\S){re.escape(c)}(?!\S)", lines[0]).start() for c in STATUS_HEADER]  # type: ignore[union-attr]
    rows = {}
    for line in lines[1:]:
        ends = [*starts[1:], len(line) + 1]
        cells = [line[a:b].strip() for a, b in zip(starts, ends, strict=True)]
        rows[cells[1]] = dict(zip(STATUS_HEADER, cells, strict=True))
    return rows


def delete_namespace(core: k8s.CoreV1Api, name: str) -> None:
    """Delete without waiting; gone already is fine."""
    try:
        core.delete_namespace(name)
    except k8s.ApiException as exc:
        if exc.status != 404:
            raise


def wait_until(probe: Callable[[], Any], *, timeout: float = SETTLE_SECONDS, what: str = "") -> Any:
    """Poll until probe() is truthy; its value. Fails the test with `what` on timeout."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(0.25)
    pytest.fail(f"timed out after {timeout}s waiting for {what or probe.__name__} (last: {last!r})")


def gang_pod(
    name: str,
    group: str,
    *,
    gpus: int = 0,
    cpu: str = "100m",
    memory: str = "128Mi",
    task: str | None = None,
    node_selector: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    scheduler: str = SCHEDULER_NAME,
    gated: bool = False,
) -> dict[str, Any]:
    labels = {GROUP_LABEL: group} if group else {}
    if task:
        labels[TASK_LABEL] = task
    resources: dict[str, Any] = {"requests": {"cpu": cpu, "memory": memory}, "limits": {}}
    if gpus:
        resources["limits"]["nvidia.com/gpu"] = gpus
        resources["requests"]["nvidia.com/gpu"] = gpus
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "nodeSelector": node_selector or {},
        "containers": [
            {"name": "main", "image": "registry.example/train:1", "resources": resources}
        ],
    }
    if gated:
        # kube-scheduler leaves a gated pod alone until `ungate`: a member that counts
        # toward its gang but cannot reach bind, which holds the others in the barrier.
        spec["schedulingGates"] = [{"name": HOLD_GATE}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels, "annotations": annotations or {}},
        "spec": spec,
    }


HOLD_GATE = "gang-extender.io/test-hold"


def ungate(raw: RawApi, namespace: str, name: str) -> None:
    raw.call(
        "PATCH",
        path_of("api", "v1", "namespaces", namespace, "pods", name),
        body=[{"op": "remove", "path": "/spec/schedulingGates"}],
        content_type="application/json-patch+json",
    )


def planned(pod: dict[str, Any]) -> bool:
    return "gang-extender.io/planned-node" in (pod["metadata"].get("annotations") or {})


def podgroup(name: str, min_member: int, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.gang-extender.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {"minMember": min_member, **spec},
    }


def create(raw: RawApi, namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
    if obj["kind"] == "PodGroup":
        path = podgroup_path(namespace)
    else:
        path = path_of("api", "v1", "namespaces", namespace, "pods")
    return raw.call("POST", path, body=obj)


def list_pods(raw: RawApi, namespace: str, selector: str | None = None) -> list[dict[str, Any]]:
    query = {"labelSelector": selector} if selector else None
    return raw.call("GET", path_of("api", "v1", "namespaces", namespace, "pods"), query=query)[
        "items"
    ]


def get_podgroup(raw: RawApi, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        return raw.call("GET", podgroup_path(namespace, name))
    except KubeError as err:
        if err.status == 404:
            return None
        raise


def condition_message(pg: dict[str, Any] | None) -> str:
    for c in ((pg or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == "Scheduled":
            return str(c.get("message", ""))
    return ""


def bound(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in pods if p["spec"].get("nodeName")]


def delete_pods(raw: RawApi, namespace: str, selector: str) -> None:
    raw.call(
        "DELETE",
        path_of("api", "v1", "namespaces", namespace, "pods"),
        query={"labelSelector": selector, "gracePeriodSeconds": 0},
    )


@dataclass
class BindRecorder:
    """Watches a namespace and records when each pod first got a node, and GPU use per node."""

    raw: RawApi
    namespace: str
    first_bound: dict[str, float] = field(default_factory=dict)
    node_of: dict[str, str] = field(default_factory=dict)
    max_gpus_per_node: dict[str, int] = field(default_factory=dict)
    _gpus: dict[str, int] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        """Watch until stopped; never die. A loaded API server may end a watch with an
        ERROR event (e.g. "too large resource version" while its watch cache lags the
        list): then relist, seeing every pod the list returns, as the service's own
        cache does. A recorder that died silently would record nothing."""
        path = path_of("api", "v1", "namespaces", self.namespace, "pods")
        version: str | None = None
        while not self._stop.is_set():
            try:
                if version is None:
                    listed = self.raw.call("GET", path)
                    # The list is the truth now: pods deleted while unwatched are gone.
                    self.node_of.clear()
                    self._gpus.clear()
                    for pod in listed.get("items", []):
                        self._see("ADDED", pod)
                    version = listed["metadata"]["resourceVersion"]
                for event in self.raw.stream(
                    path,
                    query={"watch": "true", "resourceVersion": version, "timeoutSeconds": 5},
                    read_timeout=10,
                ):
                    obj = event.get("object") or {}
                    if event.get("type") == "ERROR":
                        raise KubeError(int(obj.get("code") or 500), str(obj.get("message")))
                    version = obj.get("metadata", {}).get("resourceVersion", version)
                    if event.get("type") != "BOOKMARK":
                        self._see(event["type"], obj)
            except Exception:  # relist after any failure, and keep recording
                version = None
                self._stop.wait(0.2)

    def _see(self, kind: str, pod: dict[str, Any]) -> None:
        name = pod["metadata"]["name"]
        node = pod["spec"].get("nodeName")
        gpus = int(
            ((pod["spec"]["containers"][0].get("resources") or {}).get("limits") or {}).get(
                "nvidia.com/gpu", 0
            )
        )
        if kind == "DELETED":
            old = self.node_of.pop(name, None)
            if old:
                self._gpus[old] -= gpus
            return
        if node and name not in self.node_of:
            self.first_bound.setdefault(name, time.time())
            self.node_of[name] = node
            self._gpus[node] = self._gpus.get(node, 0) + gpus
            self.max_gpus_per_node[node] = max(
                self.max_gpus_per_node.get(node, 0), self._gpus[node]
            )

    def stop(self) -> None:
        self._stop.set()
