"""The bench's three-way gang comparison: a scheduler's attempt histogram read from
its /metrics text, per-gang figures of a timed run, ratios and targets against
Kubernetes' own gang scheduling and coscheduling, and the table that shows them
(including a scheduler that could not run, and partial gangs counted)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from bench.gang_compare import compare, fewest_nodes, usable
from bench.gang_schedulers import Scheduler
from bench.report import markdown, partial_by_workload
from bench.report_gang import cost_per_pod, three_way, worst_ratio
from bench.schedmetrics import ATTEMPT_SECONDS, between, histogram
from bench.workloads import common
from bench.workloads.common import (
    api_writes,
    cpu_between,
    verb_latency,
    writes_between,
)
from bench.workloads.gang import GangConfig, failed_scale, gang_figures
from extender.devcluster.workload_api import serves_v1beta1, upstream_podgroup

METRICS = f"""# HELP {ATTEMPT_SECONDS} Scheduling attempt latency
# TYPE {ATTEMPT_SECONDS} histogram
{ATTEMPT_SECONDS}_bucket{{profile="gang-extender",result="scheduled",le="0.001"}} 1
{ATTEMPT_SECONDS}_bucket{{profile="gang-extender",result="scheduled",le="0.002"}} 6
{ATTEMPT_SECONDS}_bucket{{profile="gang-extender",result="scheduled",le="0.004"}} 9
{ATTEMPT_SECONDS}_bucket{{profile="gang-extender",result="scheduled",le="+Inf"}} 10
{ATTEMPT_SECONDS}_sum{{profile="gang-extender",result="scheduled"}} 0.05
{ATTEMPT_SECONDS}_count{{profile="gang-extender",result="scheduled"}} 10
{ATTEMPT_SECONDS}_bucket{{profile="gang-extender",result="unschedulable",le="0.001"}} 0
{ATTEMPT_SECONDS}_bucket{{profile="gang-extender",result="unschedulable",le="0.002"}} 0
{ATTEMPT_SECONDS}_bucket{{profile="gang-extender",result="unschedulable",le="0.004"}} 10
{ATTEMPT_SECONDS}_bucket{{profile="gang-extender",result="unschedulable",le="+Inf"}} 10
{ATTEMPT_SECONDS}_sum{{profile="gang-extender",result="unschedulable"}} 0.03
{ATTEMPT_SECONDS}_count{{profile="gang-extender",result="unschedulable"}} 10
{ATTEMPT_SECONDS}_bucket{{profile="default-scheduler",result="scheduled",le="0.001"}} 100
{ATTEMPT_SECONDS}_bucket{{profile="default-scheduler",result="scheduled",le="+Inf"}} 100
{ATTEMPT_SECONDS}_sum{{profile="default-scheduler",result="scheduled"}} 0.01
{ATTEMPT_SECONDS}_count{{profile="default-scheduler",result="scheduled"}} 100
scheduler_scheduling_algorithm_duration_seconds_count{{profile="gang-extender"}} 99
"""


def test_the_histogram_sums_every_result_of_one_profile_and_nothing_else() -> None:
    found = histogram(METRICS, ATTEMPT_SECONDS, {"profile": "gang-extender"})
    assert found == {
        "0.001": 1.0,
        "0.002": 6.0,
        "0.004": 19.0,
        "+Inf": 20.0,
        "sum": pytest.approx(0.08),
        "count": 20.0,
    }
    assert histogram(METRICS, ATTEMPT_SECONDS, {"profile": "nobody"}) == {}


def test_attempts_between_two_readings_are_their_difference_with_bucket_bound_quantiles() -> None:
    before = histogram(METRICS, ATTEMPT_SECONDS, {"profile": "gang-extender"})
    after = dict(before)
    # 10 more attempts: 9 under 2 ms, 1 past the last finite bucket
    after.update({"0.001": 1, "0.002": 15, "0.004": 28, "+Inf": 30, "count": 30, "sum": 0.18})
    got = between(before, after)
    assert got["attempts"] == 10
    assert got["mean_ms"] == pytest.approx(10.0)
    assert got["p50_le_ms"] == 2.0
    assert got["p99_le_ms"] is None  # in +Inf: no upper bound, not a made-up one...
    assert got["p99_gt_ms"] == 4.0  # ...only the bound it is past


def test_no_attempts_between_readings_gives_no_figures() -> None:
    same = histogram(METRICS, ATTEMPT_SECONDS, {"profile": "gang-extender"})
    assert between(same, same) == {
        "attempts": 0.0,
        "mean_ms": None,
        "p50_le_ms": None,
        "p99_le_ms": None,
    }


SERVICE = "gang_extender_request_duration_seconds"


def service_text(filter_buckets: list[int], bind_buckets: list[int]) -> str:
    """The service's request histogram (its buckets 0.5 ms, 1 ms, 60 s, +Inf here)."""
    lines = []
    for verb, counts in (("filter", filter_buckets), ("bind", bind_buckets)):
        for le, count in zip(("0.0005", "0.001", "60.0", "+Inf"), counts, strict=True):
            lines.append(f'{SERVICE}_bucket{{le="{le}",verb="{verb}"}} {count}.0')
        lines.append(f'{SERVICE}_count{{verb="{verb}"}} {counts[-1]}.0')
        lines.append(f'{SERVICE}_sum{{verb="{verb}"}} {counts[-1] * 0.001}')
        lines.append(f'{SERVICE}_created{{verb="{verb}"}} 1.7e9')
    return "\n".join(lines) + "\n"


def test_the_services_verbs_are_read_as_the_schedulers_attempts_are() -> None:
    """Per verb: requests between the readings, p50/p99 as the bucket bounds holding
    them (0.5 ms kept as it is), past the last finite bound only that bound."""

    def read(text: str) -> dict[str, dict[str, float]]:
        return {verb: histogram(text, SERVICE, {"verb": verb}) for verb in ("filter", "bind")}

    before = read(service_text([0, 0, 0, 0], [0, 0, 0, 0]))
    after = read(service_text([60, 99, 100, 100], [0, 0, 90, 100]))
    got = verb_latency(before, after)
    assert got is not None
    assert got["filter"] == {
        "requests": 100.0,
        "mean_ms": 1.0,
        "p50_le_ms": 0.5,
        "p99_le_ms": 1.0,
    }
    assert got["bind"]["requests"] == 100.0
    assert got["bind"]["p50_le_ms"] == 60000.0
    assert got["bind"]["p99_le_ms"] is None and got["bind"]["p99_gt_ms"] == 60000.0
    assert verb_latency(None, after) is None and verb_latency(before, None) is None


def _timed(bound: dict[str, float], nodes: dict[str, str], seconds: float) -> dict[str, Any]:
    created = {n: 0.0 for n in [*bound, "g001-1"]}
    return {"bound_at": bound, "node_of": nodes, "created_at": created, "seconds": seconds}


def test_gang_figures_count_a_gang_with_some_members_bound_as_partial() -> None:
    pods = [{"metadata": {"name": f"g00{g}-{m}"}} for g in range(2) for m in range(2)]
    bound = {"g000-0": 0.5, "g000-1": 1.0, "g001-0": 2.0}  # g001-1 never bound
    got = gang_figures(pods, _timed(bound, {"g000-0": "a", "g000-1": "b", "g001-0": "a"}, 2.0), 8)
    assert got["gangs"] == 2
    assert got["gangs_complete"] == 1
    assert got["gangs_partially_bound"] == 1
    assert got["gangs_per_second"] == 0.5
    assert got["gang_create_to_all_bound"]["p50_ms"] == 1000.0
    spanned = got["nodes_spanned"]
    assert (spanned["max"], spanned["fewest_possible"], spanned["gangs_above_fewest"]) == (2, 1, 1)


def test_a_gang_whose_last_binds_land_just_after_the_bound_is_neither_partial_nor_complete() -> (
    None
):
    pods = [{"metadata": {"name": f"g00{g}-{m}"}} for g in range(2) for m in range(2)]
    bound = {"g000-0": 0.5, "g000-1": 1.0, "g001-0": 2.0}
    timed = _timed(bound, {"g000-0": "a", "g000-1": "a", "g001-0": "a"}, 2.0)
    timed["bound_after_cut"] = ["g001-1"]  # seen within the settle window
    got = gang_figures(pods, timed, 8)
    assert (got["gangs_complete"], got["gangs_partially_bound"]) == (1, 0)


def test_a_gang_that_began_binding_after_the_bound_is_not_judged() -> None:
    pods = [{"metadata": {"name": f"g00{g}-{m}"}} for g in range(2) for m in range(2)]
    bound = {"g000-0": 0.5, "g000-1": 1.0}
    timed = _timed(bound, {"g000-0": "a", "g000-1": "a"}, 2.0)
    # g001 began binding in the settle window, its last bind after the window's end.
    timed["bound_after_cut"] = ["g001-0"]
    got = gang_figures(pods, timed, 8)
    assert (got["gangs_complete"], got["gangs_partially_bound"]) == (1, 0)


def test_the_fewest_nodes_of_a_gang_is_its_gpus_over_a_node_rounded_up() -> None:
    assert fewest_nodes(3, 1, 8) == 1
    assert fewest_nodes(8, 1, 8) == 1
    assert fewest_nodes(9, 1, 8) == 2
    assert fewest_nodes(4, 4, 8) == 2


def _run(gangs_per_second: float, p50: float, p99: float, **kw: Any) -> dict[str, Any]:
    return {
        "complete": True,
        "gangs": 20,
        "gangs_complete": 20,
        "gangs_partially_bound": 0,
        "gangs_per_second": gangs_per_second,
        "seconds": 20 / gangs_per_second,
        "gang_create_to_all_bound": {"p50_ms": p50, "p99_ms": p99},
        **kw,
    }


def test_ratios_are_ours_over_theirs_against_each_target_and_a_miss_is_a_miss() -> None:
    runs = {
        "gang-extender": _run(3.0, 100, 900),
        "upstream": _run(4.0, 200, 800),
        "coscheduling": _run(1.5, 300, 1000),
    }
    vs = compare(runs)
    assert vs["upstream"]["ratio"] == 0.75
    assert vs["upstream"]["met"] is False
    assert vs["upstream"]["latency_not_worse"] == {"p50_ms": True, "p99_ms": False}
    assert vs["coscheduling"]["ratio"] == 2.0
    assert vs["coscheduling"]["met"] is True


def test_a_scheduler_that_could_not_run_gets_its_reason_not_a_ratio() -> None:
    runs = {
        "gang-extender": _run(3.0, 100, 900),
        "upstream": {"unsupported": "kube-apiserver does not serve scheduling.k8s.io/v1beta1"},
        "coscheduling": {**_run(1.5, 300, 1000), "complete": False, "gangs_complete": 19},
    }
    vs = compare(runs)
    assert vs["upstream"]["ratio"] is None
    assert "does not serve" in vs["upstream"]["reason"]
    assert vs["coscheduling"]["ratio"] is None
    assert vs["coscheduling"]["reason"] == "coscheduling incomplete: 19/20 gangs bound"
    assert usable(None) == "not run"


def _gang_results() -> dict[str, Any]:
    attempt = {"pod": {"attempts": 160.0, "mean_ms": 3.0, "p50_le_ms": 2.0, "p99_le_ms": 16.0}}
    runs = {
        "gang-extender": _run(3.0, 100, 900, attempt_latency=attempt, partial_gangs_counted=0.0),
        "upstream": _run(
            2.0,
            150,
            950,
            gangs_partially_bound=1,
            attempt_latency={
                "pod": {**attempt["pod"], "p99_le_ms": None, "p99_gt_ms": 16384.0},
                "podgroup": {**attempt["pod"], "attempts": 20.0},
            },
        ),
        "coscheduling": {"error": "RuntimeError('canary')"},
    }
    for run in runs.values():
        run.setdefault("nodes_spanned", {"mean": 1.0, "max": 1, "fewest_possible": 1})
    case = {"case": "gang", "nodes": 40, "gangs": 20, "gang_size": 8, "runs": runs}
    case["vs"] = compare(runs)
    return {
        "gpus_per_node": 8,
        "nodes": 40,
        "gangs": 20,
        "gang_size": 8,
        "cases": [case, {**copy.deepcopy(case), "case": "preemption"}],
        "runs": runs,
        "locality": None,
        "ratio": None,
    }


def test_the_table_has_every_scheduler_per_case_with_ratios_reasons_and_partial_gangs() -> None:
    lines = three_way(_gang_results())
    rows = [line for line in lines if line.startswith("| gang |")]
    assert [r.split(" | ")[3] for r in rows] == ["gang-extender", "upstream", "coscheduling"]
    ours, upstream, cosched = rows
    assert "| 3.00 |" in ours and "2 / 16 (n=160)" in ours and "0 (counted 0)" in ours
    assert "2 / > 16384 (n=160)" in upstream
    assert "1.50x (target >= 1x: met)" in upstream
    assert "| 1 |" in upstream  # its partial gang is shown, not hidden
    assert "cannot: failed: RuntimeError('canary')" in cosched
    assert any("pod-group attempt" in line and "20 attempts" in line for line in lines)
    assert len([line for line in lines if line.startswith("| preemption |")]) == 3


def test_a_run_whose_cleanup_failed_keeps_its_figures_and_says_so() -> None:
    gang = _gang_results()
    gang["cases"][0]["runs"]["gang-extender"]["error_after"] = "TimeoutError('pods deleted')"
    (ours,) = [line for line in three_way(gang) if line.startswith("| gang | 40 | 20 x 8 | gang-")]
    assert "20/20 (then failed: TimeoutError('pods deleted'))" in ours
    assert "| 3.00 |" in ours


def test_partial_gangs_of_every_case_and_scheduler_are_summed() -> None:
    results = {"gang": _gang_results()}
    # two cases, each with one partial upstream gang; the failed run adds nothing
    assert partial_by_workload(results)["gang"] == (2, 0.0)


def test_a_scale_that_failed_shows_its_reason_for_every_scheduler_and_case() -> None:
    cfg = GangConfig(gangs=20, size=8, nodes=40, gpus_per_node=8, timeout=60, preemption=True)
    cases = failed_scale(cfg, 5000, 1000, "RuntimeError('nodes not Ready')")
    assert [c["case"] for c in cases] == ["gang", "preemption"]
    gang = {**_gang_results(), "cases": cases}
    rows = [line for line in three_way(gang) if line.startswith("| gang | 5000 |")]
    assert len(rows) == 3
    assert all("cannot: failed: RuntimeError('nodes not Ready')" in row for row in rows)
    assert cases[0]["vs"]["upstream"]["reason"].startswith("gang-extender failed: RuntimeError")
    assert partial_by_workload({"gang": gang}) == {}  # nothing ran: nothing to count


def test_the_targets_take_the_worst_ratio_of_the_cases_that_have_one() -> None:
    gang = _gang_results()
    gang["cases"][1]["vs"]["upstream"] = {**gang["cases"][1]["vs"]["upstream"], "ratio": 0.8}
    assert worst_ratio(gang, "upstream") == 0.8
    assert worst_ratio(gang, "coscheduling") is None  # no case has one: not measured


def test_results_md_shows_the_three_way_section() -> None:
    results = {
        "meta": {
            "started": "2026-11-28 05:00:00 UTC",
            "mode": "quick",
            "config": {},
            "workloads": ["gang"],
            "machine": {"cpus": 2, "cpu_model": "x", "memory_gb": 8, "python": "3"},
            "commit": "abc",
            "duration_s": 1.0,
        },
        "gang": _gang_results(),
    }
    results["gang"]["runs"]["gang-extender"]["service_verbs"] = {
        "filter": {"requests": 165.0, "mean_ms": 0.63, "p50_le_ms": 0.5, "p99_le_ms": 5.0},
        "bind": {
            "requests": 160.0,
            "mean_ms": 61e3,
            "p50_le_ms": 60000.0,
            "p99_le_ms": None,
            "p99_gt_ms": 60000.0,
        },
    }
    text = markdown(results)
    assert "| gangs | filter | 165 | 0.63 | 0.50 / 5.00 |" in text
    assert "| gangs | bind | 160 | 61000.00 | 60000.00 / > 60000.00 |" in text
    assert "Kubernetes' own gang scheduling vs coscheduling" in text
    assert "| gang | 40 | 20 x 8 | upstream |" in text
    assert any(
        "Kubernetes' own gang scheduling, worst case" in line and "| met |" in line
        for line in text.splitlines()
    )


def test_upstream_members_name_their_podgroup_only_in_scheduling_group() -> None:
    sched = Scheduler("upstream", "default-scheduler", "scheduling.k8s.io/v1beta1")
    podgroups, pods = sched.bodies(2, 3, "gang", priority_class="high")
    plain_groups, _ = sched.bodies(1, 3, "gang")
    assert plain_groups[0] == upstream_podgroup(
        "g000", 3, {"bench.gang-extender.io/workload": "gang"}
    )
    # the group carries its members' priority class (1.37 refuses a mismatch)
    assert podgroups[0]["spec"] == {
        "schedulingPolicy": {"gang": {"minCount": 3}},
        "priorityClassName": "high",
    }
    assert len(pods) == 6
    spec = pods[4]["spec"]
    assert spec["schedulingGroup"] == {"podGroupName": "g001"}
    assert spec["schedulerName"] == "default-scheduler"
    assert spec["priorityClassName"] == "high"
    assert set(pods[4]["metadata"]["labels"]) == {"bench.gang-extender.io/workload"}


def test_only_1_37_and_later_serve_the_v1beta1_workload_api() -> None:
    assert serves_v1beta1("v1.37.2")
    assert serves_v1beta1("v1.40.0")
    assert not serves_v1beta1("v1.35.4")
    assert not serves_v1beta1("unknown")


APISERVER_METRICS = """\
# HELP apiserver_request_total [STABLE] Counter of apiserver requests
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 160
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="binding",verb="POST",version="v1"} 150
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="PATCH",version="v1"} 40
apiserver_request_total{code="409",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="PATCH",version="v1"} 7
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="namespace",subresource="",verb="LIST",version="v1"} 9
apiserver_request_total{code="201",component="apiserver",dry_run="",group="events.k8s.io",resource="events",scope="resource",subresource="",verb="POST",version="v1"} 3
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="events",scope="resource",subresource="",verb="POST",version="v1"} 2
"""


class _MetricsApi:
    def __init__(self, text: str, status: int = 200) -> None:
        self.text, self.status = text, status

    def request(self, method: str, path: str) -> tuple[int, bytes]:
        assert (method, path) == ("GET", "/metrics")
        return self.status, self.text.encode()


class _Env:
    def __init__(self, api: _MetricsApi) -> None:
        self.api = api


def test_api_writes_count_successful_writes_by_verb_and_resource_of_every_group() -> None:
    found = api_writes(_Env(_MetricsApi(APISERVER_METRICS)))  # type: ignore[arg-type]
    # Reads (LIST) and refused writes (409) are not writes the API server made.
    assert found == {
        "POST pods": 160.0,
        "POST pods/binding": 150.0,
        "PATCH pods": 40.0,
        "POST events": 5.0,  # core/v1 and events.k8s.io together
    }
    assert api_writes(_Env(_MetricsApi("", status=403))) is None  # type: ignore[arg-type]
    later = {**found, "POST pods": 170.0, "PATCH pods": 40.0}
    assert writes_between(found, later) == {"POST pods": 10.0}
    assert writes_between(None, later) is None


def test_the_cost_per_pod_table_shows_writes_and_service_cpu_per_pod() -> None:
    results = _gang_results()
    ours = results["cases"][0]["runs"]["gang-extender"]
    ours.update(
        pods=160,
        api_writes={"POST pods": 160.0, "POST pods/binding": 160.0, "PATCH pods": 80.0},
        api_writes_per_pod=2.5,
        service_cpu_seconds=1.6,
        filter_candidates={"filters": 200.0, "one_node": 150.0, "mean_nodes": 10.8},
        process_cpu_seconds={"kube-apiserver": 4.0, "etcd": 0.8, "gang-scheduler": 0.4},
    )
    lines = cost_per_pod(results)
    [row] = [line for line in lines if line.startswith("| gang |")]
    assert row == (
        "| gang | 40 | gang-extender | 2.50 | POST pods 1.00, POST pods/binding 1.00, "
        "PATCH pods 0.50 | 10.0 | 200 / 150 / 10.8 | kube-apiserver 25.0, etcd 5.0, "
        "gang-scheduler 2.5 |"
    )
    assert any(line.startswith("What a run cost") for line in three_way(results))


def test_filters_are_counted_with_those_that_offered_one_node() -> None:
    before = {"1.0": 4.0, "2.0": 4.0, "+Inf": 10.0, "count": 10.0, "sum": 1_006.0}
    after = {"1.0": 154.0, "2.0": 160.0, "+Inf": 210.0, "count": 210.0, "sum": 3_166.0}
    assert common.candidate_figures(before, after) == {
        "filters": 200.0,
        "one_node": 150.0,
        "mean_nodes": 10.8,
    }
    assert common.candidate_figures(before, before) == {
        "filters": 0.0,
        "one_node": 0.0,
        "mean_nodes": 0.0,
    }
    assert common.candidate_figures(None, after) is None


def test_writes_are_read_once_queued_events_and_annotations_stop_coming(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(common, "WRITES_POLL_SECONDS", 0.001)
    monkeypatch.setattr(common, "WRITES_QUIET_SECONDS", 0.01)
    # Events still being written after the last bind, then none; node heartbeats go on.
    readings = iter([3, 5, 8, 8, 8] + [8] * 10_000)
    heartbeats = iter(range(10_000))

    def read(_env: object) -> dict[str, float]:
        return {"POST events": float(next(readings)), "PATCH nodes": float(next(heartbeats))}

    monkeypatch.setattr(common, "api_writes", read)
    assert common.settled_writes(object())["POST events"] == 8.0  # type: ignore[arg-type,index]


def test_each_process_cpu_is_counted_over_the_run_and_a_restarted_one_from_its_start() -> None:
    before = {"kube-apiserver": (10, 100.0), "gang-extender": (20, 5.0), "kwok": (30, 7.0)}
    after = {
        "kube-apiserver": (10, 130.5),
        "gang-extender": (21, 2.0),  # restarted during the run: its new pid from 0
        "kwok": (30, 7.004),  # idle: left out
        "etcd": (40, 3.0),  # not read before: all of it
    }
    assert cpu_between(before, after) == {"kube-apiserver": 30.5, "etcd": 3.0, "gang-extender": 2.0}
    assert list(cpu_between(before, after)) == ["kube-apiserver", "etcd", "gang-extender"]
