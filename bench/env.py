"""The bench's control plane: one LocalCluster + the gang stack, and bulk helpers on it."""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.kubeclient import (
    ApiError,
    BulkResult,
    FastApi,
    bulk,
    delete_each,
    delete_nodes,
    delete_pods_each,
    wait_for,
)
from bench.objects import BENCH_LABEL, node_body
from extender.devcluster.cluster import LocalCluster, new_namespace
from extender.devcluster.nodes import STARTUP_TAINT_KEYS
from extender.devcluster.stack import GangStack

log = logging.getLogger("bench")

#: Parallel creators. The API server (not this client) is the limit past ~16 on 2 cores.
CREATE_WORKERS = 16
#: "Quiet" control plane: its processes together use less than this many CPUs...
QUIET_CORES = 0.25
#: ...or this long has passed.
QUIET_TIMEOUT_SECONDS = 30.0
#: Nodes are "settled" when no controller wrote one for this long...
NODES_SETTLED_AFTER_SECONDS = 3.0
#: ...or after this long.
NODES_SETTLE_TIMEOUT_SECONDS = 180.0
#: A namespace's deletion reaches the service's watch well within this (a local API
#: server: milliseconds), so its members' deletions that follow find it Terminating.
NAMESPACE_TERMINATING_SECONDS = 1.0


@dataclass
class BenchEnv:
    cluster: LocalCluster
    stack: GangStack
    api: FastApi
    namespaces: list[str] = field(default_factory=list)
    #: bound on each wait for Node writes to settle (short in --quick mode)
    settle_timeout: float = NODES_SETTLE_TIMEOUT_SECONDS

    # ---- namespaces ----
    def namespace(self, prefix: str, labels: dict[str, str] | None = None) -> str:
        with self.cluster.api_client() as client:
            name = new_namespace(client, prefix, labels=labels)
        self.namespaces.append(name)
        return name

    def clear_namespace(self, namespace: str, *, namespace_too: bool = False) -> int:
        """Delete the namespace's pods and PodGroups; how many pods it had.

        With `namespace_too` the namespace is deleted first, and its pods then one by one
        (faster than the namespace controller's deletion of the collection). A gang still
        binding when its members go is then a gang deleted with its namespace, which the
        service does not count as partial; deleted from a namespace that stays, it is one
        (round 21: the cleanup after a case's bound broke gang g142 and was counted)."""
        if namespace_too:
            try:
                self.api.call("DELETE", f"/api/v1/namespaces/{namespace}")
            except ApiError as err:
                if err.status != 404:
                    raise
            # The service's namespace watch sees Terminating before the pods' deletions.
            time.sleep(NAMESPACE_TERMINATING_SECONDS)
        deleted = delete_pods_each(self.api, namespace)
        _warn_failed(f"deleting the pods of {namespace}", deleted, "; waiting for them")
        for api_version in (
            "scheduling.gang-extender.io/v1alpha1",
            "scheduling.x-k8s.io/v1alpha1",
            "scheduling.k8s.io/v1beta1",  # Kubernetes' own, when served (bench/gang_schedulers.py)
        ):
            groups = delete_each(self.api, f"/apis/{api_version}/namespaces/{namespace}/podgroups")
            _warn_failed(f"deleting the {api_version} PodGroups of {namespace}", groups)
        return deleted.done + deleted.errors

    # ---- nodes ----
    def add_nodes(
        self,
        count: int,
        workload: str,
        *,
        kwok: bool,
        prefix: str,
        gpus: int | None = 8,
        start: int = 0,
        labels: dict[str, str] | None = None,
    ) -> list[str]:
        names = [f"{prefix}-{i:05d}" for i in range(start, start + count)]
        bodies = [node_body(n, workload, gpus=gpus, kwok=kwok, labels=labels) for n in names]
        result = bulk(bodies, lambda b: self.api.create("/api/v1/nodes", b), workers=CREATE_WORKERS)
        if result.errors:
            raise RuntimeError(
                f"creating {count} nodes: {result.errors} failed: {result.first_error}"
            )
        log.info("created %d nodes (%s) in %.1fs", count, workload, result.seconds)
        return names

    def wait_nodes_ready(self, workload: str, count: int, timeout: float = 180) -> float:
        """Wait until `count` kwok nodes of the workload are Ready and untainted; seconds waited."""
        started = time.monotonic()

        def ready_count() -> bool:
            page = self.api.call(
                "GET", "/api/v1/nodes", query={"labelSelector": f"{BENCH_LABEL}={workload}"}
            )
            ready = 0
            for node in page.get("items") or []:
                conditions = (node.get("status") or {}).get("conditions") or []
                taints = (node.get("spec") or {}).get("taints") or []
                if any(
                    c["type"] == "Ready" and c["status"] == "True" for c in conditions
                ) and not any(t["key"] in STARTUP_TAINT_KEYS for t in taints):
                    ready += 1
            return ready >= count

        wait_for(ready_count, timeout=timeout, what=f"{count} {workload} nodes Ready", interval=1.0)
        return time.monotonic() - started

    def remove_nodes(self, workload: str) -> None:
        removed = delete_nodes(self.api, f"{BENCH_LABEL}={workload}")
        _warn_failed(f"removing the {workload} nodes", removed)

    # ---- processes ----
    def rss_mb(self, pid: int) -> dict[str, float]:
        """VmRSS and VmHWM (peak) of a process, in MiB."""
        out: dict[str, float] = {}
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0]) / 1024
        return out

    def cpu_seconds(self, pid: int) -> float:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0
        ticks = os.sysconf("SC_CLK_TCK")
        return (int(fields[11]) + int(fields[12])) / ticks

    def node_writes(self) -> float:
        """Writes to Node objects (not their status) the API server has served so far."""
        status, body = self.api.request("GET", "/metrics")
        if status != 200:
            return 0.0
        total = 0.0
        for line in body.decode(errors="replace").splitlines():
            if (
                line.startswith("apiserver_request_total{")
                and 'resource="nodes"' in line
                and 'subresource=""' in line
                and any(f'verb="{v}"' in line for v in ("PATCH", "PUT"))
            ):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def wait_nodes_settled(self, timeout: float | None = None) -> float:
        """Wait until controllers stop rewriting Nodes; seconds waited (bounded).

        Creating thousands of nodes sets kube-controller-manager rewriting every
        one of them (the TTL controller re-annotates all nodes each time the node
        count crosses 100, 500, 1000, 2000; the lifecycle controller swaps
        taints), at ~100 nodes/s: a minute of API server load that would land in
        the middle of a measurement.
        """
        timeout = self.settle_timeout if timeout is None else timeout
        started = time.monotonic()
        last = self.node_writes()
        quiet_since = time.monotonic()
        while time.monotonic() - started < timeout:
            time.sleep(1.0)
            now = self.node_writes()
            if now != last:
                last, quiet_since = now, time.monotonic()
            elif time.monotonic() - quiet_since >= NODES_SETTLED_AFTER_SECONDS:
                break
        return time.monotonic() - started

    def wait_quiet(
        self, *, cores: float = QUIET_CORES, timeout: float = QUIET_TIMEOUT_SECONDS
    ) -> float:
        """Wait until the control plane's processes use less than `cores` CPUs (1 s windows).

        After tens of thousands of creates, the API server, controller-manager and
        schedulers keep digesting events for a while; a start-up timed in the
        middle of that measures them. Returns the seconds waited (bounded).
        """
        started = time.monotonic()
        pids = self.cluster.pids()
        while time.monotonic() - started < timeout:
            before = sum(self.cpu_seconds(p) for p in pids)
            time.sleep(1.0)
            if sum(self.cpu_seconds(p) for p in pids) - before < cores:
                break
        return time.monotonic() - started


def machine_info() -> dict[str, Any]:
    info: dict[str, Any] = {"cores": os.cpu_count()}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                info["memory_gib"] = round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    import platform

    info["python"] = platform.python_version()
    info["kernel"] = platform.release()
    return info


def _warn_failed(what: str, result: BulkResult, after: str = "") -> None:
    """Log the deletes of `result` that failed, if any: how many, and the first error."""
    if result.errors:
        log.warning(
            "%s: %d of %d deletes failed (first: %s)%s",
            what,
            result.errors,
            result.done + result.errors,
            result.first_error,
            after,
        )
