"""The gang workload's three-way table (gang-extender, Kubernetes' own gang scheduling,
coscheduling) for results.md, and the rows it sums into the partial-gangs count."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from bench.gang_compare import usable
from bench.gang_schedulers import KINDS


def gang_runs(gang: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every run of the gang workload that produced figures (any case, any scale)."""
    if gang.get("cases"):
        groups = [c["runs"] for c in gang["cases"]]
    else:  # results of rounds before the three-way cases
        groups = [gang.get("runs") or {}, (gang.get("locality") or {}).get("runs") or {}]
    for runs in groups:
        for run in runs.values():
            if "gangs_partially_bound" in run:
                yield run


def worst_ratio(gang: dict[str, Any], other: str) -> float | None:
    """The lowest gangs/s ratio of ours over `other` among the cases that have one."""
    ratios = [
        found["ratio"]
        for case in gang.get("cases") or []
        if (found := (case.get("vs") or {}).get(other)) and found["ratio"] is not None
    ]
    return min(ratios) if ratios else None


def _f(value: Any, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _pair(a: Any, b: Any, digits: int = 0) -> str:
    return f"{_f(a, digits)} / {_f(b, digits)}"


def _bound(attempt: dict[str, Any], q: str) -> str:
    """A histogram quantile: the bucket bound holding it, or the bound it is past."""
    if attempt.get(f"{q}_gt_ms") is not None:
        return f"> {_f(attempt[f'{q}_gt_ms'], 0)}"
    return _f(attempt.get(f"{q}_le_ms"), 0)


def _vs(case: dict[str, Any], kind: str) -> str:
    """Ours over `kind`: the ratio, its target and whether met; or why there is none."""
    found = (case.get("vs") or {}).get(kind)
    if not found:
        return "-"
    if found["ratio"] is None:
        return f"no ratio: {found['reason']}"
    verdict = "met" if found["met"] else "MISSED"
    latency = found.get("latency_not_worse") or {}
    worse = [q.removesuffix("_ms") for q, ok in latency.items() if ok is False]
    note = f"; ours slower at {', '.join(worse)}" if worse else ""
    return f"{found['ratio']:.2f}x (target >= {found['target']:g}x: {verdict}){note}"


def _row(case: dict[str, Any], kind: str, gpus_per_node: int) -> list[str]:
    run = case["runs"].get(kind)
    head = [case["case"], str(case["nodes"]), f"{case['gangs']} x {case['gang_size']}", kind]
    why = usable(run)
    if run is None or "gangs_partially_bound" not in run:
        return [*head, f"cannot: {why}", *["-"] * 7]
    spans = run.get("nodes_spanned") or {}
    attempt = (run.get("attempt_latency") or {}).get("pod") or {}
    counted = run.get("partial_gangs_counted")
    partial = str(run["gangs_partially_bound"]) + (
        "" if counted is None else f" (counted {counted:g})"
    )
    ratio = "ours" if kind == "gang-extender" else _vs(case, kind)
    return [
        *head,
        f"{run['gangs_complete']}/{run['gangs']}"
        + ("" if why is None else " (incomplete)")
        # e.g. its cleanup timed out: the runs after it may have found its pods still there
        + (f" (then failed: {run['error_after']})" if run.get("error_after") else ""),
        partial,
        _f(run.get("gangs_per_second")),
        _f(run.get("time_to_last_bound_s", run.get("seconds"))),
        _pair(
            run["gang_create_to_all_bound"].get("p50_ms"),
            run["gang_create_to_all_bound"].get("p99_ms"),
        ),
        f"{_bound(attempt, 'p50')} / {_bound(attempt, 'p99')} (n={int(attempt.get('attempts') or 0)})",
        f"{_f(spans.get('mean'))} / {_f(spans.get('max'))} (fewest {_f(spans.get('fewest_possible'))}"
        f", {_f(spans.get('gangs_above_fewest'))} above)",
        ratio,
    ]


HEADER = [
    "case",
    "nodes",
    "gangs x size",
    "scheduler",
    "gangs bound",
    "partial gangs",
    "gangs/s",
    "time to last member bound (s)",
    "gang create -> all bound p50 / p99 (ms)",
    "attempt p50 / p99 <= (ms)",
    "nodes per gang mean / max",
    "ours vs it: gangs/s ratio",
]


def three_way(gang: dict[str, Any]) -> list[str]:
    """results.md lines: one row per case, scale and scheduler."""
    rows = [_row(case, kind, gang["gpus_per_node"]) for case in gang["cases"] for kind in KINDS]
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "|".join("---" for _ in HEADER) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    notes = [
        "",
        "Attempt latency: each scheduler's own `scheduler_scheduling_attempt_duration_seconds` "
        "(algorithm + binding, one observation per pod attempt, any result) over the run, "
        "read from its /metrics before and after; p50/p99 are the upper bounds of the "
        "histogram buckets holding them (1 ms x 2^k). Ratios are gang-extender's gangs/s over "
        "the other's (issue 31's targets: >= 1.0x upstream, >= 1.5x coscheduling); "
        "'ours slower at p50/p99' flags a gang create -> all bound figure above the other's.",
        "",
    ]
    upstream_pg = [
        (c["case"], c["nodes"], (c["runs"].get("upstream") or {}).get("attempt_latency") or {})
        for c in gang["cases"]
    ]
    found = [(case, n, a["podgroup"]) for case, n, a in upstream_pg if a.get("podgroup")]
    if found:
        notes += [
            "Kubernetes' own gang scheduling also times each pod-group attempt "
            "(`scheduler_podgroup_scheduling_attempt_duration_seconds`): "
            + "; ".join(
                f"{case} at {n} nodes: {int(pg['attempts'] or 0)} attempts, p50 / p99 <= "
                f"{_bound(pg, 'p50')} / {_bound(pg, 'p99')} ms"
                for case, n, pg in found
            ),
            "",
        ]
    notes += cost_per_pod(gang)
    if gang.get("admission_gate"):
        notes += [
            "gang-extender's members were created behind its admission gate "
            "(`--gang-admission-gate`, docs/design.md#gated-admission).",
            "",
        ]
    if gang.get("upstream_unsupported"):
        notes += [f"Upstream gang scheduling not run: {gang['upstream_unsupported']}", ""]
    return lines + notes


def cost_per_pod(gang: dict[str, Any]) -> list[str]:
    """results.md lines: what each run cost the API server and the service, per pod."""
    rows = []
    for case in gang.get("cases") or []:
        for kind in KINDS:
            run = case["runs"].get(kind) or {}
            writes = run.get("api_writes")
            if not writes:
                continue
            pods = run.get("pods") or 1
            top = sorted(writes.items(), key=lambda kv: -kv[1])[:4]
            cpu = run.get("service_cpu_seconds")
            asked = run.get("filter_candidates") or {}
            processes = run.get("process_cpu_seconds") or {}
            rows.append(
                [
                    case["case"],
                    str(case["nodes"]),
                    kind,
                    _f(run.get("api_writes_per_pod")),
                    ", ".join(f"{what} {n / pods:.2f}" for what, n in top),
                    _f(cpu * 1000 / pods, 1) if cpu is not None else "-",
                    f"{asked['filters']:.0f} / {asked['one_node']:.0f} / {asked['mean_nodes']}"
                    if asked.get("filters")
                    else "-",
                    ", ".join(
                        f"{name} {seconds * 1000 / pods:.1f}"
                        for name, seconds in list(processes.items())[:5]
                    )
                    or "-",
                ]
            )
    if not rows:
        return []
    head = [
        "case",
        "nodes",
        "scheduler",
        "API writes per pod",
        "largest kinds, per pod",
        "service CPU per pod (ms)",
        "filters / offering one node / mean nodes offered",
        "CPU per pod (ms), busiest processes",
    ]
    return [
        "What a run cost, per pod created: the API server's successful writes while it "
        "ran (`apiserver_request_total`, every client's, the creates included), "
        "gang-extender's service CPU, and the CPU of each process of the control plane "
        "over the same span (`/proc`; a scheduler stopped for another's run uses none):",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "|".join("---" for _ in head) + "|",
        *("| " + " | ".join(row) + " |" for row in rows),
        "",
    ]
