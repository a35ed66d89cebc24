"""Merge workloads of two bench runs into one results directory.

`python -m bench.merge BASE OTHER OUT [WHY]`: the results of BASE (a results.json),
with every workload OTHER ran replacing BASE's, written as OUT/results.{md,json,png};
WHY (default: the first run of them failed) is said in the report.
For a workload that failed in a full run and was run again alone on the same
machine and tree (`--only NAME`); meta.merged says which came from where.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from bench import report


def merge(
    base: dict[str, Any], other: dict[str, Any], other_name: str, why: str = ""
) -> dict[str, Any]:
    """BASE with OTHER's workloads that ran without error in their place."""
    merged = dict(base)
    ran = sorted(
        name
        for name, result in other.items()
        if name != "meta" and isinstance(result, dict) and "error" not in result
    )
    for name in ran:
        merged[name] = other[name]
    merged["meta"] = {
        **base["meta"],
        "merged": {
            "workloads": ran,
            "from": other_name,
            "started": other["meta"]["started"],
            **({"why": why} if why else {}),
        },
    }
    return merged


def main(argv: list[str]) -> int:
    base_path, other_path, out = Path(argv[0]), Path(argv[1]), Path(argv[2])
    why = argv[3] if len(argv) > 3 else ""
    merged = merge(
        json.loads(base_path.read_text()), json.loads(other_path.read_text()), str(other_path), why
    )
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(merged, indent=1, sort_keys=True))
    (out / "results.md").write_text(report.markdown(merged))
    report.plot(merged, out / "results.png")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
