"""The three-way gang comparison (pure): ratios of gang-extender against each other
scheduler, and issue 31's targets per case, met or missed, never hidden."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

#: gangs per second, gang-extender over the other (issue 31)
THROUGHPUT_TARGETS = {"upstream": 1.0, "coscheduling": 1.5}
OURS = "gang-extender"


def fewest_nodes(size: int, gpus_per_member: int, gpus_per_node: int) -> int:
    """The fewest nodes a gang of `size` members can span on empty nodes."""
    return max(1, math.ceil(size * gpus_per_member / gpus_per_node))


def usable(run: Mapping[str, Any] | None) -> str | None:
    """Why a run gives no figure to compare (None when it does)."""
    if run is None:
        return "not run"
    if "unsupported" in run:
        return str(run["unsupported"])
    if "error" in run:
        return f"failed: {run['error']}"
    if not run.get("complete"):
        return f"incomplete: {run.get('gangs_complete', 0)}/{run.get('gangs')} gangs bound"
    return None


def compare(runs: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per other scheduler: throughput ratio (ours / theirs), its target and whether met,
    and whether our create -> all bound p50 and p99 are <= theirs. A side that has no
    figure gives None and the reason."""
    out: dict[str, dict[str, Any]] = {}
    ours = runs.get(OURS)
    for other, target in THROUGHPUT_TARGETS.items():
        theirs = runs.get(other)
        why_ours, why_theirs = usable(ours), usable(theirs)
        reason = (
            f"{OURS} {why_ours}" if why_ours else f"{other} {why_theirs}" if why_theirs else None
        )
        if reason or ours is None or theirs is None:
            out[other] = {"ratio": None, "target": target, "met": None, "reason": reason}
            continue
        ratio = (
            round(ours["gangs_per_second"] / theirs["gangs_per_second"], 3)
            if theirs["gangs_per_second"]
            else None
        )
        latency = {}
        for q in ("p50_ms", "p99_ms"):
            a = ours["gang_create_to_all_bound"].get(q)
            b = theirs["gang_create_to_all_bound"].get(q)
            latency[q] = None if a is None or b is None else a <= b
        out[other] = {
            "ratio": ratio,
            "target": target,
            "met": None if ratio is None else ratio >= target,
            "latency_not_worse": latency,
            "reason": None,
        }
    return out
