#!/usr/bin/env python3
"""Facts about the package's import graph, for before/after comparisons of a restructuring.

    .venv/bin/python hack/import-facts.py

Prints the largest modules, the modules that import the `kubernetes` package, the
modules outside kube/ that import kube/rawapi.py or send a request themselves
(`raw.call(...)`: a REST path built outside kube/), and every import that runs
against the layers in pyproject.toml's import-linter contract (to a higher layer,
or between independent siblings), plus `api -> kube`.
"""

from __future__ import annotations

import ast
import sys
import tomllib
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[1]


def layer_table() -> list[list[str]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    layers = next(c for c in config["contracts"] if c["id"] == "layers")["layers"]
    return [[m.strip(" ()") for m in line.split("|")] for line in layers]


def position(module: str, table: list[list[str]]) -> tuple[int, str] | None:
    """(layer index from the top, sibling) of `module`, or None when in no layer."""
    for index, siblings in enumerate(table):
        for sibling in siblings:
            if module == sibling or module.startswith(sibling + "."):
                return index, sibling
    return None


def raw_requests(path: Path) -> int:
    """How many `<...>raw.call/stream/pieces` a module uses (called, or handed to a thread)."""
    found = 0
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and node.attr in {"call", "stream", "pieces"}:
            holder = node.value
            name = holder.attr if isinstance(holder, ast.Attribute) else getattr(holder, "id", "")
            found += name == "raw"
    return found


def main() -> int:
    sys.path.insert(0, str(ROOT))
    graph = grimp.build_graph("extender", include_external_packages=True, cache_dir=None)
    sizes = sorted(
        (
            (len(p.read_text().splitlines()), str(p.relative_to(ROOT)))
            for p in (ROOT / "extender").rglob("*.py")
        ),
        reverse=True,
    )
    print("largest modules:", ", ".join(f"{name} ({lines})" for lines, name in sizes[:3]))
    kube_users = sorted(
        m
        for m in graph.modules
        if m.startswith("extender.") and "kubernetes" in graph.find_modules_directly_imported_by(m)
    )
    print(f"modules importing kubernetes: {len(kube_users)}: {', '.join(kube_users)}")
    rawapi_users = sorted(
        m
        for m in graph.modules
        if m.startswith("extender.")
        and not m.startswith("extender.kube")
        and "extender.kube.rawapi" in graph.find_modules_directly_imported_by(m)
    )
    print(
        f"modules outside kube/ importing kube.rawapi: {len(rawapi_users)}: {', '.join(rawapi_users)}"
    )
    requests = {
        str(p.relative_to(ROOT)): n
        for p in sorted((ROOT / "extender").rglob("*.py"))
        if p.relative_to(ROOT / "extender").parts[0] != "kube" and (n := raw_requests(p))
    }
    listed = ", ".join(f"{name} ({n})" for name, n in requests.items())
    print(f"requests sent outside kube/: {sum(requests.values())}: {listed}")
    table = layer_table()
    wrong: list[str] = []
    for importer in sorted(m for m in graph.modules if m.startswith("extender.")):
        for imported in sorted(graph.find_modules_directly_imported_by(importer)):
            a, b = position(importer, table), position(imported, table)
            if a is None or b is None:
                continue
            upward = b[0] < a[0]
            siblings = a[0] == b[0] and a[1] != b[1]
            api_to_kube = a[1] == "extender.api" and b[1] == "extender.kube"
            if upward or siblings or api_to_kube:
                kind = "upward" if upward else "sibling" if siblings else "api->kube"
                wrong.append(f"{importer} -> {imported} ({kind})")
    print(f"imports against the layers: {len(wrong)}")
    for line in wrong:
        print("  " + line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
