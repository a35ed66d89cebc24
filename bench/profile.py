"""Summaries of py-spy's raw (collapsed-stack) output: where the service spends its time."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any


def summarize(path: Path, *, top: int = 15, within: str | None = None) -> dict[str, Any]:
    """Top functions by self and inclusive samples, optionally only stacks through `within`."""
    self_time: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rstrip().rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        if within is not None and not any(within in f for f in frames):
            continue
        n = int(count)
        total += n
        self_time[frames[-1]] += n
        for frame in set(frames):
            inclusive[frame] += n

    def rows(counter: Counter[str]) -> list[dict[str, Any]]:
        return [
            {"function": f, "percent": round(100 * v / total, 1)}
            for f, v in counter.most_common(top)
        ]

    return {"samples": total, "self": rows(self_time), "inclusive": rows(inclusive)}


def as_text(title: str, summary: dict[str, Any]) -> str:
    lines = [f"## {title} ({summary['samples']} samples)", "", "self time:"]
    lines += [f"  {r['percent']:5.1f}%  {r['function']}" for r in summary["self"]]
    lines += ["", "inclusive time:"]
    lines += [f"  {r['percent']:5.1f}%  {r['function']}" for r in summary["inclusive"]]
    return "\n".join(lines) + "\n"
