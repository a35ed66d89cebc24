"""Workload 4: held gangs + node churn: the service's CPU per cluster event.

Issue 15's target: with many gangs held (they cannot fit), a cluster event that
cannot help any of them costs the service O(1) in the number of held gangs (a
memo keyed on each gang's inputs), not a re-plan of every held gang at O(nodes).

Set-up: `nodes` cache-only nodes of 8 GPUs (plain Node objects, no kubelet, as in
the latency workload), filled by bound pods (`spec.nodeName`) so that exactly one
GPU is free in the whole cluster, and gangs of two 1-GPU members: each member
alone would fit on the node with the free GPU, the gang never does. Nothing can
bind. The gangs starve after a second (`STARVATION_SECONDS`): at every level the
head of the queue holds a starvation reservation, as it would in a cluster where
gangs have waited that long.

The bench plays kube-scheduler, as in the latency workload (the gang-extender
kube-scheduler profile is stopped): a cluster event is one node update that
cannot help (alternately a label change and an allocatable-CPU change on a node
whose GPUs are all taken) followed by one `/filter` for a member of a held gang
(the next one each time) with every node a candidate: the "member event after a
cluster change" that re-planned a held gang at O(nodes). Kube-scheduler itself
retries every unschedulable pod on a node update (one quick run: ~24 filters per
node event with 20 held gangs), so a real cluster pays this per-event cost times
its retries.

At each number of held gangs (`held`, ascending; the gangs of a level stay for
the next), once the service's watch has the new gangs:

- idle windows: the service's CPU time (utime + stime from /proc/<pid>/stat)
  with nothing happening (`idle_seconds` in all): its background rate;
- churn windows: `events` cluster events in all at `rate` per second (bounded
  by `max_seconds`), each window followed by `tail_seconds` for the work they
  set off; the service's CPU in them less the idle rate over the same time, per
  event. The two kinds are interleaved in `rounds` pairs, in ABBA order, so a
  background that changes during the level weighs on both alike. Each round
  gives one figure (its churn window less its own idle window's rate); the level's
  figure is their median, so a status resync (every 30 s) landing in one window
  does not carry its whole cost into it.

O(1) shows as the same CPU per event at every level; O(held gangs) as CPU per
event growing with the level.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from bench.env import CREATE_WORKERS, BenchEnv
from bench.kubeclient import bulk, pods_path, wait_for
from bench.objects import UNSERVED_SCHEDULER, gang_member, pod_body
from bench.service import ExtenderClient, extender_args
from bench.stats import summary_ms
from bench.workloads.common import (
    PARTIAL_GANGS_METRIC,
    clear,
    observed_partial_gangs,
    service_metric,
)
from extender.domain.objects.membership import GROUP_LABEL
from extender.domain.objects.model import STARVATION_ANNOTATION

log = logging.getLogger("bench.churn")

WORKLOAD = "churn"
GANG_SIZE = 2
GPUS_PER_NODE = 8
CHURN_LABEL = "bench.gang-extender.io/churn"
MERGE_PATCH = "application/merge-patch+json"
#: A /filter at 1,000 held gangs x 1,000 nodes may re-plan every held gang: allow it.
FILTER_TIMEOUT_SECONDS = 300.0
#: The service is quiet (the watch has digested the new gangs) under this many
#: CPUs over a second, or after this long.
QUIET_CORES = 0.2
QUIET_TIMEOUT_SECONDS = 30.0
#: Every level is measured with the head of the queue starving (it reserves the node
#: with the free GPU, and each filter of a gang behind it re-plans it): with the
#: default 60 s the first level's gangs started to starve during the second level
#: only, which added that cost to the larger level (7-15 ms per event) and made the
#: levels differ in more than their held gangs.
STARVATION_SECONDS = 1
#: The service's answer for a member its watch has not delivered yet.
NOT_IN_CACHE = "not in gang-extender's watch cache yet"


@dataclass
class ChurnConfig:
    held: tuple[int, ...]  # numbers of held gangs measured, ascending
    nodes: int
    events: int  # node updates per level
    rate: float  # node updates per second
    idle_seconds: float = 10.0  # in all, over the rounds
    rounds: int = 4  # idle/churn window pairs, interleaved
    tail_seconds: float = 1.0
    max_seconds: float = 120.0  # bound on each churn window
    timeout: float = 300.0  # bound on each wait for the service's watch


def cpu_per_event(
    *,
    cpu_window_s: float,
    window_s: float,
    idle_cpu_s: float,
    idle_s: float,
    events: int,
) -> float | None:
    """Milliseconds of CPU per event: the window's CPU less the idle rate over it.

    Negative differences (the idle window happened to be the busier one) are kept:
    they say the events cost less than the noise, which a clamp to 0 would hide.
    """
    if events <= 0 or idle_s <= 0:
        return None
    attributable = cpu_window_s - idle_cpu_s / idle_s * window_s
    return round(attributable / events * 1000, 3)


def median_cpu_per_event(rounds: Sequence[tuple[float, float, float, float, int]]) -> float | None:
    """The median over rounds of `cpu_per_event`, each round's churn window less its own
    idle window's rate; `rounds` holds (cpu_window_s, window_s, idle_cpu_s, idle_s,
    events) per round.

    Why the median: a status resync (every 30 s) lands in one window of one round,
    and pooled windows carry it whole into the figure; one round's outlier does not
    move a median of four.
    """
    figures = sorted(
        figure
        for cpu, window, idle_cpu, idle, events in rounds
        if (
            figure := cpu_per_event(
                cpu_window_s=cpu, window_s=window, idle_cpu_s=idle_cpu, idle_s=idle, events=events
            )
        )
        is not None
    )
    if not figures:
        return None
    middle = len(figures) // 2
    if len(figures) % 2:
        return figures[middle]
    return round((figures[middle - 1] + figures[middle]) / 2, 3)


def growth_ratio(fewest: float | None, most: float | None) -> float | None:
    """CPU per event at the most held gangs over that at the fewest; None unless both are
    above 0 (a value at or below 0 is within the idle rate's noise: no ratio to judge)."""
    if fewest is None or most is None or fewest <= 0 or most <= 0:
        return None
    return round(most / fewest, 2)


class ChurnWorkload:
    def __init__(self, env: BenchEnv, cfg: ChurnConfig) -> None:
        self.env = env
        self.cfg = cfg
        self.nodes: list[str] = []
        self.namespace = ""
        self.fill_namespace = ""
        self.gangs = 0
        self.patches = 0
        self.asked: list[dict[str, Any]] = []  # one member of each held gang, as created

    # ---- the service ----
    def _service_pid(self) -> int:
        stack = self.env.stack
        if stack.service is None or not stack.service.alive():
            # the gang workload stops the stack for its baseline
            stack.start_service(name="gang-extender-churn")
        assert stack.service is not None
        return stack.service.pid

    def _filter(self, client: ExtenderClient, pod: dict[str, Any]) -> tuple[float, dict[str, Any]]:
        took, status, data = client.post("filter", extender_args(pod, self.nodes))
        if status != 200:
            raise RuntimeError(f"/filter answered {status}: {data[:300]!r}")
        answer: dict[str, Any] = orjson.loads(data)
        if answer.get("NodeNames"):
            raise RuntimeError(f"a gang that cannot fit was offered nodes: {data[:500]!r}")
        return took, answer

    # ---- cluster contents ----
    def _fill(self) -> None:
        """Every GPU taken but one: 8 on each node, 7 on the last."""
        env = self.env
        self.nodes = env.add_nodes(self.cfg.nodes, WORKLOAD, kwok=False, prefix="churn")
        fill_ns = self.fill_namespace = env.namespace("bench-churn-fill")
        last = len(self.nodes) - 1

        def create(i: int) -> None:
            body = pod_body(
                f"full-{i:05d}",
                WORKLOAD,
                scheduler=UNSERVED_SCHEDULER,
                gpus=GPUS_PER_NODE - (1 if i == last else 0),
                node_name=self.nodes[i],
            )
            env.api.create(pods_path(fill_ns), body)

        result = bulk(range(len(self.nodes)), create, workers=CREATE_WORKERS)
        if result.errors:
            raise RuntimeError(f"filling nodes: {result.errors} failed: {result.first_error}")
        log.info("filled %d nodes (1 GPU left) in %.1fs", len(self.nodes), result.seconds)

    def _add_gangs(self, upto: int, client: ExtenderClient) -> dict[str, Any]:
        """Create gangs up to `upto`; wait until the service's watch has the last one."""
        env, cfg = self.env, self.cfg
        bodies = [
            gang_member(
                f"h{g:05d}-{m}",
                f"h{g:05d}",
                GANG_SIZE,
                WORKLOAD,
                annotations={STARVATION_ANNOTATION: str(STARVATION_SECONDS)},
            )
            for g in range(self.gangs, upto)
            for m in range(GANG_SIZE)
        ]
        made: dict[str, dict[str, Any]] = {}

        def create(body: dict[str, Any]) -> None:
            obj = env.api.create(pods_path(self.namespace), body)
            made[obj["metadata"]["name"]] = obj

        started = time.monotonic()
        result = bulk(bodies, create, workers=CREATE_WORKERS)
        if result.errors:
            raise RuntimeError(f"held gangs: {result.errors} creates failed: {result.first_error}")
        self.asked += [made[f"h{g:05d}-0"] for g in range(self.gangs, upto)]
        self.gangs = upto
        last = self.asked[-1]
        first_filter: list[float] = []

        def seen_by_watch() -> bool:
            took, answer = self._filter(client, last)
            first_filter.append(took)
            return NOT_IN_CACHE not in orjson.dumps(answer).decode()

        wait_for(
            seen_by_watch, timeout=cfg.timeout, what=f"the service's watch to have {upto} gangs"
        )
        return {
            "created_s": round(result.seconds, 1),
            "seen_s": round(time.monotonic() - started, 1),
            # the first filter after the new gangs: every held gang is new to the queue
            "first_filter_ms": round(first_filter[-1] * 1000, 1),
        }

    def _patch(self, i: int) -> None:
        """One node update that cannot help a held gang (all the node's GPUs are taken)."""
        node = self.nodes[i % (len(self.nodes) - 1)]  # never the node with the free GPU
        if i % 2 == 0:
            path = f"/api/v1/nodes/{node}"
            body: dict[str, Any] = {"metadata": {"labels": {CHURN_LABEL: str(i)}}}
        else:
            path = f"/api/v1/nodes/{node}/status"
            body = {"status": {"allocatable": {"cpu": "63" if (i // 2) % 2 == 0 else "64"}}}
        status, data = self.env.api.request("PATCH", path, body, content_type=MERGE_PATCH)
        if status != 200:
            raise RuntimeError(f"PATCH {path}: {status} {data[:300]!r}")
        self.patches += 1

    def _idle(self, pid: int, seconds: float) -> tuple[float, float]:
        """(seconds, service CPU seconds) over `seconds` with nothing happening."""
        cpu, started = self.env.cpu_seconds(pid), time.monotonic()
        time.sleep(seconds)
        return time.monotonic() - started, self.env.cpu_seconds(pid) - cpu

    def _wait_service_quiet(self, pid: int) -> float:
        """Wait (bounded) until the service uses under QUIET_CORES over a second."""
        started = time.monotonic()
        while time.monotonic() - started < QUIET_TIMEOUT_SECONDS:
            before = self.env.cpu_seconds(pid)
            time.sleep(1.0)
            if self.env.cpu_seconds(pid) - before < QUIET_CORES:
                break
        return time.monotonic() - started

    # ---- one level ----
    def measure(self, held: int, client: ExtenderClient) -> dict[str, Any]:
        env, cfg = self.env, self.cfg
        pid = self._service_pid()
        added = self._add_gangs(held, client)
        for pod in self.asked[:3]:  # warm: the memo of a few gangs before the clock starts
            self._filter(client, pod)

        # Idle and churn windows interleaved in ABBA order (idle, churn, churn, idle,
        # ...): a background that decays or grows over the level (the watch and the
        # status writes the new gangs set off) weighs the same on both sides.
        quiet_wait = self._wait_service_quiet(pid)
        filters: list[float] = []
        idle_s = idle_cpu = window_s = cpu = 0.0
        rounds: list[tuple[float, float, float, float, int]] = []
        done = 0
        per_round = max(1, -(-cfg.events // cfg.rounds))
        deadline = time.monotonic() + cfg.max_seconds
        for r in range(cfg.rounds):
            round_idle = round_cpu = (0.0, 0.0)
            round_events = done
            for step in ("idle", "churn") if r % 2 == 0 else ("churn", "idle"):
                if step == "idle":
                    took_s, used = self._idle(pid, cfg.idle_seconds / cfg.rounds)
                    idle_s, idle_cpu = idle_s + took_s, idle_cpu + used
                    round_idle = (used, took_s)
                    continue
                cpu0, t0 = env.cpu_seconds(pid), time.monotonic()
                for i in range(min(per_round, cfg.events - done)):
                    pause = t0 + i / cfg.rate - time.monotonic()
                    if pause > 0:
                        time.sleep(pause)
                    if time.monotonic() > deadline:
                        break
                    self._patch(self.patches)
                    took, _ = self._filter(client, self.asked[self.patches % len(self.asked)])
                    filters.append(took)
                    done += 1
                time.sleep(cfg.tail_seconds)
                round_cpu = (env.cpu_seconds(pid) - cpu0, time.monotonic() - t0)
                window_s += round_cpu[1]
                cpu += round_cpu[0]
            rounds.append((*round_cpu, *round_idle, done - round_events))
        per_event = median_cpu_per_event(rounds)
        result = {
            "held_gangs": held,
            "nodes": len(self.nodes),
            "events": done,
            "events_planned": cfg.events,
            "window_s": round(window_s, 2),
            "idle_s": round(idle_s, 2),
            "service_cpu_idle_s": round(idle_cpu, 3),
            "service_cpu_window_s": round(cpu, 3),
            "quiet_wait_s": round(quiet_wait, 1),
            "service_cpu_ms_per_event": per_event,
            # the windows pooled (how rounds before 8 reported it): one resync moves it
            "service_cpu_ms_per_event_pooled": cpu_per_event(
                cpu_window_s=cpu, window_s=window_s, idle_cpu_s=idle_cpu, idle_s=idle_s, events=done
            ),
            "service_cpu_ms_per_event_rounds": [
                cpu_per_event(cpu_window_s=c, window_s=w, idle_cpu_s=ic, idle_s=i, events=e)
                for c, w, ic, i, e in rounds
            ],
            # without the idle rate taken off: an upper bound, never negative
            "service_cpu_ms_per_event_raw": round(cpu / done * 1000, 3) if done else None,
            "filter_after_event": summary_ms(filters),
            **added,
        }
        log.info(
            "%d held gangs, %d nodes: %s ms service CPU per event; /filter p50 %s ms (%d events)",
            held,
            len(self.nodes),
            per_event,
            result["filter_after_event"].get("p50_ms"),
            done,
        )
        return result

    def run(self) -> dict[str, Any]:
        env, cfg = self.env, self.cfg
        # The bench asks the verbs itself: no kube-scheduler may retry the held members.
        if env.stack.scheduler is not None and env.stack.scheduler.alive():
            env.stack.scheduler.stop()
        self._service_pid()
        counted_before = service_metric(env, PARTIAL_GANGS_METRIC)
        self._fill()
        settle_wait = env.wait_nodes_settled()
        self.namespace = env.namespace("bench-churn")
        client = ExtenderClient(env, timeout=FILTER_TIMEOUT_SECONDS)
        try:
            levels = [self.measure(held, client) for held in sorted(cfg.held)]
        finally:
            client.close()
        # Nothing could bind: no held gang may have a member bound.
        partial = observed_partial_gangs(env, self.namespace, GROUP_LABEL)
        counted_after = service_metric(env, PARTIAL_GANGS_METRIC)
        clear(env, self.namespace)
        clear(env, self.fill_namespace)
        env.remove_nodes(WORKLOAD)
        first, last = levels[0], levels[-1]
        growth = growth_ratio(first["service_cpu_ms_per_event"], last["service_cpu_ms_per_event"])
        return {
            "nodes": cfg.nodes,
            "gang_size": GANG_SIZE,
            "rate_per_s": cfg.rate,
            "idle_seconds": cfg.idle_seconds,
            "node_settle_wait_s": round(settle_wait, 1),
            "levels": levels,
            # CPU per event at the most held gangs / at the fewest: ~1 when O(1)
            "growth": growth,
            "held_ratio": round(last["held_gangs"] / first["held_gangs"], 1),
            "partial_gangs": partial,
            "partial_gangs_counted": counted_after - counted_before
            if counted_after is not None and counted_before is not None
            else None,
        }
