"""Per-pod and per-gang timelines read from a kube-scheduler log (-v=3 or more).

Where a gang member's wait goes: from its arrival in the scheduler's queue
("Add event for unscheduled pod") through each attempt ("Attempting to schedule
pod"), each refusal ("Unable to schedule pod"), to "Successfully bound pod". Per
gang, the wait splits into creation (first member seen -> last member seen: the
gang is complete only then), wake-up (complete -> the first attempt that ends
bound: kube-scheduler's queue and backoff) and binding (that attempt -> last
member bound: filter, prioritize and bind through the extender, the barrier).

    python -m bench.timeline .dev/bench/cluster/logs/gang-scheduler.log --namespace bench-gang-gang-extender

Only a profiling aid: the bench's own figures come from the API server's watch.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

# klog text header: I1127 22:20:01.123456   12345 file.go:117] "message" key="value" ...
LINE = re.compile(r'^[IWE](\d{4}) (\d\d:\d\d:\d\d\.\d+)\s+\d+ \S+\] "([^"]+)"(.*)$')
POD = re.compile(r'\bpod="([^"]+)"')
EVENTS = {
    "Add event for unscheduled pod": "seen",
    "Attempting to schedule pod": "attempt",
    "Unable to schedule pod; no fit; waiting": "refused",
    "Successfully bound pod to node": "bound",
}


@dataclass
class PodTimeline:
    seen: float | None = None
    attempts: list[float] = field(default_factory=list)
    refusals: list[float] = field(default_factory=list)
    bound: float | None = None


def _seconds(clock: str) -> float:
    t = datetime.strptime(clock, "%H:%M:%S.%f")
    return t.hour * 3600 + t.minute * 60 + t.second + t.microsecond / 1e6


def read(path: Path, namespace: str) -> dict[str, PodTimeline]:
    pods: dict[str, PodTimeline] = defaultdict(PodTimeline)
    prefix = namespace + "/"
    for line in path.read_text(errors="replace").splitlines():
        match = LINE.match(line)
        if match is None or match.group(3) not in EVENTS:
            continue
        pod = POD.search(match.group(4))
        if pod is None or not pod.group(1).startswith(prefix):
            continue
        t = _seconds(match.group(2))
        entry = pods[pod.group(1)[len(prefix) :]]
        kind = EVENTS[match.group(3)]
        if kind == "seen":
            entry.seen = t if entry.seen is None else min(entry.seen, t)
        elif kind == "attempt":
            entry.attempts.append(t)
        elif kind == "refused":
            entry.refusals.append(t)
        elif entry.bound is None:
            entry.bound = t
    return pods


def _ms(values: list[float]) -> str:
    if not values:
        return "-"
    values = sorted(values)
    p99 = values[min(len(values) - 1, int(round(0.99 * (len(values) - 1))))]
    return f"p50 {statistics.median(values) * 1000:.0f} p99 {p99 * 1000:.0f} ms"


def report(pods: dict[str, PodTimeline]) -> str:
    gangs: dict[str, list[PodTimeline]] = defaultdict(list)
    for name, entry in pods.items():
        gangs[name.rsplit("-", 1)[0]].append(entry)
    creation, wake, binding, total = [], [], [], []
    refusals: list[int] = []
    for members in gangs.values():
        if any(m.seen is None or m.bound is None or not m.attempts for m in members):
            continue
        first_seen = min(m.seen for m in members if m.seen is not None)
        complete = max(m.seen for m in members if m.seen is not None)
        # the attempt that ended bound is each member's last one
        final = min(m.attempts[-1] for m in members)
        last_bound = max(m.bound for m in members if m.bound is not None)
        creation.append(complete - first_seen)
        wake.append(max(0.0, final - complete))
        binding.append(last_bound - final)
        total.append(last_bound - first_seen)
        refusals.extend(len(m.refusals) for m in members)
    per_pod_attempts = [len(p.attempts) for p in pods.values()]
    lines = [
        f"pods {len(pods)}, gangs {len(gangs)} ({len(total)} complete in the log)",
        f"attempts per pod: mean {statistics.fmean(per_pod_attempts or [0]):.2f}, "
        f"max {max(per_pod_attempts or [0])}",
        f"refusals per member: mean {statistics.fmean(refusals or [0]):.2f}, "
        f"max {max(refusals or [0])}; members refused at least once: "
        f"{sum(1 for r in refusals if r)}/{len(refusals)}",
        f"gang first seen -> last member seen (creation): {_ms(creation)}",
        f"last member seen -> first final attempt (queue, backoff): {_ms(wake)}",
        f"first final attempt -> last member bound (extender, bind): {_ms(binding)}",
        f"first seen -> last bound (scheduler's view of create -> all bound): {_ms(total)}",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("log", type=Path)
    p.add_argument("--namespace", required=True)
    args = p.parse_args(argv)
    print(report(read(args.log, args.namespace)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
