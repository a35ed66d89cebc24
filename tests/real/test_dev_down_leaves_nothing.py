"""`gang-extender dev up --real-nodes 2 --real-gpus-by both`, then `dev down`: the host is
as it was."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from extender.devcluster.nodehost import host_footprint
from extender.devcluster.stack import REPO


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "extender", "dev", *args],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=REPO,
    )


def test_dev_down_removes_everything_dev_up_real_nodes_put_on_the_host(tmp_path: Path) -> None:
    workdir = tmp_path / "dev"
    before = host_footprint()
    # Both GPU drivers: the device plugin and the DRA kubelet plugin (its sockets, its
    # CDI spec dir) must go too.
    up = _cli(
        "up",
        "--real-nodes",
        "2",
        "--real-gpus-by",
        "both",
        "--nodes",
        "0",
        "--cluster-only",
        "--workdir",
        str(workdir),
    )
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        during = host_footprint()
        # (no bridge yet: CNI makes it with the first pod)
        for what in ("lo addresses", "cgroups", "processes", "sockets and CDI specs"):
            assert during[what] != before[what], f"the listing does not see the nodes' {what}"
        new = set(during["processes"]) - set(before["processes"])
        assert sum("dra-test-driver" in p for p in new) == 2, sorted(new)
        assert sum("fake-gpu-plugin" in p for p in new) == 2, sorted(new)
        sockets = set(during["sockets and CDI specs"]) - set(before["sockets and CDI specs"])
        assert sum(p.endswith("/dra.sock") for p in sockets) == 2, sorted(sockets)
    finally:
        down = _cli("down", "--workdir", str(workdir))
    assert down.returncode == 0, down.stdout + down.stderr
    after = host_footprint()
    # The session's own nodes run on beside (their pods come and go): nothing may be
    # left that was not there before, and the host settings must be as they were.
    left = {what: sorted(set(after[what]) - set(before[what])) for what in after}
    assert left == {what: [] for what in after}
    assert after["sysctls"] == before["sysctls"]
