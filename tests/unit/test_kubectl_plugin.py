"""`kubectl gang ...`: the kubectl-gang executable is `gang-extender` by another name.

kubectl runs `kubectl-gang` from PATH with the words after `gang`; the e2e twin
(tests/e2e/test_kubectl_plugin.py) goes through the real kubectl.
"""

from __future__ import annotations

import argparse
import importlib
import tomllib
from pathlib import Path

import pytest

from extender import cli

REPO = Path(__file__).resolve().parents[2]


def _entry_point(name: str) -> object:
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    module, _, function = scripts[name].partition(":")
    return getattr(importlib.import_module(module), function)


def test_pyproject_installs_kubectl_gang_beside_gang_extender() -> None:
    assert _entry_point("gang-extender") is cli.main
    assert _entry_point("kubectl-gang") is cli.kubectl_plugin


def test_kubectl_gang_status_runs_gang_extender_status(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[argparse.Namespace] = []

    def fake_status(args: argparse.Namespace) -> int:
        seen.append(args)
        return 0

    monkeypatch.setattr(cli, "_status", fake_status)
    monkeypatch.setattr("sys.argv", ["/venv/bin/kubectl-gang", "status", "-n", "team-a"])
    monkeypatch.setattr("signal.signal", lambda *_args: None)  # status restores SIGPIPE
    entry = _entry_point("kubectl-gang")
    assert callable(entry)
    assert entry() == 0
    (args,) = seen
    assert (args.command, args.namespace) == ("status", "team-a")


def test_usage_names_the_command_as_typed(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--help"], prog="kubectl gang")
    assert exit_.value.code == 0
    assert capsys.readouterr().out.startswith("usage: kubectl gang ")
