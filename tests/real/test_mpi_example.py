"""The MPI example on real nodes: the launcher Job's mpirun over the workers' VC_* hosts."""

from __future__ import annotations

from pathlib import Path

import yaml

from extender.devcluster.cluster import LocalCluster
from extender.devcluster.demo_jobs import MPI_JOB, mpi_job
from extender.kube.rawapi import RawApi
from tests.real.real_jobs import apply_example, finished, logs, rank_host, rank_lines


def test_the_launcher_runs_a_rank_on_each_worker_once_both_are_ready(
    cluster: LocalCluster, raw: RawApi, namespace: str, tmp_path: Path
) -> None:
    docs = mpi_job([d for d in yaml.safe_load_all(MPI_JOB.read_text()) if d])
    apply_example(cluster, namespace, docs, tmp_path / "mpijob.yaml")
    launcher = finished(
        raw, namespace, "scheduling.x-k8s.io/pod-group=pi,gang-extender.io/task=launcher"
    )
    name = launcher["metadata"]["name"]
    out = logs(cluster, namespace, name)
    assert launcher["status"]["phase"] == "Succeeded", out
    ranks = rank_lines(out)
    assert len(ranks) == 2 and all(line.endswith("= 3") for line in ranks), out  # 1 + 2
    assert {rank_host(line) for line in ranks} == {"pi-worker-0", "pi-worker-1"}, out
    # The webhook's depends-on wait ran first, and saw both workers Ready.
    init = [c["name"] for c in launcher["spec"].get("initContainers") or []]
    assert "wait-for-tasks" in init
    waited = cluster.kubectl("logs", "-n", namespace, name, "-c", "wait-for-tasks")
    assert "worker Ready" in waited, waited
