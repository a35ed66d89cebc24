"""A new user's three mistakes, each told with its cause and fix, and fixed as the docs say.

For each (pods left to the default scheduler, all or some; min-available larger
than the job; a member too big for any node): the PodGroup's `Scheduled`
condition and the `gang-extender status` line name the cause and the fix; then
the fix docs/troubleshooting.md gives (the first bash block under the mistake's
heading) is run as written, with only the namespace replaced, and the gang binds.
The workloads are Deployments, as a new user writes them (rolling update and all).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from extender.devcluster.cluster import LocalCluster
from extender.domain.objects.membership import GROUP_LABEL, MIN_AVAILABLE_ANNOTATION, TASK_LABEL
from extender.kube.rawapi import RawApi, path_of
from tests.e2e.gang_fixtures import (
    bound,
    condition_message,
    create,
    get_podgroup,
    list_pods,
    parse_status_table,
    podgroup,
    wait_until,
)

REPO = Path(__file__).resolve().parents[2]
TROUBLESHOOTING = REPO / "docs" / "troubleshooting.md"
DOC_NAMESPACE = "team-a"
PLACED = ("Scheduled", "Running")

OTHER_SCHEDULER = "Pods placed one by one: `schedulerName` is not `gang-extender`"
TOO_LARGE = "`N/M members exist` forever: the size is larger than the job"
TOO_BIG = "A member too big for any node"


def fix_commands(heading: str) -> list[str]:
    """The commands of the first bash block under `### <heading>` in troubleshooting.md."""
    text = TROUBLESHOOTING.read_text()
    found = re.search(rf"^### {re.escape(heading)}$", text, re.M)
    assert found, f"docs/troubleshooting.md has a section {heading!r}"
    block = re.search(r"```bash\n(.*?)```", text[found.end() :], re.S)
    assert block, f"with a bash block: {heading!r}"
    return [line for line in block.group(1).splitlines() if line.strip()]


def run_as_written(cluster: LocalCluster, namespace: str, commands: list[str]) -> None:
    env = {
        **os.environ,
        "KUBECONFIG": str(cluster.kubeconfig),
        "PATH": os.pathsep.join(
            [str(cluster.bin_dir), str(Path(sys.executable).parent), "/usr/bin:/bin"]
        ),
    }
    for command in commands:
        command = re.sub(rf"-n {DOC_NAMESPACE}\b", f"-n {namespace}", command)
        done = subprocess.run(
            ["bash", "-c", command], env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, f"{command!r} failed:\n{done.stdout}{done.stderr}"


def status_row(cluster: LocalCluster, namespace: str, group: str) -> dict[str, str]:
    out = subprocess.run(
        [sys.executable, "-m", "extender", "status", "--kubeconfig", str(cluster.kubeconfig)]
        + ["-n", namespace],
        capture_output=True,
        text=True,
        check=True,
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        },
        timeout=120,
    ).stdout
    return parse_status_table(out).get(group, {})


def deployment(
    name: str,
    group: str,
    replicas: int,
    *,
    pool: dict[str, str],
    gpus: int = 1,
    task: str = "worker",
    scheduler: str | None = None,
    min_available: int | None = None,
) -> dict[str, Any]:
    """A Deployment as a new user writes it: default strategy, schedulerName maybe forgotten."""
    labels = {GROUP_LABEL: group, TASK_LABEL: task}
    annotations = {MIN_AVAILABLE_ANNOTATION: str(min_available)} if min_available else {}
    spec: dict[str, Any] = {
        "nodeSelector": pool,
        "containers": [
            {
                "name": "main",
                "image": "registry.example/train:1",
                "resources": {
                    "requests": {"cpu": "100m", "memory": "128Mi", "nvidia.com/gpu": str(gpus)},
                    "limits": {"nvidia.com/gpu": str(gpus)},
                },
            }
        ],
    }
    if scheduler:
        spec["schedulerName"] = scheduler
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels, "annotations": annotations}, "spec": spec},
        },
    }


def create_deployment(raw: RawApi, namespace: str, body: dict[str, Any]) -> None:
    raw.call(
        "POST", path_of("apis", "apps", "v1", "namespaces", namespace, "deployments"), body=body
    )


def told(
    raw: RawApi, cluster: LocalCluster, namespace: str, group: str, *pieces: str
) -> tuple[str, str]:
    """Wait until the condition and the status line both say every piece; (condition, line)."""

    def probe() -> tuple[str, str] | None:
        message = condition_message(get_podgroup(raw, namespace, group))
        line = status_row(cluster, namespace, group).get("WAITING FOR", "")
        if all(p in message and p in line for p in pieces):
            return message, line
        return None

    found: tuple[str, str] = wait_until(probe, what=f"condition and status saying {pieces}")
    return found


def gang_bound(raw: RawApi, cluster: LocalCluster, namespace: str, group: str, size: int) -> None:
    def probe() -> bool:
        pods = [p for p in list_pods(raw, namespace) if not p["metadata"].get("deletionTimestamp")]
        pg = get_podgroup(raw, namespace, group) or {}
        row = status_row(cluster, namespace, group)
        return (
            len(bound(pods)) == size == len(pods)
            and all(p["spec"].get("schedulerName") == "gang-extender" for p in pods)
            and (pg.get("status") or {}).get("phase") in PLACED
            and row.get("PLACED/MIN") == f"{size}/{size}"
        )

    wait_until(probe, what=f"gang {group} of {size} bound, and said so")


# ---------------------------------------------------------------------- the mistakes
def test_pods_all_left_to_the_default_scheduler_are_named_then_the_docs_fix_binds_the_gang(
    gang_stack, raw, namespace, gpu_nodes, cluster
) -> None:
    pool = gpu_nodes(3, gpus=4).node_selector
    create(raw, namespace, podgroup("train", 4))
    create_deployment(raw, namespace, deployment("train-worker", "train", 4, pool=pool))
    wait_until(
        lambda: len(bound(list_pods(raw, namespace))) == 4,
        what="the default scheduler placing all 4, one by one",
    )
    message, _ = told(
        raw,
        cluster,
        namespace,
        "train",
        "4 pods of this group use schedulerName default-scheduler",
        "set schedulerName: gang-extender",
    )
    assert "members exist" not in message
    events = raw.call("GET", path_of("api", "v1", "namespaces", namespace, "events"))["items"]
    assert [e for e in events if e.get("reason", "").startswith("Gang")] == [], (
        "no gang Events on pods gang-extender never scheduled"
    )

    run_as_written(cluster, namespace, fix_commands(OTHER_SCHEDULER))
    gang_bound(raw, cluster, namespace, "train", 4)


def test_workers_left_to_the_default_scheduler_are_named_then_the_docs_fix_binds_the_gang(
    gang_stack, raw, namespace, gpu_nodes, cluster
) -> None:
    pool = gpu_nodes(3, gpus=4).node_selector
    master = deployment(
        "train-master",
        "train",
        1,
        pool=pool,
        task="master",
        scheduler="gang-extender",
        min_available=4,
    )
    create_deployment(raw, namespace, master)
    create_deployment(raw, namespace, deployment("train-worker", "train", 3, pool=pool))
    told(
        raw,
        cluster,
        namespace,
        "train",
        "3 pods of this group use schedulerName default-scheduler (train-worker-",
        "set schedulerName: gang-extender",
    )

    run_as_written(cluster, namespace, fix_commands(OTHER_SCHEDULER))
    gang_bound(raw, cluster, namespace, "train", 4)


def test_min_available_larger_than_the_job_says_so_then_the_docs_fix_binds_the_gang(
    gang_stack, raw, namespace, gpu_nodes, cluster
) -> None:
    pool = gpu_nodes(3, gpus=4).node_selector
    body = deployment("train", "train", 4, pool=pool, scheduler="gang-extender", min_available=5)
    create_deployment(raw, namespace, body)
    told(
        raw,
        cluster,
        namespace,
        "train",
        "4/5 members exist",
        f"set {MIN_AVAILABLE_ANNOTATION} in the pod template",
    )
    created = get_podgroup(raw, namespace, "train")
    assert created is not None and created["spec"]["minMember"] == 5

    run_as_written(cluster, namespace, fix_commands(TOO_LARGE))
    gang_bound(raw, cluster, namespace, "train", 4)
    followed = get_podgroup(raw, namespace, "train")
    assert followed is not None and followed["spec"]["minMember"] == 4

    # Its last member gone, the PodGroup gang-extender created goes too.
    raw.call(
        "DELETE", path_of("apis", "apps", "v1", "namespaces", namespace, "deployments", "train")
    )
    wait_until(
        lambda: get_podgroup(raw, namespace, "train") is None,
        what="the created PodGroup deleted with its last pod",
    )


def test_a_member_too_big_for_any_node_is_told_then_the_docs_fix_binds_the_gang(
    gang_stack, raw, namespace, gpu_nodes, cluster
) -> None:
    pool = gpu_nodes(3, gpus=4).node_selector
    body = deployment(
        "train", "train", 3, pool=pool, gpus=8, scheduler="gang-extender", min_available=3
    )
    create_deployment(raw, namespace, body)
    told(
        raw,
        cluster,
        namespace,
        "train",
        "kube-scheduler's own filters refuse 3 members",
        "Insufficient nvidia.com/gpu; lower the per-pod request",
    )

    run_as_written(cluster, namespace, fix_commands(TOO_BIG))
    gang_bound(raw, cluster, namespace, "train", 3)


def test_the_fix_blocks_are_found(pytestconfig: pytest.Config) -> None:
    for heading in (OTHER_SCHEDULER, TOO_LARGE, TOO_BIG):
        commands = fix_commands(heading)
        assert commands and all(c.startswith("kubectl -n team-a ") for c in commands), commands
