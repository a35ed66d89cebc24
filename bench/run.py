"""Run every benchmark on one local control plane; write results.{md,json,png}.

    .venv/bin/python -m bench            # issue 15's sizes (~35-45 min on 2 cores)
    .venv/bin/python -m bench --quick    # smaller sizes (~10-15 min), same code paths
    .venv/bin/python -m bench --only latency,webhook

See bench/README.md. Only 127.0.0.1 is contacted; every loop is bounded in
count and time.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python bench/run.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import orjson

from bench import report
from bench.env import BenchEnv, machine_info
from bench.gang_schedulers import KINDS
from bench.kubeclient import FastApi
from bench.service import BenchStack
from bench.workloads import churn, gang, latency, plain, webhook
from extender.devcluster import workload_api
from extender.devcluster.binaries import binary_version, ensure_binaries
from extender.devcluster.cluster import LocalCluster
from extender.devcluster.workload_api import serves_v1beta1

log = logging.getLogger("bench")

REPO = Path(__file__).resolve().parents[1]
# run order: latency grows the cluster last
WORKLOADS = ("webhook", "plain", "gang", "churn", "latency")

PRESETS: dict[str, dict[str, Any]] = {
    "full": {
        "latency_sizes": "1000x10000,2000x10000,5000x10000,5000x50000,10000x100000",
        "requests": 2000,
        "binds": 200,
        # 100, not 20: the planning filter's p99 is a target row, and the p99 of 20
        # samples is their slowest one (round 5: 62.6 ms in one run, 10.1 in another).
        "plans": 100,
        "seconds_per_scenario": 15.0,
        "restarts": 3,
        "settle_timeout": 180.0,
        "plain_nodes": 1000,
        "plain_pods": 2000,
        "gangs": 100,
        "gang_size": 8,
        "gang_nodes": 200,
        "locality_gangs": 40,
        # issue 31: 1,000 and 5,000 nodes, 1,000 gangs (upstream's scheduler_perf size)
        "gang_scales": "1000x1000,5000x1000",
        "gang_preemption": True,
        "churn_held": "100,1000",
        "churn_nodes": 1000,
        "churn_events": 400,
        "churn_rate": 20.0,
        # As long as the churn windows (400 events at 20/s, plus 4 x 1 s of tail): with
        # 10 s a status resync (every 30 s, ~0.3-1 s CPU at 1,000 groups) that fell in an
        # idle window weighed three times as much as one in a churn window, and the net
        # per-event figure swung from -1.3 to +5.7 ms between runs of one build.
        "churn_idle_seconds": 24.0,
        "churn_max_seconds": 120.0,
        "webhook_pods": 200,
        "webhook_namespace_sizes": "10,200,500,1000,2000",
        # 200, not 60: the webhook's p99 is a target row (the p99 of 60 is their max).
        "webhook_pods_per_size": 200,
        "timeout": 600.0,
    },
    "quick": {
        # 1k, 2k and 5k nodes: the latency-vs-nodes panel has three points
        "latency_sizes": "1000x10000,2000x10000,5000x10000",
        "requests": 300,
        "binds": 50,
        "plans": 5,
        "seconds_per_scenario": 5.0,
        "restarts": 1,
        # quick: do not wait out the TTL controller's node rewrites at 5,000 nodes
        "settle_timeout": 30.0,
        "plain_nodes": 200,
        "plain_pods": 400,
        "gangs": 20,
        "gang_size": 8,
        "gang_nodes": 40,
        "locality_gangs": 10,
        "gang_scales": "",
        "gang_preemption": True,
        "churn_held": "20,200",
        "churn_nodes": 200,
        "churn_events": 100,
        "churn_rate": 20.0,
        "churn_idle_seconds": 9.0,
        "churn_max_seconds": 45.0,
        "webhook_pods": 60,
        "webhook_namespace_sizes": "10,2000",
        "webhook_pods_per_size": 30,
        "timeout": 180.0,
    },
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="smaller sizes, ~10-15 minutes")
    p.add_argument(
        "--only", default=",".join(WORKLOADS), help=f"comma list of {', '.join(WORKLOADS)}"
    )
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results", help="results directory")
    p.add_argument(
        "--workdir", type=Path, default=REPO / ".dev" / "bench", help="cluster workdir (wiped)"
    )
    p.add_argument("--no-profile", action="store_true", help="skip py-spy during workload 1")
    p.add_argument(
        "--service-src",
        type=Path,
        help="run the service from this source tree (a copy of the repo) for before/after runs",
    )
    p.add_argument("--latency-sizes", help="NODESxPODS,... (default: the preset's)")
    p.add_argument(
        "--latency-dra",
        type=int,
        default=0,
        metavar="DEVICES",
        help="latency: GPUs as DRA devices, DEVICES per node in a ResourceSlice, served as "
        "nvidia.com/gpu by a DeviceClass (nodes advertise none); 0: device plugin",
    )
    p.add_argument(
        "--webhook-namespace-sizes",
        help="pods in the namespace for the webhook's size series, N,...",
    )
    p.add_argument(
        "--gang-scales",
        help="further NODESxGANGS,... scales of the gang case after --gang-nodes x --gangs "
        "('' for none)",
    )
    p.add_argument(
        "--gang-preemption",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the gang workload's preemption case (a low-priority filler on every node)",
    )
    p.add_argument(
        "--gang-admission-gate",
        action="store_true",
        help="gang-extender's gang members are created behind its admission gate "
        "(docs/design.md#gated-admission), as the webhook's admission_gate setting does",
    )
    p.add_argument(
        "--service-env",
        action="append",
        default=[],
        type=service_env_pair,
        metavar="NAME=VALUE",
        help="an environment variable for the service, such as a setting "
        "(GANG_NOMINATE_PLANNED_NODE=true, docs/deploy.md); repeatable, recorded in the results",
    )
    p.add_argument(
        "--gang-schedulers",
        help=f"comma list of the gang workload's schedulers to run (default: {','.join(KINDS)})",
    )
    p.add_argument("--churn-held", help="numbers of held gangs of the churn workload, N,...")
    p.add_argument("--churn-rate", type=float, help="node updates per second (churn)")
    p.add_argument("--churn-idle-seconds", type=float, help="idle baseline window (churn)")
    p.add_argument("--churn-max-seconds", type=float, help="bound on each churn window")
    for name in (
        "requests",
        "binds",
        "plans",
        "restarts",
        "plain_nodes",
        "plain_pods",
        "gangs",
        "gang_nodes",
        "locality_gangs",
        "churn_nodes",
        "churn_events",
        "webhook_pods",
        "webhook_pods_per_size",
    ):
        p.add_argument(f"--{name.replace('_', '-')}", type=int)
    p.add_argument("--timeout", type=float, help="bound on each scheduling run (s)")
    p.add_argument("--settle-timeout", type=float, help="bound on each wait for Node writes (s)")
    p.add_argument("-v", "--verbose", action="store_true")
    return p.parse_args(argv)


def _sizes(text: str) -> list[tuple[int, int]]:
    out = []
    for part in text.split(","):
        nodes, _, pods = part.strip().partition("x")
        out.append((int(nodes), int(pods)))
    return out


def service_env_pair(text: str) -> tuple[str, str]:
    """`--service-env NAME=VALUE`, split; a missing `=` or name is argparse's error."""
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name.strip(), value


def _gang_kinds(text: str | None) -> tuple[str, ...]:
    """The gang workload's schedulers named by --gang-schedulers, in KINDS' order."""
    if not text:
        return KINDS
    named = {part.strip() for part in text.split(",") if part.strip()}
    unknown = named - set(KINDS)
    if unknown or not named:
        raise SystemExit(
            f"--gang-schedulers: unknown {sorted(unknown)}; choose from {', '.join(KINDS)}"
        )
    return tuple(kind for kind in KINDS if kind in named)


def _commit() -> str:
    try:
        head = subprocess.run(
            ["git", "-C", str(REPO), "describe", "--always", "--dirty"],
            capture_output=True,
            text=True,
            check=True,
        )
        return head.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"


def _round_times(obj: Any) -> Any:
    """Bind-time series are kept for the plots, at millisecond precision."""
    if isinstance(obj, dict):
        return {
            k: (round(v, 3) if isinstance(v, float) and k != "ratio" else _round_times(v))
            for k, v in obj.items()
        }
    if isinstance(obj, list):
        return [_round_times(v) for v in obj]
    return obj


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    mode = "quick" if args.quick else "full"
    cfg = dict(PRESETS[mode])
    for key in list(cfg):
        value = getattr(args, key, None)
        if value is not None:
            cfg[key] = value
    only = [w.strip() for w in args.only.split(",") if w.strip()]
    unknown = set(only) - set(WORKLOADS)
    if unknown:
        print(f"unknown workload(s): {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(args.workdir, ignore_errors=True)

    started = time.monotonic()
    results: dict[str, Any] = {
        "meta": {
            "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "mode": mode,
            "config": cfg,
            "workloads": only,
            "machine": machine_info(),
            "commit": _commit(),
            "service_src": str(args.service_src) if args.service_src else None,
            "service_env": dict(args.service_env),
            "latency_dra_devices_per_node": args.latency_dra,
        }
    }
    scheduler_plugins = None
    if "gang" in only:
        from bench import coscheduling

        scheduler_plugins = coscheduling.ensure_built()
        results["meta"]["scheduler_plugins"] = scheduler_plugins.name.removeprefix(
            "scheduler-plugins-"
        )

    bin_dir = ensure_binaries()
    gates: dict[str, dict[str, bool]] = {}
    runtime_config: list[str] = []
    if "gang" in only and serves_v1beta1(binary_version(bin_dir)):
        # Kubernetes' own gang scheduling is the gang workload's third scheduler: its API
        # served from the start (the default kube-scheduler gets the gate only for its run).
        gates, runtime_config = workload_api.served_gates(), [workload_api.RUNTIME_CONFIG]
    cluster = LocalCluster(
        args.workdir / "cluster", bin_dir, feature_gates=gates, runtime_config=runtime_config
    )
    results["meta"]["control_plane_feature_gates"] = gates
    results["meta"]["control_plane"] = cluster.bin_dir.parent.name.removeprefix("k8s-")
    try:
        cluster.start()
        stack = BenchStack(cluster, args.service_src, dict(args.service_env))
        stack.start()
        env = BenchEnv(cluster, stack, FastApi(cluster), settle_timeout=cfg["settle_timeout"])
        log.info("control plane and gang stack up in %.1fs", time.monotonic() - started)
        for name in WORKLOADS:
            if name not in only:
                continue
            t = time.monotonic()
            log.info("=== workload %s", name)
            try:
                if name == "webhook":
                    results[name] = webhook.run(
                        env,
                        webhook.WebhookConfig(
                            pods=cfg["webhook_pods"],
                            seconds=cfg["timeout"],
                            namespace_sizes=tuple(
                                int(n) for n in str(cfg["webhook_namespace_sizes"]).split(",") if n
                            ),
                            pods_per_size=cfg["webhook_pods_per_size"],
                        ),
                    )
                elif name == "plain":
                    results[name] = plain.run(
                        env,
                        plain.PlainConfig(
                            nodes=cfg["plain_nodes"], pods=cfg["plain_pods"], timeout=cfg["timeout"]
                        ),
                    )
                elif name == "gang":
                    results[name] = gang.run(
                        env,
                        gang.GangConfig(
                            gangs=cfg["gangs"],
                            size=cfg["gang_size"],
                            nodes=cfg["gang_nodes"],
                            gpus_per_node=8,
                            timeout=cfg["timeout"],
                            scheduler_plugins=scheduler_plugins,
                            locality_gangs=cfg["locality_gangs"],
                            scales=tuple(_sizes(cfg["gang_scales"])) if cfg["gang_scales"] else (),
                            preemption=bool(cfg["gang_preemption"]),
                            kinds=_gang_kinds(args.gang_schedulers),
                            admission_gate=args.gang_admission_gate,
                        ),
                    )
                elif name == "churn":
                    results[name] = churn.ChurnWorkload(
                        env,
                        churn.ChurnConfig(
                            held=tuple(int(n) for n in str(cfg["churn_held"]).split(",") if n),
                            nodes=cfg["churn_nodes"],
                            events=cfg["churn_events"],
                            rate=cfg["churn_rate"],
                            idle_seconds=cfg["churn_idle_seconds"],
                            max_seconds=cfg["churn_max_seconds"],
                            timeout=cfg["timeout"],
                        ),
                    ).run()
                elif name == "latency":
                    results[name] = latency.LatencyWorkload(
                        env,
                        latency.LatencyConfig(
                            sizes=_sizes(args.latency_sizes or cfg["latency_sizes"]),
                            requests=cfg["requests"],
                            binds=cfg["binds"],
                            plans=cfg["plans"],
                            seconds_per_scenario=cfg["seconds_per_scenario"],
                            restarts=cfg["restarts"],
                            dra_devices=args.latency_dra,
                            profile_dir=None if args.no_profile else args.out,
                            service_src=args.service_src,
                        ),
                    ).run()
            except Exception as exc:  # one failed workload must not lose the others' results
                log.error("workload %s failed:\n%s", name, traceback.format_exc())
                results[name] = {"error": repr(exc)}
            results[name]["seconds"] = round(time.monotonic() - t, 1)
            log.info("=== workload %s done in %.0fs", name, time.monotonic() - t)
    finally:
        cluster.stop()
    results["meta"]["duration_s"] = round(time.monotonic() - started, 1)
    results = _round_times(results)

    (args.out / "results.json").write_bytes(
        orjson.dumps(results, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS)
    )
    (args.out / "results.md").write_text(report.markdown(results))
    if not report.plot(results, args.out / "results.png"):
        log.warning("matplotlib is missing: no results.png (pip install -e '.[bench]')")
    log.info("wrote %s/results.{md,json,png} in %.0fs", args.out, results["meta"]["duration_s"])
    failed = [w for w in only if "error" in results.get(w, {})]
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
