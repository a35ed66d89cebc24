"""results.json -> results.md (tables) and results.png (plots)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from bench.report_gang import gang_runs, three_way, worst_ratio

# Issue 15's targets: (label, how to read it from the results, comparison, target).
TARGETS: list[tuple[str, str, str, float]] = [
    ("plain-pod throughput ratio (gang profile / stock)", "plain_ratio", ">=", 0.9),
    ("gang throughput ratio (gang-extender / coscheduling)", "gang_ratio", ">=", 1.2),
    ("prioritize p50, plain pod, 5,000 nodes (ms)", "prioritize_p50_5000", "<=", 1.0),
    ("prioritize p99, plain pod, 5,000 nodes (ms)", "prioritize_p99_5000", "<=", 2.0),
    ("filter p99, plain pod, 5,000 nodes (ms)", "filter_p99_5000", "<=", 2.0),
    ("filter that plans a gang, p99, 5,000 nodes (ms)", "plan_p99_5000", "<=", 20.0),
    (
        "webhook added p50, worst of 10 ... 2,000 pods in the namespace (ms)",
        "webhook_added_p50_worst",
        "<=",
        5.0,
    ),
    (
        "webhook added p99, worst of 10 ... 2,000 pods in the namespace (ms)",
        "webhook_added_p99_worst",
        "<=",
        15.0,
    ),
    ("ready after start, 5,000 nodes + 50,000 pods (s)", "ready_50k", "<=", 5.0),
    ("RSS, 10,000 nodes + 100,000 pods (MB)", "rss_100k", "<=", 500.0),
    ("ready after start, 10,000 nodes + 100,000 pods (s)", "ready_100k", "<=", 10.0),
    ("filter p99, plain pod, 10,000 nodes + 100,000 pods (ms)", "filter_p99_100k", "<=", 3.0),
    (
        "held gangs + node churn: service CPU per event, most / fewest held gangs "
        "(O(1) in held gangs)",
        "churn_growth",
        "<=",
        2.0,
    ),
    (
        "gang throughput ratio vs Kubernetes' own gang scheduling, worst case with a ratio "
        "(issue 31; cases without one: section 3)",
        "gang_vs_upstream_worst",
        ">=",
        1.0,
    ),
    (
        "gang throughput ratio vs coscheduling, worst case with a ratio (issue 31)",
        "gang_vs_coscheduling_worst",
        ">=",
        1.5,
    ),
    ("partial gangs, every workload", "partial_total", "=", 0.0),
]

#: Webhook namespace sizes the "flat from 10 to 2,000" rows need measured.
WEBHOOK_SERIES_ENDS = (10, 2000)


def _size(results: dict[str, Any], nodes: int, pods: int | None = None) -> dict[str, Any] | None:
    sizes = (results.get("latency") or {}).get("sizes") or []
    found = [s for s in sizes if s["nodes"] == nodes and (pods is None or s["bound_pods"] == pods)]
    if not found:
        return None
    chosen: dict[str, Any] = found[0] if pods is None else found[-1]
    return chosen


def _verb(size: dict[str, Any] | None, label: str, q: str) -> float | None:
    value = (((size or {}).get("verbs") or {}).get(label) or {}).get(f"{q}_ms")
    return None if value is None else float(value)


def met(value: float | None, comparison: str, target: float) -> str:
    """Whether a measured value meets its target: met, missed or not measured."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "not measured"
    ok = {
        ">=": value >= target,
        "<=": value <= target,
        "=": value == target,
    }[comparison]
    return "met" if ok else "missed"


def partial_by_workload(results: dict[str, Any]) -> dict[str, tuple[int, float | None]]:
    """Per workload that ran: (partial gangs seen bound, the service's own count or None)."""
    out: dict[str, tuple[int, float | None]] = {}

    def add(name: str, seen: int, counted: float | None) -> None:
        prior_seen, prior_counted = out.get(name, (0, None))
        total = None
        if counted is not None or prior_counted is not None:
            total = (counted or 0.0) + (prior_counted or 0.0)
        out[name] = (prior_seen + seen, total)

    for name in ("webhook", "plain", "churn"):
        run = results.get(name) or {}
        if "partial_gangs" in run:
            add(name, run["partial_gangs"], run.get("partial_gangs_counted"))
    for run in gang_runs(results.get("gang") or {}):
        add("gang", run["gangs_partially_bound"], run.get("partial_gangs_counted"))
    for size in (results.get("latency") or {}).get("sizes") or []:
        if "partial_gangs" in size:
            add("latency", size["partial_gangs"], size.get("partial_gangs_counted"))
    return out


def latency_by_nodes(sizes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One point per node count (the size with the fewest pods at it), ascending by nodes:
    filter and prioritize of a plain pod, p50 and p99."""
    chosen: dict[int, dict[str, Any]] = {}
    for size in sizes:
        prior = chosen.get(size["nodes"])
        if prior is None or size["bound_pods"] < prior["bound_pods"]:
            chosen[size["nodes"]] = size
    return [
        {
            "nodes": nodes,
            "pods": size["bound_pods"],
            **{
                f"{verb}_{q}": _verb(size, f"{verb} plain pod", q)
                for verb in ("filter", "prioritize")
                for q in ("p50", "p99")
            },
        }
        for nodes, size in sorted(chosen.items())
    ]


def _webhook_worst(results: dict[str, Any], q: str) -> float | None:
    """Worst added latency over the namespace sizes, when the series spans 10 ... 2,000."""
    by_size = (results.get("webhook") or {}).get("by_namespace_size") or []
    measured = {row["pods_in_namespace"] for row in by_size}
    if not set(WEBHOOK_SERIES_ENDS) <= measured:
        return None
    values = [row["added_ms"][q] for row in by_size if row["added_ms"].get(q) is not None]
    return max(values) if values else None


def headline(results: dict[str, Any]) -> dict[str, float | None]:
    """The figures the targets are about (None where the run did not measure them)."""
    at5k = _size(results, 5000, 10000) or _size(results, 5000)
    at50k = _size(results, 5000, 50000)
    at100k = _size(results, 10000, 100000)
    churn = results.get("churn") or {}
    partial = partial_by_workload(results)
    return {
        "plain_ratio": (results.get("plain") or {}).get("ratio"),
        "gang_ratio": (results.get("gang") or {}).get("ratio"),
        "prioritize_p50_5000": _verb(at5k, "prioritize plain pod", "p50"),
        "prioritize_p99_5000": _verb(at5k, "prioritize plain pod", "p99"),
        "filter_p99_5000": _verb(at5k, "filter plain pod", "p99"),
        "plan_p99_5000": _verb(at5k, "filter gang member, plans the gang", "p99"),
        "webhook_added_p50_worst": _webhook_worst(results, "p50"),
        "webhook_added_p99_worst": _webhook_worst(results, "p99"),
        "ready_50k": (at50k or {}).get("ready_s"),
        "rss_100k": (at100k or {}).get("rss_peak_mb"),
        "ready_100k": (at100k or {}).get("ready_s"),
        "filter_p99_100k": _verb(at100k, "filter plain pod", "p99"),
        "churn_growth": churn.get("growth"),
        "gang_vs_upstream_worst": worst_ratio(results.get("gang") or {}, "upstream"),
        "gang_vs_coscheduling_worst": worst_ratio(results.get("gang") or {}, "coscheduling"),
        "partial_total": int(sum(max(seen, counted or 0.0) for seen, counted in partial.values()))
        if partial
        else None,
    }


def _partial(run: dict[str, Any]) -> str:
    """Partial gangs seen bound, and the service's own count when it reported one."""
    counted = run.get("partial_gangs_counted")
    seen = run["gangs_partially_bound"]
    return str(seen) if counted is None else f"{seen} (counted {counted:g})"


def _fmt(value: Any, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _profiled_pass(sizes: list[dict[str, Any]]) -> list[str]:
    """The profiled size's second pass, under py-spy, beside its timed figures."""
    out: list[str] = []
    for s in sizes:
        profiled = s.get("verbs_under_profiler")
        if not profiled:
            continue
        out += [
            f"Under py-spy ({s['nodes']} nodes, {s['bound_pods']} pods): the loops run again "
            "after the timed pass, for the profile only (no target reads them):",
            "",
        ]
        out += _table(
            ["verb / case", "timed pass: p50 / p99", "under py-spy: p50 / p99"],
            [
                [
                    label,
                    _pair(s["verbs"].get(label)),
                    _pair(v),
                ]
                for label, v in profiled.items()
            ],
        )
    return out


def _pair(v: dict[str, Any] | None) -> str:
    return f"{_fmt(v.get('p50_ms'))} / {_fmt(v.get('p99_ms'))}" if v else "-"


def _contents(counted: dict[str, int] | None) -> str:
    """What the cluster held when a size's starts were timed (older results: not counted)."""
    if not counted:
        return "not counted"
    return f"{counted['nodes']} / {counted['pods']} / {counted['podgroups']}"


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(_fmt(c) for c in row) + " |" for row in rows]
    return lines + [""]


def _gang_table(runs: dict[str, Any], gpus_per_node: int) -> list[str]:
    return _table(
        [
            "scheduler",
            "gangs bound",
            "partial gangs",
            "first create -> last bind (s)",
            "pods/s",
            "gang create -> all bound p50 / p99 (ms)",
            "max GPUs on a node",
            "nodes per gang, mean / max",
        ],
        [
            [
                label,
                f"{r['gangs_complete']}/{r['gangs']}",
                _partial(r),
                r["seconds"],
                r["pods_per_second"],
                f"{_fmt(r['gang_create_to_all_bound'].get('p50_ms'), 0)} / "
                f"{_fmt(r['gang_create_to_all_bound'].get('p99_ms'), 0)}",
                f"{r['max_gpus_on_a_node']}/{gpus_per_node}",
                _spanned(r.get("nodes_spanned")),
            ]
            for label, r in runs.items()
        ],
    )


def _verb_bound(figures: dict[str, Any], q: str) -> str:
    """A verb's quantile: the bucket bound holding it, or "> bound" past the last one."""
    past = figures.get(f"{q}_gt_ms")
    return f"> {_fmt(past)}" if past is not None else _fmt(figures.get(f"{q}_le_ms"))


def _service_verbs(runs: dict[str, Any], locality: dict[str, Any]) -> list[str]:
    """gang-extender's own time per verb during each gang run (its request histogram)."""
    rows = []
    for case, found in (("gangs", runs), ("locality", locality)):
        verbs = (found.get("gang-extender") or {}).get("service_verbs") or {}
        for verb, v in verbs.items():
            rows.append(
                [
                    case,
                    verb,
                    int(v["requests"]),
                    v["mean_ms"],
                    f"{_verb_bound(v, 'p50')} / {_verb_bound(v, 'p99')}",
                ]
            )
    if not rows:
        return []
    return [
        "gang-extender's own time per verb in these runs (its request-duration histogram: "
        "p50/p99 are the bucket bounds holding them; bind includes the barrier's wait for "
        "the rest of the gang):",
        "",
        *_table(["run", "verb", "requests", "mean (ms)", "p50 / p99 <= (ms)"], rows),
    ]


def _spanned(spans: dict[str, Any] | None) -> str:
    if not spans or spans.get("mean") is None:
        return "-"
    return f"{_fmt(spans['mean'])} / {spans['max']}"


def markdown(results: dict[str, Any]) -> str:
    meta = results["meta"]
    m = meta["machine"]
    out = [
        "# gang-extender benchmark results",
        "",
        f"Run {meta['started']} ({meta['mode']} mode, {meta['duration_s']:.0f} s), commit "
        f"`{meta.get('commit', '?')}`, {m.get('cores')} cores ({m.get('cpu', '?')}), "
        f"{m.get('memory_gib')} GiB, Python {m.get('python')}. Control plane {meta.get('control_plane')}, "
        f"scheduler-plugins {meta.get('scheduler_plugins', '-')}. Every figure is from this one run "
        "on one local control plane; the machine is shared with the control plane itself "
        "(etcd, kube-apiserver, schedulers, kwok) and with the bench client.",
        "",
        "Produced by `python -m bench` (see bench/README.md); analysis in docs/benchmarks.md.",
        "",
    ]
    if meta.get("service_src"):
        out += [
            f"The service ran from the source tree `{meta['service_src']}` (`--service-src`).",
            "",
        ]
    if meta.get("service_env"):
        out += [
            "The service ran with "
            + ", ".join(f"`{k}={v}`" for k, v in sorted(meta["service_env"].items()))
            + " (`--service-env`).",
            "",
        ]
    merged = meta.get("merged")
    if merged:
        out += [
            f"Workload(s) {', '.join(merged['workloads'])} are from a second invocation "
            f"(`--only`, started {merged['started']}) on the same machine and trees, merged "
            f"in with `python -m bench.merge`: {merged.get('why') or 'the first run of them failed'}.",
            "",
        ]
    out += ["## Targets", ""]
    values = headline(results)
    rows: list[list[Any]] = []
    for label, key, comparison, target in TARGETS:
        value = values.get(key)
        rows.append([label, value, f"{comparison} {target:g}", met(value, comparison, target)])
    out += _table(["figure", "measured", "target", "status"], rows)
    partial = partial_by_workload(results)
    if partial:
        out += [
            "Partial gangs per workload (seen: members of a gang bound while others of it "
            "are not, read from the API server; counted: the service's "
            "`gang_extender_partial_gangs_total` over the workload):",
            "",
        ]
        out += _table(
            ["workload", "seen", "counted by the service"],
            [
                [name, seen, "-" if counted is None else f"{counted:g}"]
                for name, (seen, counted) in partial.items()
            ],
        )

    lat = results.get("latency")
    if lat and lat.get("sizes"):
        sizes = lat["sizes"]
        out += [
            "## 1. Extender latency over HTTPS (ms, client-side, one keep-alive connection)",
            "",
        ]
        header = ["verb / case"] + [
            f"{s['nodes']} nodes, {s['bound_pods']} pods: p50 / p99" for s in sizes
        ]
        labels: list[str] = []
        for s in sizes:
            labels += [k for k in s["verbs"] if k not in labels]
        rows = []
        for label in labels:
            row: list[Any] = [label]
            for s in sizes:
                v = s["verbs"].get(label)
                row.append(
                    f"{_fmt(v.get('p50_ms'))} / {_fmt(v.get('p99_ms'))} (n={v.get('n')})"
                    if v
                    else "-"
                )
            rows.append(row)
        rows.append(
            ["bind overhead (extender - direct)"]
            + [
                f"{_fmt(s['bind_overhead_ms']['p50'])} / {_fmt(s['bind_overhead_ms']['p99'])}"
                for s in sizes
            ]
        )
        out += _table(header, rows)
        cpu_rows = [
            [label]
            + [
                _fmt((s["verbs"].get(label) or {}).get("service_cpu_ms"))
                if (s["verbs"].get(label) or {}).get("service_cpu_ms") is not None
                else "-"
                for s in sizes
            ]
            for label in labels
        ]
        if any(c != "-" for row in cpu_rows for c in row[1:]):
            out += [
                "The service's CPU per request over the same loops (ms; user + system, read "
                "from /proc): what load on other processes does not move, where wall-clock "
                "latency does:",
                "",
            ]
            out += _table(
                ["verb / case"] + [f"{s['nodes']} nodes, {s['bound_pods']} pods" for s in sizes],
                cpu_rows,
            )
        out += ["Service process at each size:", ""]
        out += _table(
            [
                "nodes",
                "pods",
                "cluster at start: nodes / pods / PodGroups",
                "start -> /healthz (s)",
                "start -> /readyz (s)",
                "RSS ready (MB)",
                "RSS after verbs (MB)",
                "peak RSS (MB)",
            ],
            [
                [
                    s["nodes"],
                    s["bound_pods"],
                    _contents(s.get("cluster_at_start")),
                    s["healthz_s"],
                    s["ready_s"],
                    s["rss_ready_mb"],
                    s["rss_after_mb"],
                    s["rss_peak_mb"],
                ]
                for s in sizes
            ],
        )
        out += _profiled_pass(sizes)
    elif lat:
        out += ["## 1. Extender latency", "", f"failed: {lat.get('error')}", ""]

    plain = results.get("plain")
    if plain and plain.get("runs"):
        out += [
            f"## 2. Plain pods: {plain['pods']} single-GPU pods on {plain['nodes']} KWOK nodes",
            "",
        ]
        out += _table(
            [
                "scheduler",
                "bound",
                "first create -> last bind (s)",
                "pods/s",
                "steady pods/s (10-90%)",
                "create -> bind p50 / p99 (ms)",
                "creates took (s)",
            ],
            [
                [
                    label,
                    f"{r['bound']}/{r['pods']}",
                    r["seconds"],
                    r["pods_per_second"],
                    r["steady_pods_per_second"],
                    f"{_fmt(r['create_to_bind'].get('p50_ms'), 0)} / {_fmt(r['create_to_bind'].get('p99_ms'), 0)}",
                    r["create_seconds"],
                ]
                for label, r in plain["runs"].items()
            ],
        )
        out += [f"Ratio (gang-extender profile / stock): **{_fmt(plain.get('ratio'), 3)}**", ""]
    elif plain:
        out += ["## 2. Plain pods", "", f"failed: {plain.get('error')}", ""]

    gang = results.get("gang")
    if gang and gang.get("cases"):
        out += [
            "## 3. Gangs: gang-extender vs Kubernetes' own gang scheduling vs coscheduling",
            "",
            f"Gangs of 1-GPU members on KWOK nodes x {gang['gpus_per_node']} GPUs, each "
            "scheduler alone on the machine in turn (issue 31):",
            "",
            *three_way(gang),
        ]
        locality = gang.get("locality") or {}
        out += _service_verbs(gang["runs"], locality.get("runs") or {})
    elif gang and gang.get("runs"):
        out += [
            f"## 3. Gangs: {gang['gangs']} gangs x {gang['gang_size']} pods x 1 GPU on "
            f"{gang['nodes']} KWOK nodes x {gang['gpus_per_node']} GPUs",
            "",
        ]
        out += _gang_table(gang["runs"], gang["gpus_per_node"])
        out += [
            f"Ratio (gang-extender / coscheduling throughput): **{_fmt(gang.get('ratio'), 3)}**",
            "",
        ]
        cpu = {k: r.get("service_cpu_seconds") for k, r in gang["runs"].items()}
        if any(v is not None for v in cpu.values()):
            out += [
                "gang-extender service's CPU over each run (s; user + system; with "
                "coscheduling it only watches): "
                + ", ".join(f"{k} {_fmt(v)}" for k, v in cpu.items() if v is not None),
                "",
            ]
        locality = gang.get("locality") or {}
        if locality.get("runs"):
            out += [
                f"Locality: {locality['gangs']} gangs x {locality['gang_size']} pods x 1 GPU on the "
                f"same nodes (a gang smaller than a node fits on one; issue 13's fewest nodes):",
                "",
            ]
            out += _gang_table(locality["runs"], gang["gpus_per_node"])
        out += _service_verbs(gang["runs"], locality.get("runs") or {})
    elif gang:
        out += ["## 3. Gangs", "", f"failed: {gang.get('error')}", ""]

    hook = results.get("webhook")
    if hook and hook.get("series"):
        out += ["## 4. Pod create round trip (ms, sequential creates)", ""]
        out += _table(
            ["case", "n", "p50", "p90", "p99", "max"],
            [
                [
                    label,
                    s.get("n"),
                    s.get("p50_ms"),
                    s.get("p90_ms"),
                    s.get("p99_ms"),
                    s.get("max_ms"),
                ]
                for label, s in hook["series"].items()
            ],
        )
        out += [
            f"Added by the webhook: p50 {_fmt(hook['added_ms']['p50'])} ms, p99 "
            f"{_fmt(hook['added_ms']['p99'])} ms ({hook['mutated']} pods came back mutated).",
            "",
        ]
        trend = hook.get("trend") or {}
        if trend:
            out += [
                "p50 in the first vs the last quarter of the creates (the namespaces grow "
                "by one pod per series per round): "
                + "; ".join(
                    f"{label} {_fmt(t['first_quarter_p50_ms'])} -> {_fmt(t['last_quarter_p50_ms'])} ms"
                    for label, t in trend.items()
                ),
                "",
            ]
        by_size = hook.get("by_namespace_size") or []
        if by_size:
            out += [
                "Added latency against the pods already in the namespace (group members "
                "created one at a time; ms):",
                "",
            ]
            out += _table(
                [
                    "pods in namespace",
                    "n",
                    "with p50",
                    "with p99",
                    "without p50",
                    "without p99",
                    "added p50",
                    "added p99",
                ],
                [
                    [
                        row["pods_in_namespace"],
                        row["with webhook"].get("n"),
                        row["with webhook"].get("p50_ms"),
                        row["with webhook"].get("p99_ms"),
                        row["without webhook"].get("p50_ms"),
                        row["without webhook"].get("p99_ms"),
                        row["added_ms"]["p50"],
                        row["added_ms"]["p99"],
                    ]
                    for row in by_size
                ],
            )
    elif hook:
        out += ["## 4. Webhook", "", f"failed: {hook.get('error')}", ""]

    churn = results.get("churn")
    if churn and churn.get("levels"):
        out += [
            f"## 5. Held gangs + node churn: {churn['nodes']} nodes, every GPU taken but one, "
            f"gangs of {churn['gang_size']} x 1 GPU held; per event one node update that "
            f"cannot help + one /filter of a held gang's member (all nodes candidates), "
            f"{_fmt(churn['rate_per_s'], 1)} events/s",
            "",
        ]
        out += _table(
            [
                "held gangs",
                "events",
                "service CPU per event, median of rounds (ms)",
                "same, windows pooled (ms)",
                "same, idle rate not taken off (ms)",
                "/filter after the event p50 / p99 (ms)",
                "service CPU idle (s per s)",
                "first /filter after the new gangs (ms)",
            ],
            [
                [
                    lv["held_gangs"],
                    lv["events"],
                    lv["service_cpu_ms_per_event"],
                    _fmt(lv.get("service_cpu_ms_per_event_pooled")),
                    lv.get("service_cpu_ms_per_event_raw"),
                    f"{_fmt(lv['filter_after_event'].get('p50_ms'))} / "
                    f"{_fmt(lv['filter_after_event'].get('p99_ms'))}",
                    _fmt(lv["service_cpu_idle_s"] / lv["idle_s"], 3) if lv["idle_s"] else "-",
                    lv["first_filter_ms"],
                ]
                for lv in churn["levels"]
            ],
        )
        out += [
            f"CPU per event at {churn['levels'][-1]['held_gangs']} held gangs / at "
            f"{churn['levels'][0]['held_gangs']}: **{_fmt(churn.get('growth'))}** "
            f"(held gangs x{_fmt(churn.get('held_ratio'), 0)}; ~1 when O(1) in held gangs, "
            "~the held-gangs ratio when O(held gangs)). CPU per event is a churn window's "
            "service CPU less the idle rate of its round's idle window, the median over "
            "the rounds (idle and churn windows interleaved, as long in all); on a loaded "
            "machine small values are within the noise, and a negative one says the events "
            "cost less than it. Kube-scheduler retries its "
            "unschedulable pods on node updates, so a real cluster multiplies this by its retries.",
            "",
        ]
    elif churn:
        out += ["## 5. Held gangs + node churn", "", f"failed: {churn.get('error')}", ""]

    return "\n".join(out)


def plot(results: dict[str, Any], path: Path) -> bool:
    """results.png; False when matplotlib is missing (install the `bench` extra)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, axes = plt.subplots(2, 3, figsize=(21, 10))
    fig.suptitle(
        f"gang-extender bench ({results['meta']['mode']} mode, {results['meta']['started']})"
    )

    ax = axes[0][0]
    sizes = ((results.get("latency") or {}).get("sizes")) or []
    cases = [
        "filter plain pod",
        "prioritize plain pod",
        "filter gang member, held",
        "filter gang member, planned",
        "bind plain pod (extender)",
    ]
    if sizes:
        width = 0.8 / len(sizes)
        for i, s in enumerate(sizes):
            p50 = [(s["verbs"].get(c) or {}).get("p50_ms", 0) for c in cases]
            p99 = [(s["verbs"].get(c) or {}).get("p99_ms", 0) for c in cases]
            xs = [x + i * width for x in range(len(cases))]
            ax.bar(xs, p99, width, alpha=0.35, color=f"C{i}")
            ax.bar(
                xs, p50, width, color=f"C{i}", label=f"{s['nodes']} nodes / {s['bound_pods']} pods"
            )
        ax.set_xticks([x + 0.4 - width / 2 for x in range(len(cases))])
        ax.set_xticklabels([c.replace(" ", "\n", 1) for c in cases], fontsize=8)
        ax.axhline(2.0, color="red", linestyle=":", linewidth=1)
        ax.set_yscale("log")
        ax.set_ylabel("ms (solid p50, light p99; red: 2 ms target)")
        ax.legend(fontsize=8)
    ax.set_title("1. extender latency over HTTPS")

    for ax, key, title in (
        (axes[0][1], "plain", "2. plain pods bound over time"),
        (axes[1][0], "gang", "3. gang pods bound over time"),
    ):
        runs = (results.get(key) or {}).get("runs") or {}
        for label, r in runs.items():
            times = sorted((r.get("bound_at") or {}).values())
            if times:
                ax.plot(
                    times, range(1, len(times) + 1), label=f"{label}: {r['pods_per_second']} pods/s"
                )
        ax.set_xlabel("seconds since the first create")
        ax.set_ylabel("pods bound")
        ax.set_title(title)
        if runs:
            ax.legend(fontsize=8)

    ax = axes[0][2]
    points = latency_by_nodes(sizes)
    if points:
        xs = [pt["nodes"] for pt in points]
        for verb, color in (("filter", "C0"), ("prioritize", "C1")):
            for q, style in (("p50", "-"), ("p99", "--")):
                ax.plot(
                    xs,
                    [pt[f"{verb}_{q}"] for pt in points],
                    style,
                    marker="o",
                    color=color,
                    label=f"{verb} plain pod, {q}",
                )
        ax.axhline(1.0, color="grey", linestyle=":", linewidth=1, label="1 ms (prioritize p50)")
        ax.axhline(2.0, color="red", linestyle=":", linewidth=1, label="2 ms (p99 at 5,000)")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.minorticks_off()
        ax.set_xticks(xs)
        ax.set_xticklabels([f"{pt['nodes']}\n({pt['pods']} pods)" for pt in points], fontsize=8)
        ax.set_xlabel("nodes (bound pods in the cache)")
        ax.set_ylabel("ms, client-side over HTTPS")
        ax.legend(fontsize=8)
    ax.set_title("5. filter / prioritize latency vs nodes")

    ax = axes[1][2]
    levels = (results.get("churn") or {}).get("levels") or []
    if levels:
        xs_churn = list(range(len(levels)))
        ax.bar(
            [x - 0.2 for x in xs_churn],
            [lv["service_cpu_ms_per_event"] or 0 for lv in levels],
            0.4,
            color="C0",
            label="service CPU per event (ms)",
        )
        ax.bar(
            [x + 0.2 for x in xs_churn],
            [lv["filter_after_event"].get("p50_ms", 0) for lv in levels],
            0.4,
            color="C1",
            label="/filter after the event, p50 (ms)",
        )
        ax.set_xticks(xs_churn)
        ax.set_xticklabels([str(lv["held_gangs"]) for lv in levels])
        ax.set_xlabel("held gangs (that cannot fit)")
        ax.set_ylabel("ms per event (node update + one held member's /filter)")
        ax.legend(fontsize=8)
    ax.set_title("6. held gangs + node churn: cost per cluster event")

    ax = axes[1][1]
    series = ((results.get("webhook") or {}).get("series")) or {}
    by_size = ((results.get("webhook") or {}).get("by_namespace_size")) or []
    if by_size:  # the latency-vs-namespace-size figure, when that series ran
        sizes_x = [row["pods_in_namespace"] for row in by_size]
        # Round trips themselves (a difference of two p99s can be negative), and the
        # added p50 against its target.
        for case, color in (("with webhook", "C0"), ("without webhook", "C1")):
            for q, style in (("p50", "-"), ("p99", "--")):
                ax.plot(
                    sizes_x,
                    [row[case].get(f"{q}_ms") for row in by_size],
                    style,
                    marker="o",
                    color=color,
                    label=f"{case}, {q}",
                )
        ax.plot(
            sizes_x,
            [row["added_ms"]["p50"] for row in by_size],
            "-",
            marker="s",
            color="C2",
            label="added by the webhook, p50",
        )
        ax.axhline(5.0, color="red", linestyle=":", linewidth=1, label="5 ms added p50 target")
        ax.set_xscale("log")
        ax.set_xlabel("pods already in the namespace")
        ax.set_ylabel("ms per pod create (round trip)")
        ax.legend(fontsize=8)
        ax.set_title("4. pod create round trip vs namespace size")
    elif series:
        labels = list(series)
        ax.bar(
            range(len(labels)), [series[x].get("p99_ms", 0) for x in labels], alpha=0.35, color="C0"
        )
        ax.bar(range(len(labels)), [series[x].get("p50_ms", 0) for x in labels], color="C0")
        ax.set_xticks(range(len(labels)))
        ax.set_xticklabels(labels, fontsize=8)
        ax.set_ylabel("ms (solid p50, light p99)")
        ax.set_title("4. pod create round trip")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
