"""`gang-extender status`: one row for every group the service reads, whatever declares it."""

from __future__ import annotations

from typing import Any

from extender.status_view import STATUS_HEADER, format_table
from tests.builders import status_rows


def pod(
    name: str,
    *,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    node: str | None = None,
    phase: str = "Pending",
    scheduler: str = "gang-extender",
    namespace: str = "team-a",
) -> dict[str, Any]:
    spec: dict[str, Any] = {"schedulerName": scheduler}
    if node:
        spec["nodeName"] = node
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels or {},
            "annotations": annotations or {},
        },
        "spec": spec,
        "status": {"phase": phase},
    }


def podgroup(name: str, min_member: int, status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {"minMember": min_member},
        "status": status or {},
    }


def waiting(pod_name: str, message: str, when: str) -> dict[str, Any]:
    return {
        "involvedObject": {"kind": "Pod", "namespace": "team-a", "name": pod_name},
        "reason": "GangWaiting",
        "message": message,
        "lastTimestamp": when,
    }


def row(rows: list[tuple[str, ...]], name: str) -> dict[str, str]:
    (found,) = [r for r in rows[1:] if r[1] == name]
    return dict(zip(STATUS_HEADER, found, strict=True))


def test_our_podgroup_shows_its_status_and_condition_message() -> None:
    message = "gang team-a/big: 1/2 members placeable: needs 4 nvidia.com/gpu in all"
    ours = podgroup(
        "big",
        2,
        {
            "phase": "Pending",
            "scheduled": 0,
            "running": 0,
            "conditions": [{"type": "Scheduled", "message": message}],
        },
    )
    rows = status_rows([ours], [], [], [])
    assert rows[0] == STATUS_HEADER
    assert row(rows, "big") == {
        "NAMESPACE": "team-a",
        "NAME": "big",
        "PHASE": "Pending",
        "PLACED/MIN": "0/2",
        "RUNNING": "0",
        "SOURCE": "gang-extender",
        "QUEUE": "-",
        "PRIORITY": "0",
        "WAITING FOR": message,
    }


def test_a_scheduler_plugins_group_is_counted_from_its_members_with_their_latest_reason() -> None:
    label = {"scheduling.x-k8s.io/pod-group": "pi"}
    pods = [
        pod("pi-worker-0", labels=label, node="n1", phase="Running"),
        pod("pi-worker-1", labels=label),
    ]
    events = [
        waiting(
            "pi-worker-1", "gang team-a/pi: 2/3 members exist; waiting", "2026-01-01T00:00:02Z"
        ),
        waiting("pi-worker-0", "gang team-a/pi: older", "2026-01-01T00:00:01Z"),
    ]
    rows = status_rows([], [podgroup("pi", 3)], pods, events)
    assert row(rows, "pi") == {
        "NAMESPACE": "team-a",
        "NAME": "pi",
        "PHASE": "Pending",
        "PLACED/MIN": "1/3",
        "RUNNING": "1",
        "SOURCE": "scheduler-plugins",
        "QUEUE": "1",
        "PRIORITY": "0",
        "WAITING FOR": "gang team-a/pi: 2/3 members exist; waiting",
    }


def test_a_placed_group_shows_no_waiting_reason() -> None:
    label = {"scheduling.x-k8s.io/pod-group": "pi"}
    pods = [pod(f"pi-{i}", labels=label, node="n1", phase="Running") for i in range(2)]
    events = [waiting("pi-0", "gang team-a/pi: 1/2 members exist", "2026-01-01T00:00:00Z")]
    got = row(status_rows([], [podgroup("pi", 2)], pods, events), "pi")
    assert (got["PHASE"], got["PLACED/MIN"], got["WAITING FOR"]) == ("Running", "2/2", "")


def test_members_without_any_podgroup_are_listed_with_their_annotation_size_or_unknown() -> None:
    volcano = {"scheduling.k8s.io/group-name": "vcjob", "gang-extender.io/min-available": "3"}
    pods = [
        pod("vc-0", annotations=volcano),
        pod("lonely-0", labels={"gang-extender.io/group": "lonely"}),
        pod("plain"),
    ]
    reason = (
        "gang team-a/lonely: no PodGroup lonely and no gang-extender.io/min-available "
        "annotation; create the PodGroup or annotate the pods"
    )
    rows = status_rows([], [], pods, [waiting("lonely-0", reason, "2026-01-01T00:00:00Z")])
    assert [r[1] for r in rows[1:]] == ["lonely", "vcjob"]
    assert row(rows, "vcjob")["PLACED/MIN"] == "0/3"
    assert row(rows, "vcjob")["SOURCE"] == "pods"
    assert row(rows, "lonely")["PLACED/MIN"] == "0/?"
    assert row(rows, "lonely")["WAITING FOR"] == reason


def test_our_podgroup_wins_over_a_scheduler_plugins_one_of_the_same_name() -> None:
    rows = status_rows([podgroup("x", 2)], [podgroup("x", 5)], [], [])
    assert len(rows) == 2 and row(rows, "x")["SOURCE"] == "gang-extender"
    assert row(rows, "x")["PLACED/MIN"] == "0/2"


def test_the_table_pads_every_column_but_the_free_text_one() -> None:
    text = format_table([("A", "B", "WHY"), ("long-name", "x", "because")])
    assert text.splitlines() == ["A          B  WHY", "long-name  x  because"]


def failed_scheduling(pod_name: str, message: str, when: str) -> dict[str, Any]:
    return {**waiting(pod_name, message, when), "reason": "FailedScheduling"}


def test_without_a_gangwaiting_event_the_reason_is_cut_out_of_failedscheduling() -> None:
    pods = [pod("lonely-0", labels={"gang-extender.io/group": "lonely"})]
    gang = (
        "gang team-a/lonely: no PodGroup lonely and no gang-extender.io/min-available "
        "annotation; create the PodGroup or annotate the pods"
    )
    text = (
        f"0/3 nodes are available: 3 {gang}. no new claims to deallocate, preemption: "
        "0/3 nodes are available: 3 Preemption is not helpful for scheduling."
    )
    rows = status_rows([], [], pods, [failed_scheduling("lonely-0", text, "2026-01-01T00:00:00Z")])
    assert row(rows, "lonely")["WAITING FOR"] == gang


def test_kube_scheduler_s_own_reason_is_shown_whole_and_gangwaiting_wins_over_it() -> None:
    pods = [pod("big-0", labels={"scheduling.x-k8s.io/pod-group": "big"})]
    own = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: 0/3 nodes"
    rows = status_rows(
        [], [podgroup("big", 1)], pods, [failed_scheduling("big-0", own, "2026-01-01T00:00:09Z")]
    )
    assert row(rows, "big")["WAITING FOR"] == own
    events = [
        failed_scheduling("big-0", own, "2026-01-01T00:00:09Z"),
        waiting("big-0", "gang team-a/big: waiting to be scheduled", "2026-01-01T00:00:01Z"),
    ]
    rows = status_rows([], [podgroup("big", 1)], pods, events)
    assert row(rows, "big")["WAITING FOR"] == "gang team-a/big: waiting to be scheduled"


def test_pods_of_a_group_that_another_scheduler_places_are_named_with_the_fix() -> None:
    label = {"scheduling.x-k8s.io/pod-group": "pi"}
    pods = [
        pod("pi-worker-0", labels=label),
        *(pod(f"pi-w{i}", labels=label, scheduler="default-scheduler") for i in range(2)),
    ]
    events = [waiting("pi-worker-0", "gang team-a/pi: 1/3 members exist", "2026-01-01T00:00:00Z")]
    got = row(status_rows([], [podgroup("pi", 3)], pods, events), "pi")
    assert got["PLACED/MIN"] == "0/3"  # not counted ...
    assert got["WAITING FOR"] == (  # ... but named, with what to set
        "gang team-a/pi: 2 pods of this group use schedulerName default-scheduler "
        "(pi-w0, pi-w1): set schedulerName: gang-extender in their pod template"
    )


def test_a_placed_group_of_ours_waits_for_nothing() -> None:
    """Issue 33: WAITING FOR read `4/4 members bound` for running groups."""
    bound_message = "gang team-a/big: 2/2 members bound"
    ours = podgroup(
        "big",
        2,
        {
            "phase": "Running",
            "scheduled": 2,
            "running": 2,
            "conditions": [{"type": "Scheduled", "message": bound_message}],
        },
    )
    assert row(status_rows([ours], [], [], []), "big")["WAITING FOR"] == ""


def test_a_volcano_group_is_listed_with_its_source_and_wins_over_a_coscheduling_one() -> None:
    annotation = {"scheduling.k8s.io/group-name": "vc"}
    pods = [pod(f"vc-{i}", annotations=annotation, node="n1", phase="Running") for i in range(4)]
    volcano = {**podgroup("vc", 4), "apiVersion": "scheduling.volcano.sh/v1beta1"}
    coscheduling = {**podgroup("vc", 9), "apiVersion": "scheduling.x-k8s.io/v1alpha1"}
    got = row(status_rows([], [volcano, coscheduling], pods, []), "vc")
    assert (got["SOURCE"], got["PHASE"], got["PLACED/MIN"]) == ("volcano", "Running", "4/4")
    no_minimum = {"apiVersion": "scheduling.volcano.sh/v1beta1", **podgroup("solo", 0)}
    del no_minimum["spec"]["minMember"]
    assert row(status_rows([], [no_minimum], [], []), "solo")["PLACED/MIN"] == "0/1"


def test_held_groups_are_numbered_in_queue_order_with_their_priority() -> None:
    def member(name: str, group: str, priority: int, created: str, **kw: Any) -> dict[str, Any]:
        found = pod(name, labels={"gang-extender.io/group": group}, **kw)
        found["spec"]["priority"] = priority
        found["metadata"]["creationTimestamp"] = created
        return found

    pods = [
        member("old-0", "old", 0, "2026-01-01T00:00:01Z"),
        member("big-0", "big", 1000, "2026-01-01T00:00:09Z"),
        member("new-0", "new", 0, "2026-01-01T00:00:05Z"),
        member("gated-0", "gated", 5000, "2026-01-01T00:00:00Z"),
        member("done-0", "done", 7, "2026-01-01T00:00:00Z", node="n1", phase="Running"),
    ]
    pods[3]["spec"]["schedulingGates"] = [{"name": "kueue.x-k8s.io/admission"}]
    for p in pods:
        p["metadata"]["annotations"]["gang-extender.io/min-available"] = "1"
    rows = status_rows([], [], pods, [])
    queue = {
        name: (row(rows, name)["QUEUE"], row(rows, name)["PRIORITY"])
        for name in ("big", "old", "new", "gated", "done")
    }
    assert queue == {
        "big": ("1", "1000"),
        "old": ("2", "0"),
        "new": ("3", "0"),
        "gated": ("-", "5000"),
        "done": ("-", "7"),
    }
    assert rows[0].index("QUEUE") == rows[0].index("WAITING FOR") - 2


def test_a_group_from_pods_is_phased_as_the_service_phases_it() -> None:
    """The CLI's rows for groups without a status of ours use the service's phase ladder
    (domain/status/status.py): every member Failed is Failed, as on a PodGroup it writes."""
    from extender.domain.objects.model import PodInfo
    from extender.domain.status.status import MemberCounts

    size = {"gang-extender.io/min-available": "2"}
    cases = {
        "failed": [("Failed", "n1"), ("Failed", "n1")],
        "done": [("Succeeded", "n1"), ("Succeeded", "n2")],
        "running": [("Running", "n1"), ("Running", "n2")],
        "bound": [("Pending", "n1"), ("Pending", "n2")],
        "short": [("Pending", None), ("Running", "n1")],
    }
    pods = [
        pod(
            f"{group}-{i}",
            labels={"gang-extender.io/group": group},
            annotations=size,
            node=node,
            phase=phase,
        )
        for group, members in cases.items()
        for i, (phase, node) in enumerate(members)
    ]
    rows = status_rows([], [], pods, [])
    shown = {group: row(rows, group)["PHASE"] for group in cases}
    assert shown == {
        "failed": "Failed",
        "done": "Succeeded",
        "running": "Running",
        "bound": "Scheduled",
        "short": "Pending",
    }
    for group in cases:
        members = [PodInfo.from_api(p) for p in pods if p["metadata"]["name"].startswith(group)]
        assert shown[group] == MemberCounts.of(members).phase(2)
