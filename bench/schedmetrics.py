"""A kube-scheduler's own attempt latency, the same way for every scheduler in the bench.

Each scheduler process (the gang-extender profile's kube-scheduler, scheduler-plugins'
coscheduling, the default kube-scheduler with Kubernetes' gang scheduling) exposes
`scheduler_scheduling_attempt_duration_seconds` (stable: scheduling algorithm +
binding, one observation per pod attempt, labelled by result and profile). The bench
reads it before and after a run; the difference is that run's attempts. p50/p99 are
the upper bound of the bucket holding that rank (buckets 1 ms x 2^k, 15 of them), so
they are bucket bounds, not samples; the mean is exact. The gang-extender service's
own request histogram per verb is read the same way (bench/workloads/common.py).
"""

from __future__ import annotations

import re
import ssl
import urllib.request
from collections.abc import Mapping

ATTEMPT_SECONDS = "scheduler_scheduling_attempt_duration_seconds"
#: Kubernetes' own gang scheduling also times one attempt per pod group (alpha, 1.37).
PODGROUP_ATTEMPT_SECONDS = "scheduler_podgroup_scheduling_attempt_duration_seconds"
#: Flags that serve /metrics on loopback without credentials (the health paths are
#: open by default; /metrics is added). kube-scheduler makes itself a serving cert.
ALWAYS_ALLOW = "/healthz,/readyz,/livez,/metrics"

#: `name="value"` pairs of a Prometheus sample line (also bench/workloads/common.py).
LABEL_PAIRS = re.compile(r'(\w+)="([^"]*)"')

Histogram = dict[str, float]  # bucket upper bound ("+Inf" too) -> cumulative count, sum, count


def serving_flags(port: int) -> list[str]:
    return [
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        f"--authorization-always-allow-paths={ALWAYS_ALLOW}",
    ]


def scrape(port: int, timeout: float = 10) -> str:
    """The /metrics text of a scheduler started with `serving_flags(port)`."""
    context = ssl.create_default_context()
    # Loopback only, the scheduler's own throwaway self-signed certificate.
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    url = f"https://127.0.0.1:{port}/metrics"
    with urllib.request.urlopen(url, timeout=timeout, context=context) as resp:
        return str(resp.read().decode())


def histogram(text: str, name: str, match: Mapping[str, str] | None = None) -> Histogram:
    """The histogram `name` in Prometheus text, its series whose labels include `match`
    summed (e.g. every `result` of one `profile`)."""
    found: Histogram = {}
    for line in text.splitlines():
        if not line.startswith(name) or line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        series, _, _ = head.partition("{")
        labels = dict(LABEL_PAIRS.findall(head))
        if any(labels.get(k) != v for k, v in (match or {}).items()):
            continue
        if series == name + "_bucket":
            key = labels["le"]
        elif series == name + "_sum":
            key = "sum"
        elif series == name + "_count":
            key = "count"
        else:
            continue
        found[key] = found.get(key, 0.0) + float(value)
    return found


def _bound(le: str) -> float:
    return float("inf") if le == "+Inf" else float(le)


def between(
    before: Histogram, after: Histogram, *, count_key: str = "attempts"
) -> dict[str, float | None]:
    """Observations between two readings: their count (under `count_key`), mean ms,
    and p50/p99 ms as bucket upper bounds (rounded to the microsecond); past the last
    finite bucket, `p99_gt_ms` says which bound it exceeds."""
    count = after.get("count", 0.0) - before.get("count", 0.0)
    buckets = sorted(
        (
            (_bound(le), after[le] - before.get(le, 0.0))
            for le in after
            if le not in ("sum", "count")
        ),
        key=lambda b: b[0],
    )

    finite = [le for le, _ in buckets if le != float("inf")]

    def rank(q: float) -> float | None:
        for le, cumulative in buckets:
            if count and cumulative >= q * count:
                return None if le == float("inf") else round(le * 1000, 3)
        return None

    out: dict[str, float | None] = {
        count_key: count,
        "mean_ms": round((after.get("sum", 0.0) - before.get("sum", 0.0)) / count * 1000, 2)
        if count
        else None,
        "p50_le_ms": rank(0.5),
        "p99_le_ms": rank(0.99),
    }
    for q in ("p50", "p99"):
        if count and out[f"{q}_le_ms"] is None and finite:
            # past the last finite bucket: only a lower bound is known
            out[f"{q}_gt_ms"] = round(finite[-1] * 1000, 3)
    return out
