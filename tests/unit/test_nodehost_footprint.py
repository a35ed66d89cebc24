"""nodehost's walk of the real nodes' run dir for left-over sockets and CDI specs."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from extender.devcluster.nodehost import _is_socket, _runtime_paths


def _bind_socket(path: Path) -> socket.socket:
    """A socket bound at `path`, bound by its name from its directory: pytest-xdist's
    per-worker tmp dirs make the full path longer than AF_UNIX's 108 bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    here = os.getcwd()
    os.chdir(path.parent)
    try:
        sock.bind(path.name)
    finally:
        os.chdir(here)
    return sock


def test_the_walk_finds_our_sockets_and_cdi_specs_but_not_inside_container_rootfs(
    tmp_path: Path,
) -> None:
    kubelet = _bind_socket(tmp_path / "s0" / "n0" / "kubelet" / "plugins_registry" / "dra.sock")
    inside = _bind_socket(tmp_path / "s0" / "n0" / "state" / "task" / "rootfs" / "run" / "x.sock")
    spec = tmp_path / "s0" / "n0" / "cdi" / "gpu.json"
    spec.parent.mkdir(parents=True)
    spec.write_text("{}")
    try:
        found = _runtime_paths(tmp_path)
        sockets = {p for p in found if _is_socket(p)}
        assert sockets == {tmp_path / "s0" / "n0" / "kubelet" / "plugins_registry" / "dra.sock"}
        assert spec in found
        assert not any("rootfs" in p.parts[len(tmp_path.parts) :][:-1] for p in found)
    finally:
        kubelet.close()
        inside.close()


def test_a_missing_run_dir_is_nothing_found(tmp_path: Path) -> None:
    assert _runtime_paths(tmp_path / "gone") == []
