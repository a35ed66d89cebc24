"""The layers docs/design.md draws are checked by the build, not promised by a comment.

The contracts live in pyproject.toml ([tool.importlinter]); `make lint` runs them
too. Here they run with the unit tests, so `make test` and `.ci/run` fail on an
import that points the wrong way.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "extender"
# These two may import the kubernetes package; every other top-level module is named
# in the contract that forbids it.
KUBERNETES_ALLOWED = {"extender.kube", "extender.devcluster"}


def _contracts() -> dict[str, dict[str, object]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    return {c["id"]: c for c in config["contracts"]}


def _top_level_modules() -> set[str]:
    names = {f"extender.{p.stem}" for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    names |= {f"extender.{p.parent.name}" for p in PACKAGE.glob("*/__init__.py")}
    return names


def test_import_contracts_are_kept() -> None:
    lint_imports = Path(sys.executable).parent / "lint-imports"
    result = subprocess.run(
        [str(lint_imports), str(ROOT / "pyproject.toml"), "--no-cache"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


def test_every_module_outside_kube_is_forbidden_the_kubernetes_package() -> None:
    listed = set(_contracts()["kubernetes-only-in-kube"]["source_modules"])  # type: ignore[arg-type]
    missing = _top_level_modules() - KUBERNETES_ALLOWED - listed
    assert not missing, f"add {sorted(missing)} to the kubernetes-only-in-kube contract"


def test_every_top_level_module_has_a_layer_or_is_a_leaf() -> None:
    """A new package must be placed in the layers contract (leaf modules may stay out)."""
    layers = " ".join(_contracts()["layers"]["layers"])  # type: ignore[arg-type]
    packages = {f"extender.{p.parent.name}" for p in PACKAGE.glob("*/__init__.py")}
    unplaced = {p for p in packages if p not in layers}
    assert not unplaced, f"place {sorted(unplaced)} in the layers contract"
