"""bench/time_to_running.py's figures, from what a run saw (the runs themselves need real
nodes: `python -m bench.time_to_running`)."""

from __future__ import annotations

from typing import Any

import pytest

from bench.time_to_running import (
    PodTimes,
    figures,
    markdown,
    parse_timestamp,
    rank_times,
    stock_scheduled,
    summarize,
)


@pytest.mark.parametrize(
    ("text", "epoch"),
    [
        ("1970-01-01T00:00:10Z", 10.0),
        ("1970-01-01T00:00:10.5Z", 10.5),
        ("1970-01-01T00:00:10.123456789Z", 10.123456789),
        ("1970-01-01T01:00:10+01:00", 10.0),
    ],
)
def test_kubelet_log_timestamps_parse_to_the_nanosecond(text: str, epoch: float) -> None:
    assert parse_timestamp(text) == pytest.approx(epoch, abs=1e-9)


@pytest.mark.parametrize("text", ["", "10:00:00", "1970-01-01 00:00:10Z", "1970-01-01T00:00:10"])
def test_a_line_without_a_timestamp_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="RFC 3339"):
        parse_timestamp(text)


def test_rank_times_read_only_the_ranks_result_lines() -> None:
    log = "\n".join(
        [
            "1970-01-01T00:00:11Z == /etc/volcano/hostfile",
            "1970-01-01T00:00:12.25Z rank 1 of 2 on w-0: allreduce(rank + 1) = 3",
            "1970-01-01T00:00:12Z Warning: Permanently added 'w-0' (ED25519)",
            "1970-01-01T00:00:13.5Z rank 0 of 2 on m-0: allreduce(rank + 1) = 3",
        ]
    )
    assert rank_times(log, applied_at=10.0) == [2.25, 3.5]


def _pods(*entries: tuple[float | None, float | None, str | None]) -> dict[str, PodTimes]:
    return {f"p{i}": PodTimes(b, r, n) for i, (b, r, n) in enumerate(entries)}


def test_a_complete_run_reports_the_last_member_and_rank() -> None:
    pods = _pods((1.0, 3.0, "a"), (1.25, 4.0, "a"), (1.5, 3.5, "b"))
    run = figures("gang-extender", pods, [6.0, 7.5, 7.0], members=3, succeeded=True)
    assert run.ok
    assert (run.all_bound_s, run.all_running_s, run.ranks_done_s) == (1.5, 4.0, 7.5)
    assert run.bind_spread_s == 0.5
    assert (run.nodes_spanned, run.partial_at_end, run.notes) == (2, 0, [])


def test_a_run_with_a_member_unbound_is_partial_and_not_ok() -> None:
    pods = _pods((1.0, 3.0, "a"), (None, None, None), (1.5, None, "b"))
    run = figures("gang-extender", pods, [], members=3, succeeded=False)
    assert not run.ok
    assert run.partial_at_end == 1
    assert run.all_bound_s is None and run.all_running_s is None and run.bind_spread_s is None


def test_a_run_that_never_saw_every_member_says_so() -> None:
    pods = _pods((1.0, 2.0, "a"), (1.0, 2.0, "a"))
    run = figures("stock", pods, [3.0, 3.0, 3.0], members=3, succeeded=True)
    assert not run.ok
    assert run.all_bound_s is None
    assert run.notes == ["2 of 3 members seen"]


def test_a_run_with_a_rank_missing_is_not_ok() -> None:
    pods = _pods((1.0, 2.0, "a"), (1.0, 2.0, "a"))
    run = figures("stock", pods, [3.0], members=2, succeeded=True)
    assert not run.ok
    assert run.ranks_done_s is None


def test_summary_per_scheduler_and_its_table() -> None:
    full = _pods((1.0, 2.0, "a"), (2.0, 3.0, "a"))
    runs = [
        figures("gang-extender", full, [4.0, 5.0], members=2, succeeded=True),
        figures(
            "gang-extender",
            _pods((3.0, 4.0, "a"), (3.0, 6.0, "b")),
            [7.0, 8.0],
            members=2,
            succeeded=True,
        ),
        figures(
            "stock", _pods((1.0, None, "a"), (None, None, None)), [], members=2, succeeded=False
        ),
    ]
    summary = summarize(runs)
    assert summary["gang-extender"]["runs"] == 2 and summary["gang-extender"]["ok"] == 2
    assert summary["gang-extender"]["all_bound_s"] == {"p50": 2.0, "max": 3.0}
    assert summary["gang-extender"]["ranks_done_s"] == {"p50": 5.0, "max": 8.0}
    assert summary["gang-extender"]["nodes_spanned_max"] == 2
    assert summary["stock"]["ok"] == 0 and summary["stock"]["all_bound_s"] is None
    assert summary["stock"]["partial_at_end"] == 1
    table = markdown(summary, 0.0)
    assert "| gang-extender | 2 (2) | 2.00 / 3.00 |" in table
    assert "| stock | 1 (0) | - |" in table
    assert "gang_extender_partial_gangs_total after all runs: 0" in table
    assert "not read" in markdown(summary, None)


def test_the_stock_variant_sends_every_pod_to_the_default_scheduler() -> None:
    docs: list[dict[str, Any]] = [
        {"kind": "PodGroup", "spec": {"minMember": 2}},
        {"kind": "Pod", "spec": {"schedulerName": "gang-extender", "containers": []}},
        {"kind": "Deployment", "spec": {"template": {"spec": {"schedulerName": "gang-extender"}}}},
    ]
    out = stock_scheduled(docs)
    assert out[0] == docs[0]
    assert out[1]["spec"]["schedulerName"] == "default-scheduler"
    assert out[2]["spec"]["template"]["spec"]["schedulerName"] == "default-scheduler"
    assert docs[1]["spec"]["schedulerName"] == "gang-extender"  # the input is left as it was
