"""bench.merge: a workload run again alone replaces the failed one of a full run, and
the results say so."""

from __future__ import annotations

from typing import Any

import pytest

from bench.merge import merge
from bench.report import markdown
from bench.run import parse_args


def run(started: str, **workloads: dict[str, Any]) -> dict[str, Any]:
    meta = {
        "started": started,
        "mode": "full",
        "duration_s": 10.0,
        "commit": "abc",
        "machine": {"cores": 2},
    }
    return {"meta": meta, **workloads}


def test_only_the_workloads_the_second_run_ran_without_error_replace_the_firsts() -> None:
    full = run("t1", plain={"ratio": 0.9}, latency={"error": "AssertionError()"})
    again = run("t2", latency={"sizes": []}, churn={"error": "boom"})
    merged = merge(full, again, "again/results.json")
    assert merged["plain"] == {"ratio": 0.9}
    assert merged["latency"] == {"sizes": []}
    assert "churn" not in merged
    assert merged["meta"]["merged"] == {
        "workloads": ["latency"],
        "from": "again/results.json",
        "started": "t2",
    }
    assert merged["meta"]["started"] == "t1" and full["latency"] == {"error": "AssertionError()"}


def test_the_report_names_the_merged_workloads_and_the_service_tree() -> None:
    merged = merge(run("t1"), run("t2", latency={"sizes": []}), "x")
    merged["meta"]["service_src"] = "extender/ of commit abc"
    text = markdown(merged)
    assert "Workload(s) latency are from a second invocation (`--only`, started t2)" in text
    assert text.count("the first run of them failed") == 1
    assert "The service ran from the source tree `extender/ of commit abc`" in text


def test_the_reason_for_a_merge_is_said_in_the_report() -> None:
    merged = merge(run("t1"), run("t2", plain={"ratio": 1.0}), "x", why="the machine was busy")
    assert merged["meta"]["merged"]["why"] == "the machine was busy"
    assert "`python -m bench.merge`: the machine was busy." in markdown(merged)


def test_the_services_settings_from_the_command_line_are_in_the_report() -> None:
    args = parse_args(
        ["--service-env", "GANG_NOMINATE_PLANNED_NODE=true", "--service-env", "GANG_X=a=b"]
    )
    assert args.service_env == [("GANG_NOMINATE_PLANNED_NODE", "true"), ("GANG_X", "a=b")]
    results = run("t1")
    results["meta"]["service_env"] = dict(args.service_env)
    assert (
        "The service ran with `GANG_NOMINATE_PLANNED_NODE=true`, `GANG_X=a=b` (`--service-env`)."
        in markdown(results)
    )
    assert "--service-env" not in markdown(run("t1"))


def test_a_service_env_without_a_name_and_value_is_refused_by_the_command_line() -> None:
    for bad in ("GANG_NOMINATE_PLANNED_NODE", "=true"):
        with pytest.raises(SystemExit):
            parse_args(["--service-env", bad])
