"""Workload 3: gang throughput, gang-extender vs scheduler-plugins coscheduling.

The same gangs (a PodGroup with minMember = gang size, members of 1 GPU each)
on the same KWOK nodes, created all at once, timed from the first create to
the last member bound. First under gang-extender (service + its kube-scheduler
profile), then, with the gang-extender processes stopped so they take no CPU,
under the scheduler-plugins scheduler with the Coscheduling plugin.

Each run also reports the nodes each gang spans (issue 13: a gang on the fewest
nodes keeps its allreduce on NVLink) and its partial gangs. The locality case
(`locality_gangs` gangs of `locality_size` members, smaller than a node) is
where the planner's fewest-nodes choice shows: each such gang fits on one node,
and a per-pod scorer that spreads (coscheduling's default NodeResourcesFit
LeastAllocated) puts its members on as many nodes as it has members.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import coscheduling
from bench.env import BenchEnv
from bench.kubeclient import BindWatch, pods_path
from bench.objects import (
    COSCHEDULING_PODGROUP_API,
    GANG_PODGROUP_API,
    coscheduling_member,
    gang_member,
    podgroup_body,
    podgroups_path,
)
from bench.stats import summary_ms
from bench.workloads.common import (
    PARTIAL_GANGS_METRIC,
    clear,
    create_and_time,
    nodes_spanned,
    partial_gangs,
    service_metric,
    steady_rate,
    verb_histograms,
    verb_latency,
)

log = logging.getLogger("bench.gang")

WORKLOAD = "gang"
CANARY_TIMEOUT_SECONDS = 90.0
VERBS = ("filter", "prioritize", "bind")


@dataclass
class GangConfig:
    gangs: int
    size: int
    nodes: int
    gpus_per_node: int
    timeout: float  # per scheduler run
    scheduler_plugins: Path | None = None  # built output dir; built when None
    locality_gangs: int = 0  # gangs of the locality case (0: skipped)
    locality_size: int = 3  # members of 1 GPU each: smaller than a node


def _bodies(
    kind: str, gangs: int, size: int
) -> tuple[str, list[dict[str, Any]], list[dict[str, Any]]]:
    api = GANG_PODGROUP_API if kind == "gang-extender" else COSCHEDULING_PODGROUP_API
    groups = [f"g{g:03d}" for g in range(gangs)]
    podgroups = [podgroup_body(api, g, size, WORKLOAD) for g in groups]
    pods = []
    for g in groups:
        for m in range(size):
            name = f"{g}-{m}"
            if kind == "gang-extender":
                pods.append(gang_member(name, g, size, WORKLOAD))
            else:
                pods.append(coscheduling_member(name, g, WORKLOAD))
    return api, podgroups, pods


def _canary(env: BenchEnv, kind: str) -> float:
    """One gang of one pod through the scheduler: proves it is up before the clock starts."""
    namespace = env.namespace(f"bench-canary-{kind}")
    api, podgroups, pods = _bodies(kind, 1, 1)
    for pg in podgroups:
        env.api.create(podgroups_path(api, namespace), pg)
    watch = BindWatch(env.api, namespace).start()
    started = time.monotonic()
    env.api.create(pods_path(namespace), pods[0])
    if not watch.wait_bound([pods[0]["metadata"]["name"]], CANARY_TIMEOUT_SECONDS):
        raise RuntimeError(
            f"{kind}: a one-pod canary gang was not bound in {CANARY_TIMEOUT_SECONDS}s"
        )
    watch.stop()
    clear(env, namespace)
    return time.monotonic() - started


def _run_one(
    env: BenchEnv, kind: str, gangs: int, size: int, timeout: float, *, case: str = "gang"
) -> dict[str, Any]:
    canary = _canary(env, kind)
    namespace = env.namespace(f"bench-{case}-{kind}")
    api, podgroups, pods = _bodies(kind, gangs, size)
    for pg in podgroups:
        env.api.create(podgroups_path(api, namespace), pg)
    counted_before = service_metric(env, PARTIAL_GANGS_METRIC) if kind == "gang-extender" else None
    verbs_before = verb_histograms(env, VERBS) if kind == "gang-extender" else None
    pid = env.stack.service.pid if env.stack.service else 0
    cpu_before = env.cpu_seconds(pid)
    result = create_and_time(env, namespace, pods, timeout=timeout)
    # Over the same window for either scheduler: the service watches (and, for its own
    # gangs, admits, plans and binds) every pod. Unlike the wall-clock figures, it does
    # not move with load from other processes on a shared machine.
    service_cpu = env.cpu_seconds(pid) - cpu_before
    # per gang: first member created -> last member bound
    members: dict[str, list[str]] = defaultdict(list)
    for body in pods:
        name = body["metadata"]["name"]
        members[name.rsplit("-", 1)[0]].append(name)
    gang_seconds = []
    for names in members.values():
        if all(n in result["bound_at"] for n in names):
            first = min(result["created_at"][n] for n in names)
            gang_seconds.append(max(result["bound_at"][n] for n in names) - first)
    gpus: dict[str, int] = defaultdict(int)
    for node in result["node_of"].values():
        gpus[node] += 1
    partial = partial_gangs(members, result["bound_at"])
    result.update(
        canary_s=round(canary, 2),
        gangs=gangs,
        gang_size=size,
        gangs_complete=len(gang_seconds),
        gangs_partially_bound=partial,
        gangs_per_second=round(len(gang_seconds) / result["seconds"], 2)
        if result["seconds"]
        else 0,
        gang_create_to_all_bound=summary_ms(gang_seconds),
        steady_pods_per_second=steady_rate(result["bound_at"]),
        max_gpus_on_a_node=max(gpus.values(), default=0),
        nodes_spanned=nodes_spanned(members, result["node_of"]),
        service_cpu_seconds=round(service_cpu, 2),
    )
    if kind == "gang-extender":
        # The service's own count (GangPartial) during this run: must be 0, like the
        # observed count above.
        after = service_metric(env, PARTIAL_GANGS_METRIC)
        result["partial_gangs_counted"] = (
            after - counted_before if after is not None and counted_before is not None else None
        )
        # The service's own time per verb in this run: what of create -> all bound is
        # the extender's (filter, prioritize) and the bind barrier's (bind).
        result["service_verbs"] = verb_latency(verbs_before, verb_histograms(env, VERBS))
    for key in ("node_of", "created_at"):
        result.pop(key)
    log.info(
        "%s %s: %d/%d gangs of %d bound in %.1fs (%.1f pods/s); max %d GPUs on a node; "
        "nodes per gang mean %s max %s; %d partial",
        case,
        kind,
        len(gang_seconds),
        gangs,
        size,
        result["seconds"],
        result["pods_per_second"],
        result["max_gpus_on_a_node"],
        result["nodes_spanned"]["mean"],
        result["nodes_spanned"]["max"],
        partial,
    )
    clear(env, namespace)
    return result


def run(env: BenchEnv, cfg: GangConfig) -> dict[str, Any]:
    root = cfg.scheduler_plugins or coscheduling.ensure_built()
    coscheduling.install_crd(env, root)
    env.add_nodes(cfg.nodes, WORKLOAD, kwok=True, prefix="gang", gpus=cfg.gpus_per_node)
    ready_wait = env.wait_nodes_ready(WORKLOAD, cfg.nodes)
    settle_wait = env.wait_nodes_settled()
    runs: dict[str, Any] = {}
    locality: dict[str, Any] = {}

    def both_cases(kind: str) -> None:
        runs[kind] = _run_one(env, kind, cfg.gangs, cfg.size, cfg.timeout)
        if cfg.locality_gangs:
            locality[kind] = _run_one(
                env, kind, cfg.locality_gangs, cfg.locality_size, cfg.timeout, case="locality"
            )

    both_cases("gang-extender")
    # The baseline gets the machine to itself: the gang-extender processes are stopped.
    env.stack.stop()
    proc = coscheduling.start(env, root)
    try:
        both_cases("coscheduling")
    finally:
        proc.stop()
    env.remove_nodes(WORKLOAD)
    ours = runs["gang-extender"]["seconds"]
    theirs = runs["coscheduling"]["seconds"]
    return {
        "nodes": cfg.nodes,
        "gpus_per_node": cfg.gpus_per_node,
        "gangs": cfg.gangs,
        "gang_size": cfg.size,
        "node_ready_wait_s": round(ready_wait, 1),
        "node_settle_wait_s": round(settle_wait, 1),
        "scheduler_plugins": root.name,
        "runs": runs,
        "locality": {"gangs": cfg.locality_gangs, "gang_size": cfg.locality_size, "runs": locality}
        if locality
        else None,
        # throughput ratio: gangs/s ours over theirs == their time over ours
        "ratio": round(theirs / ours, 3) if ours and runs["gang-extender"]["complete"] else None,
    }
