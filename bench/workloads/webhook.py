"""Workload 4: what the mutating webhook adds to a pod create.

Group members are created one at a time (round trip = POST until the API
server's answer), alternating between a namespace labelled
`gang-extender.io/inject: enabled` (the API server calls the webhook, which
allocates a task index and injects hostname, env, mounts) and one without the
label (the webhook is never called). Pods name a scheduler nobody serves, so
no scheduling traffic mixes in. A third series, pods without a group in the
labelled namespace, shows that the CEL matchConditions keep them off the webhook.

Then the namespace-size series: both namespaces of a second pair are filled with
pods without a group (kept off the webhook, created in bulk) up to each of
`namespace_sizes`, and at each size `pods_per_size` group members are created
one at a time in each: the added latency per create against the pods already in
the namespace (issue 15's target: flat from 10 to 2,000).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from bench.env import BenchEnv
from bench.kubeclient import bulk, pods_path
from bench.objects import UNSERVED_SCHEDULER, gang_member, pod_body
from bench.stats import summary_ms
from bench.workloads.common import (
    PARTIAL_GANGS_METRIC,
    clear,
    observed_partial_gangs,
    service_metric,
)
from extender.domain.objects.membership import GROUP_LABEL, INJECT_NAMESPACE_LABEL

WORKLOAD = "webhook"
GROUP_SIZE = 8
FILL_WORKERS = 8


@dataclass
class WebhookConfig:
    pods: int  # per series
    seconds: float  # bound on the whole loop (each of the two loops)
    # pods already in the namespace at which the size series measures, ascending
    namespace_sizes: tuple[int, ...] = ()
    pods_per_size: int = 40


def run(env: BenchEnv, cfg: WebhookConfig) -> dict[str, Any]:
    first_namespace = len(env.namespaces)
    counted_before = service_metric(env, PARTIAL_GANGS_METRIC)
    on = env.namespace("bench-webhook-on", labels={INJECT_NAMESPACE_LABEL: "enabled"})
    off = env.namespace("bench-webhook-off")
    series: dict[str, list[float]] = {
        "with webhook": [],
        "without webhook": [],
        "no group, labelled ns": [],
    }
    mutated = 0

    def create(namespace: str, body: dict[str, Any]) -> tuple[float, dict[str, Any]]:
        started = time.perf_counter()
        obj = env.api.create(pods_path(namespace), body)
        return time.perf_counter() - started, obj

    # warm-up: first TLS handshakes, the webhook's first index allocation
    for i in range(GROUP_SIZE):
        create(
            on, gang_member(f"warm-{i}", "warm", GROUP_SIZE, WORKLOAD, scheduler=UNSERVED_SCHEDULER)
        )
        create(
            off,
            gang_member(f"warm-{i}", "warm", GROUP_SIZE, WORKLOAD, scheduler=UNSERVED_SCHEDULER),
        )
    deadline = time.monotonic() + cfg.seconds
    for i in range(cfg.pods):
        if time.monotonic() > deadline:
            break
        group = f"g{i // GROUP_SIZE:03d}"
        took, obj = create(
            on, gang_member(f"m-{i:04d}", group, GROUP_SIZE, WORKLOAD, scheduler=UNSERVED_SCHEDULER)
        )
        series["with webhook"].append(took)
        mutated += bool(obj["spec"].get("hostname"))
        took, _ = create(
            off,
            gang_member(f"m-{i:04d}", group, GROUP_SIZE, WORKLOAD, scheduler=UNSERVED_SCHEDULER),
        )
        series["without webhook"].append(took)
        took, _ = create(on, pod_body(f"plain-{i:04d}", WORKLOAD, scheduler=UNSERVED_SCHEDULER))
        series["no group, labelled ns"].append(took)
    summaries = {label: summary_ms(samples) for label, samples in series.items()}
    # The namespace grows by 3 pods per round: compare the first and last quarter.
    quarter = max(1, len(series["with webhook"]) // 4)
    trend = {
        label: {
            "first_quarter_p50_ms": summary_ms(samples[:quarter]).get("p50_ms"),
            "last_quarter_p50_ms": summary_ms(samples[-quarter:]).get("p50_ms"),
        }
        for label, samples in series.items()
    }
    with_hook, without = summaries["with webhook"], summaries["without webhook"]
    by_size = _by_namespace_size(env, cfg, create)
    # Members here name a scheduler nobody serves: none may be bound, so none partial.
    counted_after = service_metric(env, PARTIAL_GANGS_METRIC)
    partial = sum(
        observed_partial_gangs(env, ns, GROUP_LABEL) for ns in env.namespaces[first_namespace:]
    )
    # Later workloads measure the sizes they name: ~6,600 pods and ~300 held groups
    # left here would ride along into the latency workload's start-up timings.
    for namespace in env.namespaces[first_namespace:]:
        clear(env, namespace)
    return {
        "series": summaries,
        "mutated": mutated,
        "trend": trend,
        "added_ms": _added(with_hook, without),
        "by_namespace_size": by_size,
        "partial_gangs": partial,
        "partial_gangs_counted": counted_after - counted_before
        if counted_after is not None and counted_before is not None
        else None,
    }


def _added(with_hook: dict[str, Any], without: dict[str, Any]) -> dict[str, float | None]:
    if not with_hook.get("n") or not without.get("n"):
        return {"p50": None, "p99": None}
    return {q: round(with_hook[f"{q}_ms"] - without[f"{q}_ms"], 3) for q in ("p50", "p99")}


def _by_namespace_size(env: BenchEnv, cfg: WebhookConfig, create: Any) -> list[dict[str, Any]]:
    """Added latency per create at each namespace size (pods already in the namespace)."""
    if not cfg.namespace_sizes:
        return []
    on = env.namespace("bench-webhook-size-on", labels={INJECT_NAMESPACE_LABEL: "enabled"})
    off = env.namespace("bench-webhook-size-off")
    deadline = time.monotonic() + cfg.seconds
    in_namespace = 0  # pods in each of the two namespaces
    rows: list[dict[str, Any]] = []
    for size in sorted(cfg.namespace_sizes):
        if time.monotonic() > deadline:
            break
        fill = [(ns, f"fill-{i:05d}") for i in range(in_namespace, size) for ns in (on, off)]
        filled = bulk(
            fill,
            lambda item: env.api.create(
                pods_path(item[0]), pod_body(item[1], WORKLOAD, scheduler=UNSERVED_SCHEDULER)
            ),
            workers=FILL_WORKERS,
            deadline=deadline,
        )
        if filled.errors:
            raise RuntimeError(
                f"filling to {size} pods: {filled.errors} creates failed: {filled.first_error}"
            )
        in_namespace = max(in_namespace, size)
        with_hook: list[float] = []
        without: list[float] = []
        mutated = 0
        for i in range(cfg.pods_per_size):
            if time.monotonic() > deadline:
                break
            name, group = f"s{size}-m-{i:04d}", f"s{size}-g{i // GROUP_SIZE:03d}"
            took, obj = create(
                on, gang_member(name, group, GROUP_SIZE, WORKLOAD, scheduler=UNSERVED_SCHEDULER)
            )
            with_hook.append(took)
            mutated += bool(obj["spec"].get("hostname"))
            took, _ = create(
                off, gang_member(name, group, GROUP_SIZE, WORKLOAD, scheduler=UNSERVED_SCHEDULER)
            )
            without.append(took)
        in_namespace += len(with_hook)
        hook_summary, plain_summary = summary_ms(with_hook), summary_ms(without)
        rows.append(
            {
                "pods_in_namespace": size,
                "with webhook": hook_summary,
                "without webhook": plain_summary,
                "added_ms": _added(hook_summary, plain_summary),
                "mutated": mutated,
            }
        )
    return rows
