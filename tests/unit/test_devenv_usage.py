"""What `gang-extender dev up` prints: every command the READMEs show must be found."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from extender.devcluster import devenv

INFO = {
    "workdir": "/w",
    "kubeconfig": "/w/cluster/kubeconfig",
    "bin_dir": "/cache/bin",
    "metrics_url": "http://127.0.0.1:1",
}


def _path_export(lines: list[str]) -> list[str]:
    line = next(line for line in lines if line.strip().startswith("export PATH="))
    value = line.split("=", 1)[1].split()[0]
    return value.split(":")


def test_the_printed_path_holds_kubectl_and_the_running_gang_extender() -> None:
    lines = devenv.usage_lines(INFO, Path("/venv/bin"))
    assert _path_export(lines) == ["/cache/bin", "/venv/bin", "$PATH"]
    assert any("gang-extender status" in line for line in lines)


def test_a_cluster_only_cluster_points_at_deploy() -> None:
    lines = devenv.usage_lines({**INFO, "metrics_url": None}, Path("/venv/bin"))
    assert any("kubectl apply -k deploy/" in line for line in lines)
    assert not any("gang-extender status" in line for line in lines)
    assert not any("kubectl apply -k deploy/" in line for line in devenv.usage_lines(INFO, None))


def test_without_an_installed_command_it_says_how_to_get_one() -> None:
    lines = devenv.usage_lines(INFO, None)
    assert _path_export(lines) == ["/cache/bin", "$PATH"]
    assert any("pip install ." in line for line in lines)


def test_the_cli_dir_is_the_console_script_s_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = tmp_path / "bin" / "gang-extender"
    script.parent.mkdir()
    script.write_text("#!/bin/sh\n")
    monkeypatch.setattr(sys, "argv", [str(script), "dev", "up"])
    assert devenv.cli_dir() == script.parent


def test_under_python_m_it_is_the_venv_bin_beside_the_interpreter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "gang-extender").write_text("#!/bin/sh\n")
    monkeypatch.setattr(sys, "argv", ["/repo/extender/__main__.py", "dev", "up"])
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python3"))
    assert devenv.cli_dir() == tmp_path
    monkeypatch.setattr(sys, "executable", str(tmp_path / "elsewhere" / "python3"))
    assert devenv.cli_dir() is None


@pytest.mark.parametrize(("gpus_by", "says_dra"), [("device-plugin", False), ("dra", True)])
def test_real_nodes_serving_gpus_by_dra_point_at_their_device_class(
    gpus_by: str, says_dra: bool
) -> None:
    info = {**INFO, "real_nodes": ["real-node-0", "real-node-1"], "real_gpus_by": gpus_by}
    lines = devenv.usage_lines(info, Path("/venv/bin"))
    assert any("real nodes real-node-0, real-node-1" in line for line in lines)
    assert any("DeviceClass gpu.example.com" in line for line in lines) == says_dra
