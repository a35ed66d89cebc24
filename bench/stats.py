"""Percentiles and summaries (nearest-rank, no interpolation: every figure is a real sample)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any


def percentile(samples: Sequence[float], q: float) -> float:
    """Nearest-rank percentile, q in [0, 100]."""
    if not samples:
        return float("nan")
    ordered = sorted(samples)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def summary_ms(seconds: Sequence[float]) -> dict[str, Any]:
    """n, p50, p90, p99, max and mean of durations given in seconds, reported in ms."""
    if not seconds:
        return {"n": 0}
    ms = [s * 1000 for s in seconds]
    return {
        "n": len(ms),
        "p50_ms": round(percentile(ms, 50), 3),
        "p90_ms": round(percentile(ms, 90), 3),
        "p99_ms": round(percentile(ms, 99), 3),
        "max_ms": round(max(ms), 3),
        "mean_ms": round(sum(ms) / len(ms), 3),
    }
