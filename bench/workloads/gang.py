"""Workload 3: gang throughput, gang-extender vs Kubernetes' own gang scheduling vs
scheduler-plugins coscheduling (bench/gang_schedulers.py).

The same gangs (a PodGroup with min = gang size, members of 1 GPU each) on the same
KWOK nodes, created all at once, timed from the first create to the last member
bound; each scheduler alone on the machine (the others stopped). Per run: gangs per
second, create -> all bound per gang, the scheduler's own attempt latency
(`scheduler_scheduling_attempt_duration_seconds`, bench/schedmetrics.py, the same
for all three), the nodes each gang spans against the fewest possible, and partial
gangs.

Cases, per scale (nodes x gangs; the first is the preset's, later ones the
`gang_scales` such as 1,000 and 5,000 nodes):
- gang: gangs of `size` members;
- locality (first scale only): gangs of 3 members, smaller than a node, so each fits
  on one node, and a per-pod scorer that spreads puts its members on three;
- preemption (when on): every node first holds a low-priority filler taking all its
  GPUs (bound by the bench, as a running pod), the gangs have a higher priority, so
  every member needs an eviction: each scheduler's own preemption.
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
from bench.gang_compare import compare, fewest_nodes
from bench.gang_schedulers import KINDS, Scheduler, schedulers, upstream_unavailable
from bench.kubeclient import BindWatch, bulk, count, pods_path, wait_for
from bench.objects import BENCH_LABEL, pod_body, podgroups_path
from bench.schedmetrics import ATTEMPT_SECONDS, PODGROUP_ATTEMPT_SECONDS, between, histogram
from bench.stats import summary_ms
from bench.workloads.common import (
    CLEAR_MIN_SECONDS,
    PARTIAL_GANGS_METRIC,
    api_writes,
    candidate_figures,
    clear,
    cpu_between,
    create_and_time,
    filter_candidates,
    nodes_spanned,
    partial_gangs,
    process_cpu,
    service_metric,
    settled_writes,
    steady_rate,
    verb_histograms,
    verb_latency,
    writes_between,
)
from extender.devcluster.priority_classes import temporary_priority_classes

log = logging.getLogger("bench.gang")

WORKLOAD = "gang"
CANARY_TIMEOUT_SECONDS = 90.0
VERBS = ("filter", "prioritize", "bind")
#: Priorities of the preemption case: fillers are evicted for gang members.
LOW_PRIORITY, HIGH_PRIORITY = "bench-filler-low", "bench-gang-high"
PRIORITIES = {LOW_PRIORITY: 10, HIGH_PRIORITY: 1000}
#: bound on the wait for kwok to mark the nodes Ready, per node (at least 180 s)
NODE_READY_SECONDS_EACH = 0.25


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
    #: further (nodes, gangs) scales of the gang case, after (nodes, gangs)
    scales: tuple[tuple[int, int], ...] = ()
    preemption: bool = False
    #: the schedulers run (the others reported not run), in KINDS' order
    kinds: tuple[str, ...] = KINDS
    #: gang-extender's members carry its admission gate (docs/design.md#gated-admission)
    admission_gate: bool = False


def _canary(env: BenchEnv, sched: Scheduler) -> float:
    """One gang of one pod through the scheduler: proves it is up before the clock starts."""
    namespace = env.namespace(f"bench-canary-{sched.kind}")
    podgroups, pods = sched.bodies(1, 1, WORKLOAD)
    for pg in podgroups:
        env.api.create(podgroups_path(sched.podgroup_api, namespace), pg)
    watch = BindWatch(env.api, namespace).start()
    started = time.monotonic()
    env.api.create(pods_path(namespace), pods[0])
    if not watch.wait_bound([pods[0]["metadata"]["name"]], CANARY_TIMEOUT_SECONDS):
        raise RuntimeError(
            f"{sched.kind}: a one-pod canary gang was not bound in {CANARY_TIMEOUT_SECONDS}s"
        )
    watch.stop()
    clear(env, namespace, namespace_too=True)
    return time.monotonic() - started


def _attempts(env: BenchEnv, sched: Scheduler) -> dict[str, dict[str, float]]:
    text = sched.metrics_text(env)
    found = {"pod": histogram(text, ATTEMPT_SECONDS, {"profile": sched.profile})}
    if sched.kind == "upstream":
        found["podgroup"] = histogram(text, PODGROUP_ATTEMPT_SECONDS, {"profile": sched.profile})
    return found


def gang_figures(
    pods: list[dict[str, Any]], result: dict[str, Any], gpus_per_node: int
) -> dict[str, Any]:
    """Per-gang figures of one timed run (pure): gangs complete and partial, create ->
    all bound, nodes spanned and how many gangs span more than the fewest possible."""
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
    spanned = nodes_spanned(members, result["node_of"])
    size = max((len(n) for n in members.values()), default=0)
    fewest = fewest_nodes(size, 1, gpus_per_node)
    spanned["fewest_possible"] = fewest
    spanned["gangs_above_fewest"] = sum(
        count for span, count in spanned["histogram"].items() if int(span) > fewest
    )
    return {
        "gangs": len(members),
        "gang_size": size,
        "gangs_complete": len(gang_seconds),
        # Binds seen just after the bound finish a released gang: not partial. A gang
        # with no bind by the bound is not looked at (it may straddle the window's end).
        "gangs_partially_bound": partial_gangs(
            {
                g: names
                for g, names in members.items()
                if any(n in result["bound_at"] for n in names)
            },
            {*result["bound_at"], *result.get("bound_after_cut", ())},
        ),
        "gangs_per_second": round(len(gang_seconds) / result["seconds"], 2)
        if result["seconds"]
        else 0,
        "time_to_last_bound_s": result["seconds"],
        "gang_create_to_all_bound": summary_ms(gang_seconds),
        "max_gpus_on_a_node": max(gpus.values(), default=0),
        "nodes_spanned": spanned,
    }


def _run_one(
    env: BenchEnv,
    sched: Scheduler,
    gangs: int,
    size: int,
    cfg: GangConfig,
    *,
    case: str,
    priority_class: str | None = None,
    canary: bool = True,
) -> tuple[dict[str, Any], str]:
    """One timed run: its figures, and its namespace for the caller to clear (after it
    has kept the figures, so a slow cleanup cannot lose them)."""
    # In the preemption case every GPU is taken by a filler the canary cannot evict:
    # the gang case just before proved the scheduler up.
    canary_s = _canary(env, sched) if canary else None
    namespace = env.namespace(f"bench-{case}-{sched.kind}")
    podgroups, pods = sched.bodies(gangs, size, WORKLOAD, priority_class=priority_class)
    for pg in podgroups:
        env.api.create(podgroups_path(sched.podgroup_api, namespace), pg)
    ours = sched.kind == "gang-extender"
    counted_before = service_metric(env, PARTIAL_GANGS_METRIC) if ours else None
    verbs_before = verb_histograms(env, VERBS) if ours else None
    candidates_before = filter_candidates(env) if ours else None
    pid = env.stack.service.pid if env.stack.service and env.stack.service.alive() else 0
    cpu_before = env.cpu_seconds(pid) if pid else 0.0
    attempts_before = _attempts(env, sched)
    writes_before = api_writes(env)
    processes_before = process_cpu(env)
    result = create_and_time(env, namespace, pods, timeout=cfg.timeout)
    writes = writes_between(writes_before, settled_writes(env))
    processes = cpu_between(processes_before, process_cpu(env))
    attempts_after = _attempts(env, sched)
    # The service's CPU over the run: it plans and binds its own gangs (it is stopped
    # while the others run). Unlike wall-clock figures, it does not move with load.
    service_cpu = env.cpu_seconds(pid) - cpu_before if pid else None
    result.update(gang_figures(pods, result, cfg.gpus_per_node))
    result.update(
        canary_s=round(canary_s, 2) if canary_s is not None else None,
        steady_pods_per_second=steady_rate(result["bound_at"]),
        service_cpu_seconds=round(service_cpu, 2) if service_cpu is not None else None,
        # Every client's writes from the first create until the Events and annotations
        # queued by then are written (the bench's creates included): what each
        # scheduler's way of working costs the API server, per pod.
        api_writes=writes,
        api_writes_per_pod=round(sum(writes.values()) / len(pods), 2) if writes else None,
        # Every process's CPU over the same span: where each scheduler's way of working
        # spends the machine (the API server, etcd, its scheduler, KWOK, the service).
        process_cpu_seconds=processes,
        attempt_latency={
            key: between(attempts_before[key], attempts_after[key]) for key in attempts_after
        },
    )
    if ours:
        # The service's own count (GangPartial) during this run: must be 0, like the
        # observed count above.
        after = service_metric(env, PARTIAL_GANGS_METRIC)
        result["partial_gangs_counted"] = (
            after - counted_before if after is not None and counted_before is not None else None
        )
        # The service's own time per verb in this run: what of create -> all bound is
        # the extender's (filter, prioritize) and the bind barrier's (bind).
        result["service_verbs"] = verb_latency(verbs_before, verb_histograms(env, VERBS))
        result["filter_candidates"] = candidate_figures(candidates_before, filter_candidates(env))
    for key in ("node_of", "created_at"):
        result.pop(key)
    log.info(
        "%s %s: %d/%d gangs of %d bound in %.1fs (%.2f gangs/s); nodes per gang mean %s max %s "
        "(fewest %s); %d partial; attempt p50/p99 <= %s/%s ms (past %s)",
        case,
        sched.kind,
        result["gangs_complete"],
        gangs,
        size,
        result["seconds"],
        result["gangs_per_second"],
        result["nodes_spanned"]["mean"],
        result["nodes_spanned"]["max"],
        result["nodes_spanned"]["fewest_possible"],
        result["gangs_partially_bound"],
        result["attempt_latency"]["pod"]["p50_le_ms"],
        result["attempt_latency"]["pod"]["p99_le_ms"],
        result["attempt_latency"]["pod"].get("p99_gt_ms"),
    )
    return result, namespace


def _fill_nodes(env: BenchEnv, nodes: list[str], gpus: int) -> str:
    """One low-priority pod per node taking all its GPUs, bound by the bench (KWOK runs it)."""
    namespace = env.namespace("bench-filler")
    bodies = []
    for node in nodes:
        body = pod_body(
            f"filler-{node}", WORKLOAD, scheduler="bench-none", gpus=gpus, node_name=node
        )
        body["spec"]["priorityClassName"] = LOW_PRIORITY
        bodies.append(body)
    made = bulk(bodies, lambda b: env.api.create(pods_path(namespace), b))
    if made.errors:
        raise RuntimeError(f"{made.errors} of {len(bodies)} filler pods not created")
    return namespace


def _cases(
    env: BenchEnv,
    sched: Scheduler,
    cfg: GangConfig,
    nodes: list[str],
    gangs: int,
    first: bool,
    out: dict[str, dict[str, Any]],
) -> None:
    """Each case under one scheduler, its figures put in `out` as soon as it ends."""

    def one(case: str, gangs: int, size: int, **kw: Any) -> None:
        out[case], namespace = _run_one(env, sched, gangs, size, cfg, case=case, **kw)
        # Gangs still binding past the bound go with their namespace, not as partial.
        clear(env, namespace, namespace_too=True)

    one("gang", gangs, cfg.size)
    if first and cfg.locality_gangs:
        one("locality", cfg.locality_gangs, cfg.locality_size)
    if cfg.preemption:
        fillers = _fill_nodes(env, nodes, cfg.gpus_per_node)
        try:
            one("preemption", gangs, cfg.size, priority_class=HIGH_PRIORITY, canary=False)
        finally:
            clear(env, fillers, namespace_too=True)


def _pods_left(env: BenchEnv) -> str | None:
    """What is left of earlier runs' pods after waiting for their deletion, if any."""
    selector = f"{BENCH_LABEL}={WORKLOAD}"
    try:
        wait_for(
            lambda: count(env.api, "/api/v1/pods", selector) == 0,
            timeout=CLEAR_MIN_SECONDS,
            what="the pods of earlier runs deleted",
            interval=1.0,
        )
    except TimeoutError:
        return f"{count(env.api, '/api/v1/pods', selector)} pods of earlier runs remain"
    return None


def _scale(
    env: BenchEnv,
    table: dict[str, Scheduler],
    cfg: GangConfig,
    n_nodes: int,
    gangs: int,
    *,
    first: bool,
    upstream_missing: str | None,
) -> list[dict[str, Any]]:
    """Every case at one scale under each scheduler in turn; one entry per case."""
    nodes = env.add_nodes(n_nodes, WORKLOAD, kwok=True, prefix="gang", gpus=cfg.gpus_per_node)
    # kwok marks nodes Ready one status patch at a time: thousands take minutes on 2 cores
    ready_wait = env.wait_nodes_ready(
        WORKLOAD, n_nodes, timeout=max(180.0, n_nodes * NODE_READY_SECONDS_EACH)
    )
    settle_wait = env.wait_nodes_settled()
    by_case: dict[str, dict[str, Any]] = defaultdict(dict)
    for kind in KINDS:
        sched = table[kind]
        skipped = upstream_missing if kind == "upstream" else None
        if kind not in cfg.kinds:
            skipped = "not run (--gang-schedulers)"
        if skipped:
            for case in ("gang", "locality", "preemption"):
                by_case[case][kind] = {"unsupported": skipped}
            continue
        done: dict[str, dict[str, Any]] = {}
        left = _pods_left(env)
        if left:
            # An earlier run's cleanup failed: this one would start on taken GPUs.
            log.error("%s at %d nodes not run: %s", kind, n_nodes, left)
            for case in ("gang", "locality", "preemption"):
                by_case[case][kind] = {"error": f"not run: {left}"}
            continue
        try:
            sched.start(env)
            _cases(env, sched, cfg, nodes, gangs, first, done)
        except Exception as exc:  # the other schedulers' runs still count; reported
            log.exception("%s at %d nodes failed", kind, n_nodes)
            for case in ("gang", "locality", "preemption"):
                by_case[case][kind] = {"error": repr(exc)}
            if done:  # what ended before the failure (a cleanup that timed out, say)
                for case, result in done.items():
                    by_case[case][kind] = {**result, "error_after": repr(exc)}
        finally:
            sched.stop(env)
        for case, result in done.items():
            by_case[case].setdefault(kind, result)
    try:
        env.remove_nodes(WORKLOAD)
    except Exception:  # the runs' figures are kept: only a later scale would start unclean
        log.exception("removing the %d nodes of this scale failed", n_nodes)
    out = []
    for case, runs in by_case.items():
        if case == "locality" and not (first and cfg.locality_gangs):
            continue
        if case == "preemption" and not cfg.preemption:
            continue
        out.append(
            {
                "case": case,
                "nodes": n_nodes,
                "gangs": cfg.locality_gangs if case == "locality" else gangs,
                "gang_size": cfg.locality_size if case == "locality" else cfg.size,
                "node_ready_wait_s": round(ready_wait, 1),
                "node_settle_wait_s": round(settle_wait, 1),
                "runs": runs,
                "vs": compare(runs),
            }
        )
    return out


def failed_scale(cfg: GangConfig, n_nodes: int, gangs: int, error: str) -> list[dict[str, Any]]:
    """The cases of a scale that failed before its runs (e.g. nodes never Ready), each
    scheduler's run saying why, so the table shows the reason instead of dropping them."""
    out = []
    for case in ("gang", *(("preemption",) if cfg.preemption else ())):
        runs = {kind: {"error": error} for kind in KINDS}
        out.append(
            {
                "case": case,
                "nodes": n_nodes,
                "gangs": gangs,
                "gang_size": cfg.size,
                "runs": runs,
                "vs": compare(runs),
            }
        )
    return out


def run(env: BenchEnv, cfg: GangConfig) -> dict[str, Any]:
    root = cfg.scheduler_plugins or coscheduling.ensure_built()
    coscheduling.install_crd(env, root)
    table = schedulers(root, admission_gate=cfg.admission_gate)
    upstream_missing = upstream_unavailable(env)
    if upstream_missing:
        log.warning("upstream gang scheduling not run: %s", upstream_missing)
    # The classes may be left by an earlier run on this control plane: taken as they are.
    with temporary_priority_classes(env.api, PRIORITIES, exist_ok=True):
        base = _scale(
            env, table, cfg, cfg.nodes, cfg.gangs, first=True, upstream_missing=upstream_missing
        )
        cases = list(base)
        for n_nodes, gangs in cfg.scales:
            try:
                cases += _scale(
                    env, table, cfg, n_nodes, gangs, first=False, upstream_missing=upstream_missing
                )
            except Exception as exc:  # a later scale's failure keeps the earlier ones; reported
                log.exception("gang workload at %d nodes x %d gangs failed", n_nodes, gangs)
                cases += failed_scale(cfg, n_nodes, gangs, repr(exc))
                env.remove_nodes(WORKLOAD)
    gang = next(c for c in base if c["case"] == "gang")
    locality = next((c for c in base if c["case"] == "locality"), None)
    ours = gang["runs"].get("gang-extender") or {}
    cosched = gang["runs"].get("coscheduling") or {}
    return {
        "nodes": cfg.nodes,
        "gpus_per_node": cfg.gpus_per_node,
        "gangs": cfg.gangs,
        "gang_size": cfg.size,
        "scheduler_plugins": root.name,
        "admission_gate": cfg.admission_gate,
        "upstream_unsupported": upstream_missing,
        "cases": cases,
        # the first scale's gang and locality cases, as earlier rounds recorded them
        "runs": gang["runs"],
        "locality": {
            "gangs": cfg.locality_gangs,
            "gang_size": cfg.locality_size,
            "runs": locality["runs"],
        }
        if locality
        else None,
        # throughput ratio against coscheduling (round 2's target row)
        "ratio": round(cosched["seconds"] / ours["seconds"], 3)
        if ours.get("complete") and cosched.get("complete") and ours.get("seconds")
        else None,
    }
