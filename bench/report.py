"""results.json -> results.md (tables) and results.png (plots)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

# (label, how to read it from the results, target, True when higher is better)
TARGETS: list[tuple[str, str, float, bool]] = [
    ("filter p99 at 5,000 nodes (plain pod)", "filter_p99_5000", 2.0, False),
    ("prioritize p99 at 5,000 nodes (plain pod)", "prioritize_p99_5000", 2.0, False),
    ("bind overhead p50 (extender - direct binding)", "bind_overhead_p50", 5.0, False),
    ("plain-pod throughput ratio (gang profile / stock)", "plain_ratio", 0.8, True),
    ("gang throughput ratio (gang-extender / coscheduling)", "gang_ratio", 1.0, True),
    ("RSS at 5,000 nodes + 50,000 pods (MB)", "rss_50k", 300.0, False),
    ("ready at 5,000 nodes + 50,000 pods (s)", "ready_50k", 5.0, False),
    ("webhook added p50, 2,000 pods in the namespace (ms)", "webhook_added_p50_2000", 5.0, False),
    ("webhook added p99, 2,000 pods in the namespace (ms)", "webhook_added_p99_2000", 15.0, False),
]


def _size(results: dict[str, Any], nodes: int, pods: int | None = None) -> dict[str, Any] | None:
    sizes = (results.get("latency") or {}).get("sizes") or []
    found = [s for s in sizes if s["nodes"] == nodes and (pods is None or s["bound_pods"] == pods)]
    if not found:
        return None
    chosen: dict[str, Any] = found[0] if pods is None else found[-1]
    return chosen


def headline(results: dict[str, Any]) -> dict[str, float | None]:
    """The figures the targets are about (None where the run did not measure them)."""
    at5k = _size(results, 5000, 10000) or _size(results, 5000)
    at50k = _size(results, 5000, 50000)
    verbs = (at5k or {}).get("verbs", {})
    largest = ((results.get("latency") or {}).get("sizes") or [None])[-1]
    out: dict[str, float | None] = {
        "filter_p99_5000": (verbs.get("filter plain pod") or {}).get("p99_ms"),
        "prioritize_p99_5000": (verbs.get("prioritize plain pod") or {}).get("p99_ms"),
        "bind_overhead_p50": ((largest or {}).get("bind_overhead_ms") or {}).get("p50"),
        "plain_ratio": (results.get("plain") or {}).get("ratio"),
        "gang_ratio": (results.get("gang") or {}).get("ratio"),
        "rss_50k": (at50k or {}).get("rss_after_mb"),
        "ready_50k": (at50k or {}).get("ready_s"),
    }
    by_size = (results.get("webhook") or {}).get("by_namespace_size") or []
    at2000 = next((r for r in by_size if r["pods_in_namespace"] == 2000), {})
    out["webhook_added_p50_2000"] = (at2000.get("added_ms") or {}).get("p50")
    out["webhook_added_p99_2000"] = (at2000.get("added_ms") or {}).get("p99")
    return out


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


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(_fmt(c) for c in row) + " |" for row in rows]
    return lines + [""]


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
        "## Targets",
        "",
    ]
    values = headline(results)
    rows: list[list[Any]] = []
    for label, key, target, higher in TARGETS:
        value = values.get(key)
        if value is None:
            status = "not measured"
        else:
            ok = value >= target if higher else value <= target
            status = "met" if ok else "missed"
        rows.append([label, value, (">= " if higher else "<= ") + _fmt(target), status])
    out += _table(["figure", "value", "target", "status"], rows)

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
        out += ["Service process at each size:", ""]
        out += _table(
            [
                "nodes",
                "pods",
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
                    s["healthz_s"],
                    s["ready_s"],
                    s["rss_ready_mb"],
                    s["rss_after_mb"],
                    s["rss_peak_mb"],
                ]
                for s in sizes
            ],
        )
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
    if gang and gang.get("runs"):
        out += [
            f"## 3. Gangs: {gang['gangs']} gangs x {gang['gang_size']} pods x 1 GPU on "
            f"{gang['nodes']} KWOK nodes x {gang['gpus_per_node']} GPUs",
            "",
        ]
        out += _table(
            [
                "scheduler",
                "gangs bound",
                "partial gangs",
                "first create -> last bind (s)",
                "pods/s",
                "gang create -> all bound p50 / p99 (ms)",
                "max GPUs on a node",
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
                    f"{r['max_gpus_on_a_node']}/{gang['gpus_per_node']}",
                ]
                for label, r in gang["runs"].items()
            ],
        )
        out += [
            f"Ratio (gang-extender / coscheduling throughput): **{_fmt(gang.get('ratio'), 3)}**",
            "",
        ]
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
    return "\n".join(out)


def plot(results: dict[str, Any], path: Path) -> bool:
    """results.png; False when matplotlib is missing (install the `bench` extra)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, axes = plt.subplots(2, 2, figsize=(14, 10))
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
