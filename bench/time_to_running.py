"""`python -m bench.time_to_running`: the seed Horovod job on real nodes, from create to
every rank's result, under gang-extender and under the stock kube-scheduler (issue 31).

One local control plane, the gang-extender stack and two real nodes (containerd +
kubelet + the fake GPU plugin each, CoreDNS), as `make demo-real` starts them. Each
run applies the seed job (examples/horovod/horovod-job.yaml, master + 3 workers, one
GPU each) in a namespace of its own, swapped as the demo swaps it (image and training
program: extender/devcluster/demo_jobs.py); the stock runs also set every pod's
`schedulerName: default-scheduler`, so the same job goes to the default kube-scheduler,
one pod at a time (the webhook still wires it: the namespace is labelled). The runs
alternate (gang-extender first in odd rounds, stock first in even ones), each alone.

Timed from `kubectl apply` (wall clock, this host's: the kubelet's log timestamps use
the same clock), by polling the members every 100 ms and reading the launcher's log
with `--timestamps`:

- all bound: the last member seen with a node;
- all running: the last member seen with every container running;
- ranks done: the last rank's result line (`rank i of n on host: ...`), i.e. every
  rank started, ran the allreduce and printed;
- first bind -> last bind: how spread the binds are (a gang binds together);
- nodes spanned, and partial (members bound while others are not, when the job ends,
  and the service's `gang_extender_partial_gangs_total`): must be 0.

Needs root and a machine that can run containers (docs/real-nodes.md); prints a
table and writes `time_to_running.json` and `time_to_running.md` to `--out`.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import re
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from bench.stats import percentile

SCHEDULERS = ("gang-extender", "stock")
POLL_SECONDS = 0.1
RUN_TIMEOUT_SECONDS = 300
RANK_LINE = re.compile(r"^(?P<ts>\S+) (?P<line>rank \d+ of \d+ on .*)$")


@dataclass
class PodTimes:
    """When one member was first seen bound, with every container running (seconds
    since apply), and on which node."""

    bound: float | None = None
    running: float | None = None
    node: str | None = None


@dataclass
class RunFigures:
    scheduler: str
    ok: bool
    members: int
    all_bound_s: float | None
    all_running_s: float | None
    ranks_done_s: float | None
    bind_spread_s: float | None
    ranks: int
    nodes_spanned: int
    partial_at_end: int
    notes: list[str] = field(default_factory=list)


def parse_timestamp(text: str) -> float:
    """An RFC 3339 timestamp with up to nanoseconds (kubelet's log prefix), as epoch seconds."""
    match = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)", text)
    if match is None:
        raise ValueError(f"not an RFC 3339 timestamp: {text!r}")
    whole, fraction, zone = match.groups()
    stamp = datetime.fromisoformat(whole + ("+00:00" if zone == "Z" else zone)).timestamp()
    return stamp + (float("0." + fraction) if fraction else 0.0)


def rank_times(log: str, applied_at: float) -> list[float]:
    """Seconds from apply to each rank's result line in a `--timestamps` log."""
    times = []
    for line in log.splitlines():
        match = RANK_LINE.match(line)
        if match is not None:
            times.append(parse_timestamp(match["ts"]) - applied_at)
    return times


def figures(
    scheduler: str,
    pods: Mapping[str, PodTimes],
    ranks: Sequence[float],
    *,
    members: int,
    succeeded: bool,
) -> RunFigures:
    """One run's figures from what was seen (pure)."""
    bound = [t.bound for t in pods.values() if t.bound is not None]
    running = [t.running for t in pods.values() if t.running is not None]
    nodes = {t.node for t in pods.values() if t.node is not None}
    complete = len(pods) == members
    notes = [] if complete else [f"{len(pods)} of {members} members seen"]
    return RunFigures(
        scheduler=scheduler,
        ok=succeeded and complete and len(ranks) == members,
        members=members,
        all_bound_s=max(bound) if complete and len(bound) == members else None,
        all_running_s=max(running) if complete and len(running) == members else None,
        ranks_done_s=max(ranks) if len(ranks) == members else None,
        bind_spread_s=max(bound) - min(bound) if len(bound) == members else None,
        ranks=len(ranks),
        nodes_spanned=len(nodes),
        partial_at_end=int(0 < len(bound) < members),
        notes=notes,
    )


def summarize(runs: Sequence[RunFigures]) -> dict[str, dict[str, Any]]:
    """Per scheduler: runs, ok, and p50 / max of each time (nearest rank)."""
    out: dict[str, dict[str, Any]] = {}
    for scheduler in SCHEDULERS:
        mine = [r for r in runs if r.scheduler == scheduler]
        if not mine:
            continue
        row: dict[str, Any] = {"runs": len(mine), "ok": sum(r.ok for r in mine)}
        for name in ("all_bound_s", "all_running_s", "ranks_done_s", "bind_spread_s"):
            values = [v for r in mine if (v := getattr(r, name)) is not None]
            row[name] = (
                {"p50": round(percentile(values, 50), 2), "max": round(max(values), 2)}
                if values
                else None
            )
        row["nodes_spanned_max"] = max(r.nodes_spanned for r in mine)
        row["partial_at_end"] = sum(r.partial_at_end for r in mine)
        out[scheduler] = row
    return out


def markdown(summary: Mapping[str, Mapping[str, Any]], partial_counted: float | None) -> str:
    def cell(value: Mapping[str, float] | None) -> str:
        return "-" if value is None else f"{value['p50']:.2f} / {value['max']:.2f}"

    lines = [
        "| scheduler | runs (ok) | all bound p50 / max (s) | all running (s) "
        "| ranks done (s) | first -> last bind (s) | nodes spanned (max) | partial |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for scheduler, row in summary.items():
        lines.append(
            f"| {scheduler} | {row['runs']} ({row['ok']}) | {cell(row['all_bound_s'])} "
            f"| {cell(row['all_running_s'])} | {cell(row['ranks_done_s'])} "
            f"| {cell(row['bind_spread_s'])} | {row['nodes_spanned_max']} "
            f"| {row['partial_at_end']} |"
        )
    counted = "not read" if partial_counted is None else f"{partial_counted:g}"
    lines.append("")
    lines.append(f"gang_extender_partial_gangs_total after all runs: {counted}")
    return "\n".join(lines) + "\n"


def stock_scheduled(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same job for the default kube-scheduler: every pod spec's schedulerName swapped."""
    out = []
    for doc in docs:
        doc = copy.deepcopy(doc)
        kind = doc.get("kind")
        if kind == "Pod":
            doc["spec"]["schedulerName"] = "default-scheduler"
        elif kind in ("Deployment", "StatefulSet", "Job"):
            doc["spec"]["template"]["spec"]["schedulerName"] = "default-scheduler"
        out.append(doc)
    return out


# ---------------------------------------------------------------- the runs (I/O)
def _run_one(cluster: Any, raw: Any, workdir: Path, scheduler: str) -> RunFigures:
    from extender.devcluster.cluster import new_namespace
    from extender.devcluster.demo_jobs import JOBS
    from extender.devcluster.demo_real import delete_job_namespace, job_pods

    job = next(j for j in JOBS if j.key == "horovod")
    namespace = new_namespace(
        raw.api_client, f"ttr-{scheduler}", labels={"gang-extender.io/inject": "enabled"}
    )
    docs = job.transform([d for d in yaml.safe_load_all(job.example.read_text()) if d])
    if scheduler == "stock":
        docs = stock_scheduled(docs)
    manifest = workdir / f"ttr-{scheduler}.yaml"
    manifest.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    members = sum(
        1 if d["kind"] == "Pod" else int(d["spec"].get("replicas", 1))
        for d in docs
        if d.get("kind") in ("Pod", "Deployment", "StatefulSet")
    )
    applied_at = time.time()
    cluster.kubectl("apply", "-n", namespace, "-f", str(manifest))
    seen: dict[str, PodTimes] = {}
    launcher: str | None = None
    phase = ""
    deadline = time.monotonic() + RUN_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        now = time.time() - applied_at
        for pod in job_pods(raw, namespace, job.members):
            times = seen.setdefault(pod["metadata"]["name"], PodTimes())
            node = pod["spec"].get("nodeName")
            if node and times.bound is None:
                times.bound, times.node = now, node
            statuses = (pod.get("status") or {}).get("containerStatuses") or []
            started = bool(statuses) and all(
                "running" in (c.get("state") or {}) or "terminated" in (c.get("state") or {})
                for c in statuses
            )
            if started and times.running is None:
                times.running = now
            labels = pod["metadata"].get("labels") or {}
            if labels.get("gang-extender.io/task") == "master":
                launcher = pod["metadata"]["name"]
                phase = str((pod.get("status") or {}).get("phase", ""))
        if phase in ("Succeeded", "Failed"):
            break
        time.sleep(POLL_SECONDS)
    log = (
        cluster.kubectl("logs", "--timestamps", "-n", namespace, launcher, check=False)
        if launcher
        else ""
    )
    result = figures(
        scheduler,
        seen,
        rank_times(log, applied_at),
        members=members,
        succeeded=phase == "Succeeded",
    )
    if phase != "Succeeded":
        result.notes.append(f"launcher {phase or 'not seen'}")
    delete_job_namespace(raw, namespace)  # raises if its pods outlive the wait
    return result


def _partial_counted(metrics_text: str) -> float | None:
    for line in metrics_text.splitlines():
        if line.startswith("gang_extender_partial_gangs_total "):
            return float(line.split()[1])
    return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.time_to_running", description=__doc__)
    parser.add_argument("--rounds", type=int, default=3, help="runs per scheduler (default 3)")
    parser.add_argument("--out", type=Path, default=Path("bench/results/time-to-running"))
    parser.add_argument("--workdir", type=Path, default=Path(".dev/bench-time-to-running"))
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")

    from extender.devcluster.cluster import LocalCluster
    from extender.devcluster.demo_real import DEMO_GPUS_PER_NODE
    from extender.devcluster.realnode import RealNodes, cannot_run_containers
    from extender.devcluster.stack import GangStack
    from extender.kube.rawapi import RawApi

    reason = cannot_run_containers()
    if reason is not None:
        print(f"cannot run real nodes here: {reason}", file=sys.stderr)
        return 2
    workdir = args.workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    cluster = LocalCluster(workdir / "cluster", kubelet_access=True)
    real = None
    runs: list[RunFigures] = []
    partial_counted: float | None = None
    started = time.monotonic()
    try:
        cluster.start()
        real = RealNodes(cluster, 2, gpus=DEMO_GPUS_PER_NODE)
        real.start()
        stack = GangStack(cluster)
        stack.start()
        raw = RawApi(cluster.api_client())
        print(f"== up in {time.monotonic() - started:.1f}s", flush=True)
        for number in range(args.rounds):
            order = SCHEDULERS if number % 2 == 0 else tuple(reversed(SCHEDULERS))
            for scheduler in order:
                run = _run_one(cluster, raw, workdir, scheduler)
                runs.append(run)
                print(
                    f"   round {number + 1} {scheduler:<13} ok={run.ok} bound {run.all_bound_s} "
                    f"running {run.all_running_s} ranks {run.ranks_done_s} "
                    f"spread {run.bind_spread_s} nodes {run.nodes_spanned} "
                    f"partial {run.partial_at_end} {' '.join(run.notes)}",
                    flush=True,
                )
        partial_counted = _partial_counted(stack.metrics_text())
    finally:
        if real is not None:
            real.stop()
        cluster.stop()
    summary = summarize(runs)
    table = markdown(summary, partial_counted)
    print("\n" + table)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "time_to_running.md").write_text(table)
    (args.out / "time_to_running.json").write_text(
        json.dumps(
            {
                "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "machine": {"cpus": os.cpu_count() or 0, "python": platform.python_version()},
                "rounds": args.rounds,
                "runs": [asdict(r) for r in runs],
                "summary": summary,
                "partial_gangs_counted": partial_counted,
            },
            indent=2,
        )
    )
    print(f"written: {args.out}/time_to_running.md, .json", flush=True)
    failed = [r for r in runs if not r.ok]
    partial = sum(r.partial_at_end for r in runs if r.scheduler == "gang-extender")
    return 1 if failed or partial or partial_counted else 0


if __name__ == "__main__":
    raise SystemExit(main())
