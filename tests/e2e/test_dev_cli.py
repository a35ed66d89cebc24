"""`gang-extender dev up` / `dev down`: what a newcomer runs by hand."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from extender.kube.rawapi import RawApi, load_api_client


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _run(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "extender", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )


def test_dev_up_prints_how_to_use_the_cluster_and_dev_down_stops_everything(
    tmp_path: Path, bin_dir: Path
) -> None:
    workdir = tmp_path / "dev"
    env = {**os.environ, "GANG_E2E_BIN_DIR": str(bin_dir)}
    up = _run("dev", "up", "--workdir", str(workdir), "--nodes", "2", "--gpus", "4", env=env)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        assert "export KUBECONFIG=" in up.stdout
        assert "gang-extender dev down" in up.stdout
        info = json.loads((workdir / "ready.json").read_text())
        raw = RawApi(load_api_client(info["kubeconfig"]))
        nodes = raw.call("GET", "/api/v1/nodes")["items"]
        assert sorted(n["metadata"]["name"] for n in nodes) == sorted(info["nodes"])
        assert all(n["status"]["allocatable"]["nvidia.com/gpu"] == "4" for n in nodes)
        lease = raw.call(
            "GET", "/apis/coordination.k8s.io/v1/namespaces/gang-system/leases/gang-extender"
        )
        assert lease["spec"]["holderIdentity"], "the gang kube-scheduler runs"
        # A fresh shell that runs only the printed export lines finds kubectl and
        # gang-extender, and `gang-extender status` answers (README, examples).
        exports = [line.strip() for line in up.stdout.splitlines() if "export " in line]
        assert [e.split("=", 1)[0] for e in exports] == ["export KUBECONFIG", "export PATH"]
        script = "\n".join(
            [*exports, "command -v kubectl", "command -v gang-extender", "gang-extender status"]
        )
        shell = subprocess.run(
            ["bash", "--norc", "--noprofile", "-c", script],
            capture_output=True,
            text=True,
            timeout=120,
            env={
                "HOME": os.environ.get("HOME", "/"),
                "PATH": "/usr/bin:/bin",
                "PYTHONPATH": env.get("PYTHONPATH", ""),
            },
        )
        assert shell.returncode == 0, shell.stdout + shell.stderr
        assert shell.stdout.splitlines()[2].split()[:3] == ["NAMESPACE", "NAME", "PHASE"]
        # deploy/ does not go on top of dev up's own webhook configuration: the error
        # docs/troubleshooting.md quotes, and the reason to use --cluster-only.
        apply = _kubectl(info, "apply", "-k", "deploy/")
        assert apply.returncode != 0
        assert "exactly one of url or service is required" in apply.stderr, apply.stderr
        supervisor = int((workdir / "supervisor.pid").read_text())
        again = _run("dev", "up", "--workdir", str(workdir), env=env)
        assert again.returncode == 1 and "already running" in again.stdout
    finally:
        down = _run("dev", "down", "--workdir", str(workdir), env=env)
    assert down.returncode == 0, down.stdout + down.stderr
    assert not _alive(supervisor)
    leftovers = subprocess.run(
        ["pgrep", "-f", str(workdir)], capture_output=True, text=True
    ).stdout.split()
    assert leftovers == [], f"processes still running from {workdir}: {leftovers}"


def _kubectl(info: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(Path(info["bin_dir"]) / "kubectl"), *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[2],
        env={**os.environ, "KUBECONFIG": info["kubeconfig"]},
    )


def test_deploy_applies_on_a_cluster_only_dev_cluster_as_docs_deploy_md_says(
    tmp_path: Path, bin_dir: Path
) -> None:
    workdir = tmp_path / "dev"
    env = {**os.environ, "GANG_E2E_BIN_DIR": str(bin_dir)}
    up = _run("dev", "up", "--cluster-only", "--workdir", str(workdir), "--nodes", "1", env=env)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        assert "gang-extender status" not in up.stdout, "no service runs: nothing to show"
        info = json.loads((workdir / "ready.json").read_text())
        apply = _kubectl(info, "apply", "-k", "deploy/")
        assert apply.returncode == 0, apply.stdout + apply.stderr
        for made in (
            "customresourcedefinition.apiextensions.k8s.io/podgroups.scheduling.gang-extender.io",
            "deployment.apps/gang-extender",
            "deployment.apps/gang-scheduler",
            "mutatingwebhookconfiguration.admissionregistration.k8s.io/gang-extender",
        ):
            assert f"{made} created" in apply.stdout, apply.stdout
        # Our short name and category answer (nothing to list yet, but no error).
        for resource in ("gang", "gang-extender", "podgroups.scheduling.gang-extender.io"):
            listed = _kubectl(info, "get", resource, "-A")
            assert listed.returncode == 0, listed.stderr
    finally:
        down = _run("dev", "down", "--workdir", str(workdir), env=env)
    assert down.returncode == 0, down.stdout + down.stderr


def test_the_readme_demo_shows_the_seed_gang_held_then_placed_with_its_hostfile(
    tmp_path: Path, bin_dir: Path
) -> None:
    # `make demo` runs exactly this command once the venv and binaries exist.
    workdir = tmp_path / "demo"
    env = {**os.environ, "GANG_E2E_BIN_DIR": str(bin_dir)}
    demo = _run("demo", "--workdir", str(workdir), env=env)
    out = demo.stdout
    assert demo.returncode == 0, out + demo.stderr
    held, placed = out.index("== held: "), out.index("== placed: ")
    assert held < placed
    held_line = out[held:].splitlines()[0]
    assert "lm-horovod-job" in held_line and "nvidia.com/gpu" in held_line
    assert "members: 4 created, 0 bound (gang-extender binds none until all 4 fit)" in out
    assert "4/4 members bound" in out[placed:].splitlines()[0]
    # One line per member with its node, then the MPI/DeepSpeed hostfile with 4 hosts.
    members = [line for line in out[placed:].splitlines() if " -> " in line]
    assert len(members) == 4 and all("gpu-" in line for line in members)
    hostfile = out[out.index("== /etc/volcano/hostfile") :].splitlines()[1:5]
    assert [line.split()[1] for line in hostfile] == ["slots=1"] * 4, hostfile
    leftovers = subprocess.run(
        ["pgrep", "-f", str(workdir)], capture_output=True, text=True
    ).stdout.split()
    assert leftovers == [], f"processes still running from {workdir}: {leftovers}"


def _with_kueue_example() -> str:
    """The Job docs/deploy.md's "With Kueue" section shows (its first yaml block)."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "deploy.md").read_text()
    section = doc[doc.index("## With Kueue") :]
    start = section.index("```yaml\n") + len("```yaml\n")
    return section[start : section.index("```", start)]


@pytest.mark.after_builds  # `dev up --kueue` builds Kueue (or waits for CI's build of it)
def test_dev_up_with_kueue_admits_the_docs_job_and_gang_extender_binds_it_whole(
    tmp_path: Path, bin_dir: Path
) -> None:
    workdir = tmp_path / "dev"
    env = {**os.environ, "GANG_E2E_BIN_DIR": str(bin_dir)}
    up = _run("dev", "up", "--kueue", "--workdir", str(workdir), "--nodes", "2", env=env)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        # 2 nodes x 4 GPUs (the default): the ClusterQueue's quota is the nodes' GPUs.
        assert (
            "Kueue: label a Job kueue.x-k8s.io/queue-name=gpus in namespace default "
            "(ClusterQueue gpus, 8 nvidia.com/gpu)"
        ) in up.stdout, up.stdout
        info = json.loads((workdir / "ready.json").read_text())
        job = tmp_path / "trainer.yaml"
        job.write_text(_with_kueue_example())
        made = _kubectl(info, "apply", "-n", "default", "-f", str(job))
        assert made.returncode == 0, made.stdout + made.stderr
        raw = RawApi(load_api_client(info["kubeconfig"]))
        pods_path = "/api/v1/namespaces/default/pods"
        deadline = time.monotonic() + 120
        pods: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            pods = raw.call(
                "GET", pods_path, query={"labelSelector": "batch.kubernetes.io/job-name=trainer"}
            )["items"]
            if len(pods) == 4 and all(p["spec"].get("nodeName") for p in pods):
                break
            time.sleep(0.5)
        assert len(pods) == 4 and all(p["spec"].get("nodeName") for p in pods), pods
        assert {p["spec"]["schedulerName"] for p in pods} == {"gang-extender"}
        workloads = raw.call("GET", "/apis/kueue.x-k8s.io/v1beta2/namespaces/default/workloads")
        [workload] = workloads["items"]
        assert workload["status"]["admission"]["clusterQueue"] == "gpus"
    finally:
        down = _run("dev", "down", "--workdir", str(workdir), env=env)
    assert down.returncode == 0, down.stdout + down.stderr
    leftovers = subprocess.run(
        ["pgrep", "-f", str(workdir)], capture_output=True, text=True
    ).stdout.split()
    assert leftovers == [], f"processes still running from {workdir}: {leftovers}"
