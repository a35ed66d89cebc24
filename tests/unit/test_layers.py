"""The layers docs/design.md draws are checked by the build, not promised by a comment.

The contracts live in pyproject.toml ([tool.importlinter]); `make lint` runs them
too. Here they run with the unit tests, so `make test` and `.ci/run` fail on an
import that points the wrong way.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

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


REST_CONTRACT = "rest-only-in-kube"


def _lint_copy(
    tmp_path: Path, contract_id: str, edit: tuple[str, str]
) -> subprocess.CompletedProcess[str]:
    """lint-imports on a copy of the package with one line appended to one module (a new
    module when there is none by that name)."""
    shutil.copytree(PACKAGE, tmp_path / "extender", ignore=shutil.ignore_patterns("__pycache__"))
    module, line = edit
    target = tmp_path / "extender" / module
    before = target.read_text() if target.exists() else ""
    target.write_text(before + f"\n{line}\n")
    contract = _contracts()[contract_id]
    config = {
        "root_package": "extender",
        "include_external_packages": True,
        "contracts": [contract],
    }
    (tmp_path / ".importlinter.toml").write_text(_toml({"tool": {"importlinter": config}}))
    lint_imports = Path(sys.executable).parent / "lint-imports"
    return subprocess.run(
        [str(lint_imports), "--config", str(tmp_path / ".importlinter.toml"), "--no-cache"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        check=False,
    )


def _toml(value: dict[str, object]) -> str:
    """Just enough TOML for one importlinter table (strings, bools, lists of strings)."""

    def scalar(v: object) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, list):
            return "[" + ", ".join(json.dumps(x) for x in v) + "]"
        return json.dumps(v)

    config = value["tool"]["importlinter"]  # type: ignore[index]
    lines = ["[tool.importlinter]"]
    lines += [f"{k} = {scalar(v)}" for k, v in config.items() if k != "contracts"]
    for contract in config["contracts"]:
        lines += ["", "[[tool.importlinter.contracts]]"]
        lines += [f"{k} = {scalar(v)}" for k, v in contract.items()]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    "edit",
    [
        ("controller/lifecycle_writes.py", "from extender.kube.rawapi import path_of  # noqa"),
        ("cli.py", "import extender.kube.rawapi  # noqa"),
    ],
    ids=["controller", "cli"],
)
def test_rest_contract_fails_on_a_rawapi_import(tmp_path: Path, edit: tuple[str, str]) -> None:
    """The contract can fail: one import of rawapi above kube/ breaks it."""
    result = _lint_copy(tmp_path, REST_CONTRACT, edit)
    assert result.returncode != 0, result.stdout[-2000:]
    assert "BROKEN" in result.stdout
    assert "extender.kube.rawapi" in result.stdout


def test_rest_contract_holds_on_the_unchanged_copy(tmp_path: Path) -> None:
    """...and the copy without that import keeps it (the failure above is the import's)."""
    result = _lint_copy(tmp_path, REST_CONTRACT, ("cli.py", "# unchanged"))
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]


DOMAIN_CONTRACT = "domain-layers"


@pytest.mark.parametrize(
    "edit",
    [
        # objects/ (the parsed API objects) reaching up into the cluster snapshot
        ("domain/objects/model.py", "import extender.domain.cluster.snapshot  # noqa"),
        # a pure planning module reaching up into the gang core
        ("domain/planning/planner.py", "import extender.domain.gang.core_api  # noqa"),
        # siblings: the queue part importing the preemption rules
        ("domain/queue/gang_queue.py", "import extender.domain.preemption.preemption  # noqa"),
        # a module put straight into domain/: the contract is exhaustive
        ("domain/stray.py", '"""Left flat, in no subpackage."""'),
    ],
    ids=["objects-to-cluster", "planning-to-gang", "sibling-queue-to-preemption", "flat"],
)
def test_domain_contract_fails_on_an_import_up_or_across(
    tmp_path: Path, edit: tuple[str, str]
) -> None:
    """domain/'s subpackages import only those below them, each placed in the contract."""
    result = _lint_copy(tmp_path, DOMAIN_CONTRACT, edit)
    assert result.returncode != 0, result.stdout[-2000:]
    named = "extender.domain.stray" if edit[0] == "domain/stray.py" else edit[1].split()[1]
    assert named in result.stdout


def test_domain_contract_holds_on_the_unchanged_copy(tmp_path: Path) -> None:
    """...and the copy without that import or module keeps it."""
    result = _lint_copy(tmp_path, DOMAIN_CONTRACT, ("domain/__init__.py", "# unchanged"))
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]


def _raw_requests(path: Path) -> list[str]:
    """`<x>.raw.call`, `raw.stream`, ... in a module (called, or handed to a thread)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not (isinstance(node, ast.Attribute) and node.attr in {"call", "stream", "pieces"}):
            continue
        holder = node.value
        name = holder.attr if isinstance(holder, ast.Attribute) else getattr(holder, "id", "")
        if name == "raw":
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_no_request_is_sent_by_hand_above_kube() -> None:
    """The handle kube/client.py gives out still has `call`: nobody above kube/ uses it."""
    above = [
        p
        for p in PACKAGE.rglob("*.py")
        if p.relative_to(PACKAGE).parts[0] not in {"kube", "devcluster"}
    ]
    found = [hit for p in above for hit in _raw_requests(p)]
    assert not found, f"move these requests behind a function in extender/kube/: {found}"


def test_the_request_finder_finds_one() -> None:
    """The finder above is not blind: it sees kube/'s own requests."""
    assert _raw_requests(PACKAGE / "kube" / "pod_lifecycle.py")
