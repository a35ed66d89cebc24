"""The churn workload's arithmetic: CPU per event from idle and churn windows."""

from __future__ import annotations

from bench.workloads.churn import cpu_per_event, growth_ratio, median_cpu_per_event


def test_a_window_less_its_idle_rate_per_event_in_milliseconds() -> None:
    # 3 s of CPU in a 20 s window, idle rate 0.05 cores: 2 s for 400 events
    assert (
        cpu_per_event(cpu_window_s=3.0, window_s=20.0, idle_cpu_s=0.3, idle_s=6.0, events=400)
        == 5.0
    )
    assert (
        cpu_per_event(cpu_window_s=1.0, window_s=20.0, idle_cpu_s=2.0, idle_s=10.0, events=100)
        == -30.0
    )
    assert (
        cpu_per_event(cpu_window_s=1.0, window_s=1.0, idle_cpu_s=0.0, idle_s=0.0, events=1) is None
    )
    assert (
        cpu_per_event(cpu_window_s=1.0, window_s=1.0, idle_cpu_s=0.0, idle_s=1.0, events=0) is None
    )


def test_one_round_with_a_resync_in_it_does_not_move_the_median() -> None:
    calm = (1.0, 5.0, 0.5, 5.0, 100)  # 0.5 s for 100 events: 5 ms each
    resync_in_idle = (1.0, 5.0, 1.5, 5.0, 100)  # -5 ms
    resync_in_churn = (2.0, 5.0, 0.5, 5.0, 100)  # 15 ms
    assert median_cpu_per_event([calm, resync_in_idle, calm, calm]) == 5.0
    assert median_cpu_per_event([calm, resync_in_churn, calm]) == 5.0
    assert median_cpu_per_event([resync_in_idle, calm, calm, resync_in_churn]) == 5.0
    assert median_cpu_per_event([resync_in_idle, resync_in_churn]) == 5.0
    assert median_cpu_per_event([(1.0, 5.0, 0.0, 0.0, 10)]) is None
    assert median_cpu_per_event([]) is None


def test_growth_is_judged_only_between_figures_above_the_noise() -> None:
    assert growth_ratio(2.0, 3.0) == 1.5
    assert growth_ratio(-1.0, 3.0) is None
    assert growth_ratio(2.0, 0.0) is None
    assert growth_ratio(None, 3.0) is None
