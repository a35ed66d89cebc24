"""`gang-extender status` beside Kueue: a group whose Job Kueue has not admitted
waits for Kueue (its quota), and the row says which queue; once admitted, it does not."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from extender.status_report import KUEUE_WAITING, StatusObjects, group_rows

NOW = datetime(2026, 1, 1, 0, 10, tzinfo=UTC)
REFUSED = "couldn't assign flavors to pod set main: insufficient quota for nvidia.com/gpu"


def workload(
    group: str | None, *, admitted: bool = False, queue: str = "gpus", size: str = "8"
) -> dict[str, Any]:
    labels = {"gang-extender.io/group": group} if group else {}
    status: dict[str, Any] = {
        "conditions": [{"type": "QuotaReserved", "status": "False", "message": REFUSED}]
    }
    if admitted:
        status = {
            "admission": {"clusterQueue": "cq"},
            "conditions": [{"type": "QuotaReserved", "status": "True"}],
        }
    return {
        "metadata": {"name": f"job-{group}-1a2b3", "namespace": "team-a"},
        "spec": {
            "queueName": queue,
            "podSets": [
                {
                    "name": "main",
                    "count": 8,
                    "template": {
                        "metadata": {
                            "labels": labels,
                            "annotations": {"gang-extender.io/min-available": size},
                        }
                    },
                }
            ],
        },
        "status": status,
    }


LOCAL_QUEUE = {"metadata": {"name": "gpus", "namespace": "team-a"}, "spec": {"clusterQueue": "cq"}}


def test_a_job_kueue_has_not_admitted_waits_for_kueue_naming_both_queues_and_its_reason() -> None:
    objects = StatusObjects(
        now=NOW, kueue_workloads=[workload("big")], kueue_local_queues=[LOCAL_QUEUE]
    )
    [row] = group_rows(objects)
    assert (row.namespace, row.name, row.phase, row.placed, row.min_member) == (
        "team-a",
        "big",
        "Pending",
        0,
        8,
    )
    assert row.waiting_for == (f"{KUEUE_WAITING} (ClusterQueue cq, LocalQueue gpus): {REFUSED}")


def test_an_admitted_workload_or_one_without_a_group_adds_no_kueue_wait() -> None:
    objects = StatusObjects(
        now=NOW,
        kueue_workloads=[workload("done", admitted=True), workload(None)],
        kueue_local_queues=[LOCAL_QUEUE],
    )
    assert group_rows(objects) == []


def test_an_unknown_local_queue_is_shown_as_such_not_guessed() -> None:
    objects = StatusObjects(now=NOW, kueue_workloads=[workload("big", queue="nope")])
    [row] = group_rows(objects)
    assert row.waiting_for.startswith(f"{KUEUE_WAITING} (ClusterQueue ?, LocalQueue nope)")


def test_a_bad_size_on_the_template_is_not_reported_as_a_kueue_wait() -> None:
    objects = StatusObjects(now=NOW, kueue_workloads=[workload("big", size="zero")])
    assert group_rows(objects) == []
