"""`gang-extender status` on the real control plane: the cases of issue 33.

A gang held behind another, seen with `-o wide` (who holds the GPUs of its
candidate nodes), one group's detail and `-o json`; a group the default scheduler
placed, counted; a stale leader Lease, said.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from extender.devcluster.cluster import LocalCluster
from extender.kube.rawapi import KubeError, RawApi, path_of
from tests.e2e.gang_fixtures import create, gang_pod, parse_status_table, podgroup, wait_until

REPO = Path(__file__).resolve().parents[2]


def status(cluster: LocalCluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "extender", "status", *args, f"--kubeconfig={cluster.kubeconfig}"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def test_a_gang_held_behind_another_shows_where_and_who_holds_the_gpus(
    gang_stack, cluster, raw, namespace, gpu_nodes
) -> None:
    pool = gpu_nodes(2, gpus=4)
    create(raw, namespace, podgroup("train", 2))
    for i in range(2):
        create(
            raw,
            namespace,
            gang_pod(f"train-{i}", "train", gpus=2, node_selector=pool.node_selector),
        )
    wait_until(
        lambda: (
            parse_status_table(status(cluster, "-n", namespace).stdout)
            .get("train", {})
            .get("PHASE")
            in ("Scheduled", "Running")
        ),
        what="train placed",
    )
    for group in ("big", "small"):  # each needs both nodes whole; train holds one of them
        create(raw, namespace, podgroup(group, 2))
        for i in range(2):
            create(
                raw,
                namespace,
                gang_pod(f"{group}-{i}", group, gpus=4, node_selector=pool.node_selector),
            )

    seen: list[str] = []

    def behind() -> str | None:
        out = status(cluster, "-n", namespace, "-o", "wide").stdout
        seen.append(out)
        row = parse_status_table(out.split("\n\n")[0]).get("small", {})
        held = f"gang {namespace}/small: 1/2 members placeable" in row.get("WAITING FOR", "")
        return out if held and f"\n{namespace}/small (Pending)" in out else None

    try:
        out = wait_until(behind, what="small held, with its candidate nodes, in -o wide")
    except BaseException:
        print(f"the last -o wide:\n{seen[-1] if seen else ''}")
        raise
    print(out)
    table, *rooms = out.split("\n\n")
    queue = {name: row["QUEUE"] for name, row in parse_status_table(table).items()}
    assert queue == {"big": "1", "small": "2", "train": "-"}  # small is held behind big
    header = table.splitlines()[0].split()
    assert "NODES" in header
    small = next(r for r in rooms if r.startswith(f"{namespace}/small (Pending)"))
    lines = [line.split(None, 3) for line in small.splitlines()[2:]]
    holders = {line[0]: (line[2], line[3] if len(line) > 3 else "") for line in lines}
    assert set(holders) == set(pool.nodes)
    assert any(held == ("0", f"{namespace}/train: bound 4") for held in holders.values()), holders

    detail = status(cluster, "small", "-n", namespace)
    assert detail.returncode == 0, detail.stderr
    print(detail.stdout)
    assert "Members:" in detail.stdout and "Conditions:" in detail.stdout
    members = [
        line.split() for line in detail.stdout.splitlines() if line.strip().startswith("small-")
    ]
    assert [(m[0], m[3]) for m in members] == [("small-0", "<none>"), ("small-1", "<none>")]

    data = json.loads(status(cluster, "-n", namespace, "-o", "json").stdout)
    train = next(g for g in data["groups"] if g["name"] == "train")
    assert (train["placed"], train["waitingFor"], len(train["nodes"])) == (2, "", 1)

    missing = status(cluster, "nosuch", "-n", namespace)
    assert missing.returncode == 1
    assert missing.stderr.startswith(f"error: no pod group nosuch in namespace {namespace}")


def test_a_group_the_default_scheduler_placed_shows_its_running_pods(
    gang_stack, cluster, raw, namespace, gpu_nodes
) -> None:
    pool = gpu_nodes(1, gpus=4)
    for i in range(2):
        pod = gang_pod(
            f"plain-{i}",
            "plain",
            gpus=1,
            node_selector=pool.node_selector,
            scheduler="default-scheduler",
            annotations={"gang-extender.io/min-available": "2"},
        )
        create(raw, namespace, pod)
    row = wait_until(
        lambda: (
            (r := parse_status_table(status(cluster, "-n", namespace).stdout).get("plain"))
            and r["RUNNING"] == "2"
            and r
        ),
        what="the default scheduler's pods counted",
    )
    assert (row["PHASE"], row["PLACED/MIN"], row["WAITING FOR"]) == ("Running", "2/2", "")


def test_a_stale_leader_lease_says_no_service_is_answering(
    gang_stack, cluster, raw: RawApi, namespace, gpu_nodes
) -> None:
    pool = gpu_nodes(1, gpus=4)
    create(raw, namespace, podgroup("idle", 2))
    for i in range(2):
        create(
            raw, namespace, gang_pod(f"idle-{i}", "idle", gpus=8, node_selector=pool.node_selector)
        )
    try:
        raw.call(
            "POST", path_of("api", "v1", "namespaces"), body={"metadata": {"name": "gang-system"}}
        )
    except KubeError as err:
        assert err.status == 409
    renewed = (datetime.now(UTC) - timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    leases = path_of("apis", "coordination.k8s.io", "v1", "namespaces", "gang-system", "leases")
    raw.call(
        "POST",
        leases,
        body={
            "metadata": {"name": "gang-extender-service"},
            "spec": {"holderIdentity": "gone-0", "leaseDurationSeconds": 15, "renewTime": renewed},
        },
    )
    try:
        done = status(cluster, "-n", namespace)
        assert done.returncode == 0, done.stderr
        row = parse_status_table(done.stdout)["idle"]
        assert row["WAITING FOR"].startswith(
            "no gang-extender service is answering: Lease gang-system/gang-extender-service "
            "(holder gone-0) was last renewed 5m ago"
        ), row
        assert done.stderr.startswith("warning: no gang-extender service is answering")
    finally:
        raw.call("DELETE", f"{leases}/gang-extender-service")
