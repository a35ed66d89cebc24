"""`gang-extender status` as a kubectl-grade tool (issue 33): the cases a newcomer met.

Pure: rows, wide room, one-group detail, json/yaml and the watch loop from
snapshots of API objects; the command's one-line errors against no cluster at all.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from extender.cli import watch
from extender.status_report import NO_WORD, StatusObjects, group_rows, service_silence
from extender.status_view import as_data, as_json, detail, table, wide

NOW = datetime(2026, 1, 1, 0, 10, tzinfo=UTC)
GROUP = "gang-extender.io/group"
PLANNED = "gang-extender.io/planned-node"


def pod(
    name: str,
    group: str | None = None,
    *,
    ns: str = "team-a",
    node: str | None = None,
    phase: str = "Pending",
    gpus: int = 0,
    scheduler: str = "gang-extender",
    size: int | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    meta_labels = dict(labels or {})
    if group:
        meta_labels[GROUP] = group
    meta_annotations = dict(annotations or {})
    if size is not None:
        meta_annotations["gang-extender.io/min-available"] = str(size)
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "containers": [{"name": "main", "resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}]
        if gpus
        else [{"name": "main"}],
    }
    if node:
        spec["nodeName"] = node
    return {
        "metadata": {
            "name": name,
            "namespace": ns,
            "uid": f"uid-{ns}-{name}",
            "labels": meta_labels,
            "annotations": meta_annotations,
            "creationTimestamp": "2026-01-01T00:00:00Z",
        },
        "spec": spec,
        "status": {"phase": phase},
    }


def node(name: str, gpus: int, taint: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if taint:
        spec["taints"] = [
            {"key": "gang-extender.io/reserved", "value": taint, "effect": "NoSchedule"}
        ]
    return {
        "metadata": {"name": name, "labels": {}},
        "spec": spec,
        "status": {
            "allocatable": {
                "cpu": "32",
                "memory": "256Gi",
                "pods": "110",
                "nvidia.com/gpu": str(gpus),
            }
        },
    }


def lease(renewed: str, holder: str = "gang-extender-7d9-abc") -> dict[str, Any]:
    return {
        "metadata": {"name": "gang-extender-service", "namespace": "gang-system"},
        "spec": {"holderIdentity": holder, "renewTime": renewed, "leaseDurationSeconds": 15},
    }


def ours(name: str, size: int, status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.gang-extender.io/v1alpha1",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {"minMember": size},
        "status": status or {},
    }


def by_name(objects: StatusObjects) -> dict[str, Any]:
    return {r.name: r for r in group_rows(objects)}


def held_message(name: str) -> dict[str, Any]:
    return {
        "phase": "Pending",
        "scheduled": 0,
        "running": 0,
        "conditions": [
            {
                "type": "Scheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": f"gang team-a/{name}: 0/2 members placeable",
            }
        ],
    }


def test_an_expired_leader_lease_says_no_service_is_answering_instead_of_an_empty_reason() -> None:
    objects = StatusObjects(
        now=NOW,
        ours=[
            ours("big", 2, held_message("big")),
            ours("done", 1, {"phase": "Running", "scheduled": 1, "running": 1}),
        ],
        pods=[
            pod("big-0", "big"),
            pod("big-1", "big"),
            pod("done-0", "done", node="n1", phase="Running"),
        ],
        lease=lease("2026-01-01T00:05:00.000000Z"),
    )
    silence = service_silence(objects)
    assert silence == (
        "no gang-extender service is answering: Lease gang-system/gang-extender-service "
        "(holder gang-extender-7d9-abc) was last renewed 5m ago; check: kubectl -n gang-system get pods,lease"
    )
    rows = by_name(objects)
    assert (
        rows["big"].waiting_for == f"{silence}; last word: gang team-a/big: 0/2 members placeable"
    )
    assert rows["done"].waiting_for == ""
    fresh = StatusObjects(now=NOW, lease=lease("2026-01-01T00:09:58Z"))
    assert service_silence(fresh) is None


def test_without_a_lease_a_group_the_service_never_spoke_of_says_so() -> None:
    """Issue 33: with no service running the group showed `Pending` and an empty reason."""
    objects = StatusObjects(now=NOW, pods=[pod("w-0", "w", size=2), pod("w-1", "w", size=2)])
    (row,) = group_rows(objects)
    assert (row.phase, row.placed_of_min, row.waiting_for) == ("Pending", "0/2", NO_WORD)


def test_a_group_placed_by_the_default_scheduler_shows_its_running_pods() -> None:
    """Issue 33: RUNNING read 0 while the pods ran."""
    pods = [
        pod(f"d-{i}", "d", node="n1", phase="Running", scheduler="default-scheduler", size=2)
        for i in range(2)
    ]
    (row,) = group_rows(StatusObjects(now=NOW, pods=pods))
    assert (row.phase, row.placed_of_min, row.running, row.waiting_for) == ("Running", "2/2", 2, "")
    assert {m.scheduler for m in row.members} == {"default-scheduler"}


def test_a_scheduler_plugins_group_shows_our_phase_and_the_one_written_into_theirs() -> None:
    """Issue 33: `Scheduled 3/3` here, `phase: Scheduling` there, no mapping shown."""
    label = {"scheduling.x-k8s.io/pod-group": "pi"}
    pods = [
        pod("pi-worker-0", labels=label, node="n1", phase="Running"),
        pod("pi-worker-1", labels=label, node="n1", phase="Running"),
        pod("pi-launcher-0", labels=label, node="n2", phase="Succeeded"),
    ]
    theirs = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "metadata": {"name": "pi", "namespace": "team-a"},
        "spec": {"minMember": 3},
        "status": {"phase": "Scheduling", "running": 2, "succeeded": 1},
    }
    (row,) = group_rows(StatusObjects(now=NOW, foreign=[theirs], pods=pods))
    assert (row.phase, row.placed_of_min, row.source_cell) == (
        "Scheduled",
        "3/3",
        "scheduler-plugins (Scheduling)",
    )
    assert "scheduler-plugins (Scheduling)" in table([row]).splitlines()[1]


def held_behind_another() -> StatusObjects:
    """team-a/small (2 x 4 GPUs) held: team-b/train runs on n1, team-b/big is planned on
    n2 beside a plain pod, n3 is reserved for team-b/big by a placeholder and a taint."""
    return StatusObjects(
        now=NOW,
        ours=[ours("small", 2, held_message("small"))],
        pods=[
            pod("small-0", "small", gpus=4),
            pod("small-1", "small", gpus=4),
            *(
                pod(f"train-{i}", "train", ns="team-b", node="n1", phase="Running", gpus=2, size=2)
                for i in range(2)
            ),
            pod("big-0", "big", ns="team-b", gpus=2, size=2, annotations={PLANNED: "n2"}),
            pod("notebook", ns="team-c", node="n2", phase="Running", gpus=1),
            pod(
                "gang-extender-reserve-big-n3",
                ns="team-b",
                node="n3",
                phase="Running",
                gpus=4,
                labels={"gang-extender.io/placeholder": "big"},
            ),
        ],
        nodes=[node("n1", 4), node("n2", 4), node("n3", 4, taint="team-b.big"), node("cpu", 0)],
    )


def test_wide_names_free_gpus_per_candidate_node_and_who_holds_the_rest() -> None:
    text = wide(group_rows(held_behind_another()), held_behind_another())
    assert "NODES" in text.splitlines()[0]
    section = text[text.index("team-a/small (Pending): GPUs on its candidate nodes") :]
    lines = [line.split(None, 3) for line in section.splitlines()[2:5]]
    assert lines == [
        ["n1", "4", "0", "team-b/train: bound 4"],
        ["n2", "4", "1", "pod team-c/notebook (1), team-b/big: planned 2"],
        ["n3", "4", "0", "taint gang-extender.io/reserved=team-b.big, team-b/big: reserved 4"],
    ]
    train = next(
        line for line in text.splitlines() if line.startswith("team-b") and " train " in line
    )
    assert train.split()[-1] == "n1"  # NODES, and nothing waited for


def test_one_group_shows_members_their_nodes_last_scheduler_reason_and_conditions() -> None:
    objects = held_behind_another()
    failed = {
        "involvedObject": {"namespace": "team-a", "name": "small-1"},
        "reason": "FailedScheduling",
        "message": "0/4 nodes are available: 4 Insufficient nvidia.com/gpu.",
        "lastTimestamp": "2026-01-01T00:09:00Z",
    }
    objects = StatusObjects(**{**objects.__dict__, "events": [failed]})
    row = by_name(objects)["small"]
    text = detail(row, objects)
    assert "Waiting for:  gang team-a/small: 0/2 members placeable" in text
    assert "Scheduled  False   Unschedulable  gang team-a/small: 0/2 members placeable" in text
    member = next(line for line in text.splitlines() if line.strip().startswith("small-1"))
    assert member.split(None, 5) == [
        "small-1",
        "worker",
        "gang-extender",
        "<none>",
        "Pending",
        "0/4 nodes are available: 4 Insufficient nvidia.com/gpu.",
    ]
    assert "Candidate nodes:" in text


def test_json_and_yaml_carry_every_group_with_members() -> None:
    objects = held_behind_another()
    data = json.loads(as_json(group_rows(objects), service_silence(objects)))
    assert data["service"] == {"answering": True, "message": ""}
    small = next(g for g in data["groups"] if g["name"] == "small")
    assert (small["phase"], small["placed"], small["minMember"], small["queue"]) == (
        "Pending",
        0,
        2,
        1,
    )
    assert [m["name"] for m in small["members"]] == ["small-0", "small-1"]
    assert yaml.safe_load(yaml.safe_dump(as_data(group_rows(objects), None))) == data


def test_watch_prints_the_table_then_only_rows_that_changed(capsys: Any) -> None:
    frames = iter(
        [
            ["HEAD", "a Pending", "b Pending"],
            ["HEAD", "a Pending", "b Pending"],
            ["HEAD", "a Running", "b Pending"],
        ]
    )
    assert watch(lambda: next(frames), 0.0, table=True, sleep=lambda _s: None, ticks=3) == 0
    assert capsys.readouterr().out.splitlines() == ["HEAD", "a Pending", "b Pending", "a Running"]


def run_status(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "extender", "status", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", **env},
        cwd=Path(__file__).resolve().parents[2],
    )


def test_no_kubeconfig_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    done = run_status(env={"HOME": str(tmp_path)})
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith(f"error: no kubeconfig: none at {tmp_path}/.kube/config;")


def test_an_unreachable_api_server_is_named_with_what_to_check(tmp_path: Path) -> None:
    config = tmp_path / "kubeconfig"
    config.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    done = run_status("-o", "wide", env={"HOME": str(tmp_path), "KUBECONFIG": str(config)})
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1
    assert done.stderr.startswith(
        f"error: cannot reach the API server at https://127.0.0.1:1 (from {config}): "
        "Connection refused; "
    )
    assert done.stderr.rstrip().endswith(
        "check that the cluster is running and that this kubeconfig points at it"
    )
