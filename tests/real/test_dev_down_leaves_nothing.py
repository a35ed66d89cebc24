"""`gang-extender dev up --real-nodes 2 --real-gpus-by dra`, a pod served by DRA, then
`dev down`: the host is as it was.

The pod asks the class's implicit extended resource, not ``nvidia.com/gpu``: the
session's nodes run device plugins beside, and kubelet keeps their state at a
path every kubelet on the host shares, so these nodes advertise
``nvidia.com/gpu: 0`` for their first minutes (docs/dra.md "Real nodes").
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from extender.devcluster.devenv import READY_FILE
from extender.devcluster.node_commands import DRA_DEVICE_CLASS, DRA_DRIVER, JOB_IMAGE
from extender.devcluster.nodehost import host_footprint
from extender.devcluster.stack import REPO
from tests.e2e.gang_fixtures import wait_until
from tests.real.real_jobs import START_SECONDS

IMPLICIT_RESOURCE = f"deviceclass.resource.kubernetes.io/{DRA_DEVICE_CLASS}"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "extender", "dev", *args],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=REPO,
    )


def _kubectl(info: dict[str, Any], *args: str, stdin: str | None = None) -> str:
    result = subprocess.run(
        [f"{info['bin_dir']}/kubectl", f"--kubeconfig={info['kubeconfig']}", *args],
        capture_output=True,
        text=True,
        timeout=120,
        input=stdin,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def _gpu_pod_runs_on_dra_devices(info: dict[str, Any]) -> None:
    """The DeviceClass maps nvidia.com/gpu; a plain pod asking one device of the class
    (its implicit extended resource) is served by DRA, its container sees the claim."""
    device_class = json.loads(_kubectl(info, "get", "deviceclass", DRA_DEVICE_CLASS, "-o", "json"))
    assert device_class["spec"]["extendedResourceName"] == "nvidia.com/gpu"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "gpu", "namespace": "default"},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "main",
                    "image": JOB_IMAGE,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["/bin/sh", "-c", "env | grep ^claim_; exec sleep 3600"],
                    "resources": {"limits": {IMPLICIT_RESOURCE: 1}},
                }
            ],
        },
    }
    _kubectl(info, "apply", "-f", "-", stdin=yaml.safe_dump(pod))
    seen = wait_until(
        lambda: (
            json.loads(_kubectl(info, "get", "pod", "gpu", "-n", "default", "-o", "json"))[
                "status"
            ].get("phase")
            == "Running"
            and _kubectl(info, "logs", "gpu", "-n", "default")
        ),
        timeout=START_SECONDS,
        what="the pod running on a DRA device",
    )
    got = json.loads(_kubectl(info, "get", "pod", "gpu", "-n", "default", "-o", "json"))
    claim_name = got["status"]["extendedResourceClaimStatus"]["resourceClaimName"]
    claim = json.loads(
        _kubectl(info, "get", "resourceclaim", claim_name, "-n", "default", "-o", "json")
    )
    results = claim["status"]["allocation"]["devices"]["results"]
    assert [(r["driver"], r["pool"]) for r in results] == [(DRA_DRIVER, got["spec"]["nodeName"])]
    # The test driver's variable: claim_<claim>_<request>, each other character a "_".
    variable = re.sub(r"[^a-zA-Z0-9]", "_", f"claim_{claim_name}_{results[0]['request']}")
    assert seen.split() == [f"{variable}=true"], seen


def test_dev_down_removes_everything_dev_up_real_nodes_put_on_the_host(tmp_path: Path) -> None:
    workdir = tmp_path / "dev"
    before = host_footprint()
    # GPUs by DRA: the driver's processes, sockets and CDI specs must go too.
    up = _cli(
        "up",
        "--real-nodes",
        "2",
        "--real-gpus-by",
        "dra",
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
        assert not any("fake-gpu-plugin" in p for p in new), sorted(new)
        sockets = set(during["sockets and CDI specs"]) - set(before["sockets and CDI specs"])
        assert sum(p.endswith("/dra.sock") for p in sockets) == 2, sorted(sockets)
        _gpu_pod_runs_on_dra_devices(json.loads((workdir / READY_FILE).read_text()))
        prepared = set(host_footprint()["sockets and CDI specs"]) - set(
            during["sockets and CDI specs"]
        )
        assert any("/cdi/" in p for p in prepared), sorted(prepared)
    finally:
        down = _cli("down", "--workdir", str(workdir))
    assert down.returncode == 0, down.stdout + down.stderr
    after = host_footprint()
    # The session's own nodes run on beside (their pods come and go): nothing may be
    # left that was not there before, and the host settings must be as they were.
    left = {what: sorted(set(after[what]) - set(before[what])) for what in after}
    assert left == {what: [] for what in after}
    assert after["sysctls"] == before["sysctls"]
