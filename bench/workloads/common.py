"""Shared by the scheduling workloads: create pods fast, time them until bound."""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Container, Iterable, Mapping, Sequence
from typing import Any

from bench.env import CREATE_WORKERS, BenchEnv
from bench.kubeclient import BindWatch, bulk, pods_path, wait_for
from bench.schedmetrics import LABEL_PAIRS, Histogram, between, histogram
from bench.stats import percentile, summary_ms

log = logging.getLogger("bench")


def create_and_time(
    env: BenchEnv,
    namespace: str,
    bodies: Sequence[dict[str, Any]],
    *,
    timeout: float,
    workers: int = CREATE_WORKERS,
) -> dict[str, Any]:
    """Create the pods in parallel, wait until all are bound; throughput and latencies.

    Throughput is pods / (last bind seen - first create sent), on one monotonic
    clock; binds are seen through a watch opened before the first create.
    """
    watch = BindWatch(env.api, namespace).start()
    created_at: dict[str, float] = {}
    lock = threading.Lock()

    def create(body: dict[str, Any]) -> None:
        env.api.create(pods_path(namespace), body)
        with lock:
            created_at[body["metadata"]["name"]] = time.monotonic()

    names = [b["metadata"]["name"] for b in bodies]
    started = time.monotonic()
    made = bulk(bodies, create, workers=workers, deadline=started + timeout)
    creates_done = time.monotonic()
    left = max(1.0, timeout - (creates_done - started))
    complete = watch.wait_bound(names, left)
    cut = time.monotonic()
    if not complete:
        # A gang whose barrier released just before the bound is still binding its
        # last members (its 8 binds take ~0.1 s): seen here, it is not counted
        # partial, nor complete (`bound_after_cut`).
        watch.wait_bound(names, PARTIAL_SETTLE_SECONDS)
    watch.stop()
    seen = {n: t for n, t in watch.bound_at.items() if n in created_at}
    bound = {n: t for n, t in seen.items() if t <= cut}
    last = max(bound.values()) if bound else time.monotonic()
    span = last - started
    latencies = [bound[n] - created_at[n] for n in bound]
    return {
        "pods": len(names),
        "created": made.done,
        "create_errors": made.errors,
        "bound": len(bound),
        "complete": complete and len(bound) == len(names),
        "create_seconds": round(creates_done - started, 2),
        "seconds": round(span, 2),
        "pods_per_second": round(len(bound) / span, 1) if span > 0 else 0.0,
        "create_to_bind": summary_ms(latencies),
        "node_of": dict(watch.node_of),
        "bound_at": {n: t - started for n, t in bound.items()},
        "created_at": {n: t - started for n, t in created_at.items()},
        "bound_after_cut": sorted(n for n in seen if n not in bound),
    }


# How long the bind watch stays open after a run's bound, for the binds of gangs
# released just before it (counted neither complete nor partial).
PARTIAL_SETTLE_SECONDS = 3.0


def steady_rate(bound_at: dict[str, float], low: float = 10, high: float = 90) -> float:
    """Pods/s between the low and high percentiles of bind times (ignores ramp-up and tail)."""
    times = sorted(bound_at.values())
    if len(times) < 10:
        return 0.0
    t_low, t_high = percentile(times, low), percentile(times, high)
    count = sum(1 for t in times if t_low <= t <= t_high)
    return round(count / (t_high - t_low), 1) if t_high > t_low else 0.0


#: The wait for a namespace's pods to be gone: at least this long...
CLEAR_MIN_SECONDS = 120.0
#: ...or this long per pod deleted (8,000 pods: 400 s).
CLEAR_SECONDS_PER_POD = 0.05


def clear(
    env: BenchEnv, namespace: str, timeout: float | None = None, *, namespace_too: bool = False
) -> None:
    """Delete every pod (and PodGroup) of the namespace and wait until they are gone;
    with `namespace_too`, the namespace first (`BenchEnv.clear_namespace`).

    The wait grows with the pods deleted (`timeout` overrides it): the next run must
    start on empty nodes, or it measures nothing."""
    started = time.monotonic()
    pods = env.clear_namespace(namespace, namespace_too=namespace_too)
    if timeout is None:
        timeout = max(CLEAR_MIN_SECONDS, pods * CLEAR_SECONDS_PER_POD)

    def empty() -> bool:
        page = env.api.call("GET", pods_path(namespace), query={"limit": 1})
        return not page.get("items")

    wait_for(empty, timeout=timeout, what=f"pods of {namespace} deleted", interval=0.5)
    log.info("cleared %s: %d pods gone in %.1fs", namespace, pods, time.monotonic() - started)


# ---- gangs: partial ones, and how many nodes each spans (pure) ----
def members_by_group(pods: Iterable[dict[str, Any]], label: str) -> dict[str, list[str]]:
    """Pod names per value of the group label (pods without the label are skipped)."""
    out: dict[str, list[str]] = defaultdict(list)
    for pod in pods:
        meta = pod.get("metadata") or {}
        group = (meta.get("labels") or {}).get(label)
        if group:
            out[group].append(meta["name"])
    return dict(out)


def partial_gangs(members: Mapping[str, Sequence[str]], bound: Container[str]) -> int:
    """Gangs with some but not all of their members bound: must be 0 for a gang scheduler."""
    return sum(1 for names in members.values() if 0 < sum(n in bound for n in names) < len(names))


def nodes_spanned(
    members: Mapping[str, Sequence[str]], node_of: Mapping[str, str]
) -> dict[str, Any]:
    """Distinct nodes per fully bound gang: mean, max and the count per number of nodes."""
    spans = [
        len({node_of[n] for n in names})
        for names in members.values()
        if names and all(n in node_of for n in names)
    ]
    if not spans:
        return {"gangs": 0, "mean": None, "max": None, "histogram": {}}
    histogram: dict[str, int] = {}
    for span in sorted(spans):
        histogram[str(span)] = histogram.get(str(span), 0) + 1
    return {
        "gangs": len(spans),
        "mean": round(sum(spans) / len(spans), 2),
        "max": max(spans),
        "histogram": histogram,
    }


def observed_partial_gangs(env: BenchEnv, namespace: str, label: str) -> int:
    """Partial gangs among a namespace's pods as the API server has them now."""
    pods = list_pods(env, namespace)
    bound = {p["metadata"]["name"] for p in pods if (p.get("spec") or {}).get("nodeName")}
    return partial_gangs(members_by_group(pods, label), bound)


def list_pods(env: BenchEnv, namespace: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    token = None
    while True:
        query: dict[str, Any] = {"limit": 5000}
        if token:
            query["continue"] = token
        page = env.api.call("GET", pods_path(namespace), query=query)
        items += page.get("items") or []
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return items


# ---- the service's own metrics ----
def service_metric(env: BenchEnv, name: str, labels: str = "") -> float | None:
    """One sample of the gang-extender service's /metrics (`labels` as written there,
    e.g. 'verb="filter"'); 0 when absent, None when the service cannot be read."""
    try:
        text = env.stack.metrics_text()
    except OSError:
        return None
    prefix = f"{name}{{{labels}}} " if labels else f"{name} "
    for line in text.splitlines():
        if line.startswith(prefix):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


PARTIAL_GANGS_METRIC = "gang_extender_partial_gangs_total"
REQUEST_SECONDS = "gang_extender_request_duration_seconds"


def verb_histograms(env: BenchEnv, verbs: Sequence[str]) -> dict[str, Histogram] | None:
    """The service's request-duration histogram per verb: cumulative bucket counts
    by upper bound ("+Inf" included), plus "sum" and "count"; None when unreadable."""
    try:
        text = env.stack.metrics_text()
    except OSError:
        return None
    return {verb: histogram(text, REQUEST_SECONDS, {"verb": verb}) for verb in verbs}


FILTER_CANDIDATES = "gang_extender_filter_candidate_nodes"


def filter_candidates(env: BenchEnv) -> Histogram | None:
    """The service's histogram of nodes offered per filter request; None when unreadable."""
    try:
        return histogram(env.stack.metrics_text(), FILTER_CANDIDATES)
    except OSError:
        return None


def candidate_figures(before: Histogram | None, after: Histogram | None) -> dict[str, float] | None:
    """Filter requests over a run (after - before): how many, how many offered one node
    (kube-scheduler checking a nominated node first), and the mean nodes offered."""
    if before is None or after is None:
        return None
    filters = after.get("count", 0.0) - before.get("count", 0.0)
    nodes = after.get("sum", 0.0) - before.get("sum", 0.0)
    return {
        "filters": filters,
        "one_node": after.get("1.0", 0.0) - before.get("1.0", 0.0),
        "mean_nodes": round(nodes / filters, 1) if filters else 0.0,
    }


def verb_latency(
    before: dict[str, Histogram] | None, after: dict[str, Histogram] | None
) -> dict[str, dict[str, float | None]] | None:
    """Per verb over a run (after - before): requests, mean ms, and p50/p99 ms as the
    upper bound of the histogram bucket holding that rank (the service's view: from
    request read to answer written, the bind barrier's wait included); read as the
    schedulers' attempt histograms are (bench/schedmetrics.py)."""
    if before is None or after is None:
        return None
    return {
        verb: between(before.get(verb, {}), now, count_key="requests")
        for verb, now in after.items()
    }


_WRITE_VERBS = ("POST", "PUT", "PATCH", "DELETE")


def api_writes(env: BenchEnv) -> dict[str, float] | None:
    """The API server's successful writes so far (`apiserver_request_total`, 2xx), by
    "VERB resource[/subresource]"; None when its /metrics cannot be read. Counts every
    client's: the bench's creates, the scheduler's bindings and Events, the service's
    annotations and Events, KWOK's status updates."""
    try:
        status, body = env.api.request("GET", "/metrics")
    except OSError:
        return None
    if status != 200:
        return None
    found: dict[str, float] = {}
    for line in body.decode().splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels = dict(LABEL_PAIRS.findall(line))
        if labels.get("verb") not in _WRITE_VERBS or not labels.get("code", "").startswith("2"):
            continue
        what = labels.get("resource", "")
        if labels.get("subresource"):
            what += "/" + labels["subresource"]
        key = f"{labels['verb']} {what}"
        found[key] = found.get(key, 0.0) + float(line.rsplit(" ", 1)[1])
    return found


def process_cpu(env: BenchEnv) -> dict[str, tuple[int, float]]:
    """(pid, CPU seconds so far) of every process the bench's control plane runs, by
    name: the API server, etcd, the schedulers, KWOK, the service."""
    return {
        name: (proc.pid, env.cpu_seconds(proc.pid)) for name, proc in env.cluster.processes.items()
    }


def cpu_between(
    before: dict[str, tuple[int, float]], after: dict[str, tuple[int, float]]
) -> dict[str, float]:
    """CPU seconds each process used between two readings, largest first; a process
    started between them (a new pid) counts from its start, one idle throughout
    (under 10 ms) is left out."""
    used: dict[str, float] = {}
    for name, (pid, seconds) in after.items():
        then = before.get(name)
        spent = seconds - then[1] if then is not None and then[0] == pid else seconds
        if spent >= 0.01:
            used[name] = round(spent, 2)
    return dict(sorted(used.items(), key=lambda kv: -kv[1]))


def writes_between(
    before: dict[str, float] | None, after: dict[str, float] | None
) -> dict[str, float] | None:
    """`after` - `before`, kinds that did not move left out."""
    if before is None or after is None:
        return None
    moved = {k: v - before.get(k, 0.0) for k, v in after.items()}
    return {k: v for k, v in sorted(moved.items()) if v > 0}


#: Writes that go on after the last bind (queued Events, annotations): counted until
#: these kinds have not moved for `WRITES_QUIET_SECONDS`, at most `WRITES_SETTLE_MAX_SECONDS`.
LAGGING_WRITES = ("POST events", "PATCH pods")
WRITES_QUIET_SECONDS = 2.0
WRITES_SETTLE_MAX_SECONDS = 30.0
WRITES_POLL_SECONDS = 0.5


def settled_writes(env: BenchEnv) -> dict[str, float] | None:
    """`api_writes`, read once the lagging kinds stopped moving (each scheduler writes
    some of its Events and annotations after the pods are bound, on a queue)."""
    deadline = time.monotonic() + WRITES_SETTLE_MAX_SECONDS
    last = api_writes(env)
    quiet_since = time.monotonic()
    while last is not None and time.monotonic() < deadline:
        time.sleep(WRITES_POLL_SECONDS)
        now = api_writes(env)
        if now is None:
            return last
        if any(now.get(k) != last.get(k) for k in LAGGING_WRITES):
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since >= WRITES_QUIET_SECONDS:
            return now
        last = now
    return last
