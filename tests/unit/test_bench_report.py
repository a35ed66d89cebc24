"""bench.report: the latency table says what the cluster held when each size's starts
were timed, counted by the run (older results say they were not counted)."""

from __future__ import annotations

import copy
from pathlib import Path

import orjson

from bench.report import markdown

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results" / "results.json"


def test_each_size_row_shows_the_counted_cluster_or_says_it_was_not_counted() -> None:
    results = orjson.loads(RESULTS.read_bytes())
    sizes = copy.deepcopy(results["latency"]["sizes"][:2])
    for size in sizes:
        size.pop("cluster_at_start", None)
    sizes[0]["cluster_at_start"] = {"nodes": 1003, "pods": 11207, "podgroups": 101}
    results["latency"]["sizes"] = sizes
    rows = [
        line
        for line in markdown(results).splitlines()
        if line.startswith(f"| {sizes[0]['nodes']} | {sizes[0]['bound_pods']} |")
        or line.startswith(f"| {sizes[1]['nodes']} | {sizes[1]['bound_pods']} |")
    ]
    process_rows = [r for r in rows if "1003 / 11207 / 101" in r or "not counted" in r]
    assert len(process_rows) == 2, rows
    assert "1003 / 11207 / 101" in process_rows[0]
    assert "not counted" in process_rows[1]


def test_the_profiled_pass_is_shown_beside_the_timed_figures_it_did_not_replace() -> None:
    results = orjson.loads(RESULTS.read_bytes())
    size = copy.deepcopy(results["latency"]["sizes"][-1])
    label = "filter plain pod, gangs reserved"
    timed = size["verbs"][label]
    size["verbs_under_profiler"] = {label: {**timed, "p50_ms": 9.5, "p99_ms": 19.25}}
    results["latency"]["sizes"] = [size]
    lines = markdown(results).splitlines()
    timed_pair = f"{timed['p50_ms']:.2f} / {timed['p99_ms']:.2f}"
    assert f"| {label} | {timed_pair} | 9.50 / 19.25 |" in lines
    # the timed table keeps the timed figures: the profiled ones are only beside them
    timed_rows = [line for line in lines if line.startswith(f"| {label} | ")]
    assert len(timed_rows) == 2 and "19.25" not in timed_rows[0], timed_rows


def test_service_cpu_per_request_gets_its_own_table_only_when_measured() -> None:
    results = orjson.loads(RESULTS.read_bytes())
    size = copy.deepcopy(results["latency"]["sizes"][0])
    results["latency"]["sizes"] = [size]
    # results written before the figure existed: no CPU table
    assert "CPU per request" not in markdown(results)
    size["verbs"]["filter plain pod"]["service_cpu_ms"] = 0.734
    lines = markdown(results).splitlines()
    assert any("CPU per request" in line for line in lines)
    assert "| filter plain pod | 0.73 |" in lines
    assert "| prioritize plain pod | - |" in lines


def test_gang_runs_show_the_service_cpu_when_measured() -> None:
    results = orjson.loads(RESULTS.read_bytes())
    gang = copy.deepcopy(results["gang"])
    results["gang"] = gang
    assert "service's CPU over each run" not in markdown(results)
    gang["runs"]["gang-extender"]["service_cpu_seconds"] = 15.5
    gang["runs"]["coscheduling"]["service_cpu_seconds"] = 2.25
    line = next(x for x in markdown(results).splitlines() if "CPU over each run" in x)
    assert "gang-extender 15.50" in line and "coscheduling 2.25" in line, line
