"""Workload 2: the cost of the extender for pods that are not gangs.

The same single-GPU pods on the same KWOK nodes, scheduled once by the stock
kube-scheduler (its default profile, no extender) and once by the gang-extender
kube-scheduler profile (the same binary, with this service as its extender for
filter/prioritize/bind). Throughput of each, and their ratio.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from bench.env import BenchEnv
from bench.objects import pod_body
from bench.workloads.common import (
    PARTIAL_GANGS_METRIC,
    clear,
    create_and_time,
    service_metric,
    steady_rate,
)
from extender.domain.objects.membership import SCHEDULER_NAME

log = logging.getLogger("bench.plain")

WORKLOAD = "plain"


@dataclass
class PlainConfig:
    nodes: int
    pods: int
    timeout: float  # per scheduler run


def run(env: BenchEnv, cfg: PlainConfig) -> dict[str, Any]:
    env.add_nodes(cfg.nodes, WORKLOAD, kwok=True, prefix="plain")
    ready_wait = env.wait_nodes_ready(WORKLOAD, cfg.nodes)
    settle_wait = env.wait_nodes_settled()
    runs: dict[str, Any] = {}
    counted_before = service_metric(env, PARTIAL_GANGS_METRIC)
    for label, scheduler in (
        ("stock kube-scheduler", "default-scheduler"),
        ("gang-extender profile", SCHEDULER_NAME),
    ):
        namespace = env.namespace("bench-plain")
        bodies = [
            pod_body(f"p-{i:05d}", WORKLOAD, scheduler=scheduler, gpus=1) for i in range(cfg.pods)
        ]
        result = create_and_time(env, namespace, bodies, timeout=cfg.timeout)
        result["steady_pods_per_second"] = steady_rate(result["bound_at"])
        log.info(
            "%s: %d/%d pods bound in %.1fs: %.1f pods/s (creates took %.1fs)",
            label,
            result["bound"],
            result["pods"],
            result["seconds"],
            result["pods_per_second"],
            result["create_seconds"],
        )
        for key in ("node_of", "created_at"):
            result.pop(key)
        runs[label] = result
        clear(env, namespace)
    counted_after = service_metric(env, PARTIAL_GANGS_METRIC)
    env.remove_nodes(WORKLOAD)
    stock = runs["stock kube-scheduler"]["pods_per_second"]
    gang = runs["gang-extender profile"]["pods_per_second"]
    return {
        "nodes": cfg.nodes,
        "pods": cfg.pods,
        "node_ready_wait_s": round(ready_wait, 1),
        "node_settle_wait_s": round(settle_wait, 1),
        "runs": runs,
        "ratio": round(gang / stock, 3) if stock else None,
        # no gangs here: the pods have no group, so nothing can be partial; the
        # service's own counter is reported all the same
        "partial_gangs": 0,
        "partial_gangs_counted": counted_after - counted_before
        if counted_after is not None and counted_before is not None
        else None,
    }
