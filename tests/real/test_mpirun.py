"""The user's training step: mpirun over the hostfile, and again after a failed rank."""

from __future__ import annotations

from typing import Any

from extender.devcluster.cluster import LocalCluster
from extender.devcluster.demo_jobs import MPIRUN
from extender.domain.lifecycle.lifecycle import RESTART_GENERATION_LABEL
from extender.domain.objects.membership import GROUP_LABEL
from extender.kube.rawapi import RawApi
from tests.e2e.gang_fixtures import (
    labelled_generation,
    list_pods,
    podgroup_status,
    restart_message,
    wait_until,
)
from tests.real.real_jobs import START_SECONDS, launch, logs, member

DEPENDS = {"gang-extender.io/depends-on": "worker"}


def _phase(raw: RawApi, namespace: str, name: str) -> str | None:
    pods = [p for p in list_pods(raw, namespace) if p["metadata"]["name"] == name]
    return pods[0]["status"].get("phase") if pods else None


def _rank_lines(text: str) -> list[str]:
    return sorted(line for line in text.splitlines() if line.startswith("rank "))


def _mpi_job(group: str, master_command: str) -> list[dict[str, Any]]:
    return [
        member(
            f"{group}-master",
            group,
            "master",
            command=f"mkdir -p /run/sshd; /usr/sbin/sshd -e; {master_command}",
            ready_on_sshd=False,
            annotations=DEPENDS,
            restart_policy="Never",
        ),
        *(member(f"{group}-worker-{i}", group, "worker", gpus=1) for i in range(3)),
    ]


def test_mpirun_runs_an_allreduce_on_every_member_over_ssh(
    cluster: LocalCluster, raw: RawApi, namespace: str
) -> None:
    launch(raw, namespace, "allreduce", _mpi_job("allreduce", MPIRUN))
    phase = wait_until(
        lambda: (
            _phase(raw, namespace, "allreduce-master") in ("Succeeded", "Failed")
            and _phase(raw, namespace, "allreduce-master")
        ),
        timeout=START_SECONDS,
        what="the master's mpirun to finish",
    )
    out = logs(cluster, namespace, "allreduce-master")
    assert phase == "Succeeded", out
    ranks = _rank_lines(out)
    assert len(ranks) == 4, out
    assert all(line.endswith("= 10") for line in ranks), out  # 1 + 2 + 3 + 4
    members = list_pods(raw, namespace, f"{GROUP_LABEL}=allreduce")
    hosts = {p["spec"]["hostname"] for p in members}
    assert {line.split(" on ")[1].split(":")[0] for line in ranks} == hosts


def test_a_failed_rank_restarts_the_whole_gang_and_mpirun_runs_again(
    cluster: LocalCluster, raw: RawApi, namespace: str
) -> None:
    # The master exits 1 after its first mpirun: a member of restart generation 0
    # (label absent) fails; the recreated one (generation 1) succeeds.
    jobs = _mpi_job("flaky", f'{MPIRUN} && test -n "$GANG_GENERATION"')
    jobs[0]["spec"]["containers"][0]["env"] = [
        {
            "name": "GANG_GENERATION",
            "valueFrom": {
                "fieldRef": {"fieldPath": f"metadata.labels['{RESTART_GENERATION_LABEL}']"}
            },
        }
    ]
    launch(raw, namespace, "flaky", jobs, policies=[{"event": "PodFailed", "action": "RestartJob"}])
    message = restart_message(raw, namespace, "flaky-master")
    assert "PodFailed" in message
    labelled_generation(raw, namespace, "flaky", 1)
    phase = wait_until(
        lambda: (
            _phase(raw, namespace, "flaky-master") in ("Succeeded", "Failed")
            and _phase(raw, namespace, "flaky-master")
        ),
        timeout=START_SECONDS,
        what="the recreated master's mpirun to finish",
    )
    out = logs(cluster, namespace, "flaky-master")
    assert phase == "Succeeded", out
    assert podgroup_status(raw, namespace, "flaky").get("restarts") == 1
    members = list_pods(raw, namespace, f"{GROUP_LABEL}=flaky")
    assert {p["metadata"]["labels"].get(RESTART_GENERATION_LABEL) for p in members} == {"1"}
    ranks = _rank_lines(out)
    assert len(ranks) == 4 and all(r.endswith("= 10") for r in ranks), out
