"""The phase, counts and condition a user reads on a PodGroup, case by case (pure).

A table of member states -> what `kubectl get podgroup` shows: the phase, the
reason, the bound/running/succeeded/failed counts, and whether the Scheduled
condition is True. The boundaries are exact: a gang is Running when exactly
minMember members run, not one more.
"""

from __future__ import annotations

from typing import Any

import pytest

from extender.domain.gang.gang import GangCore
from extender.domain.objects.membership import GroupKey
from extender.domain.objects.model import GroupSpec, PodInfo, upstream_podgroup_spec
from extender.domain.status.status import GroupStatus, group_status
from tests.builders import make_node, make_pod, make_podgroup
from tests.core_builder import make_core

T0 = 1_000_000.0
KEY = GroupKey("default", "train")


def new_core() -> GangCore:
    return make_core(make_node(f"n{n}").gpus(4).obj() for n in range(3))


def status_in(core: GangCore, *pods: dict[str, Any], min_member: int | None) -> GroupStatus:
    for p in pods:
        core.observe_pod(PodInfo.from_api(p), T0)
    if min_member is not None:
        core.apply_group_spec(
            GroupSpec.from_podgroup(make_podgroup("train", min_member), source="PodGroup")
        )
    status = group_status(core, KEY)
    assert status is not None
    return status


def status_of(*pods: dict[str, Any], min_member: int | None = 2) -> GroupStatus:
    return status_in(new_core(), *pods, min_member=min_member)


def member(i: int, phase: str | None = None, node: str | None = None) -> dict[str, Any]:
    pod = make_pod(f"train-{i}").group("train").gpus(1)
    if node is not None:
        pod = pod.node(node)
    if phase is not None:
        pod = pod.phase(phase)
    return pod.obj()


def seen(s: GroupStatus) -> tuple[str, str, int, int, int, int, int, str]:
    """What `kubectl get podgroup -o yaml` shows, in one tuple."""
    return (
        s.phase,
        s.reason,
        s.members,
        s.scheduled,
        s.running,
        s.succeeded,
        s.failed,
        s.condition_status,
    )


# (name, members, minMember) -> (phase, reason, members, scheduled, running, succeeded,
# failed, condition)
PHASES: list[tuple[str, list[dict[str, Any]], tuple[str, str, int, int, int, int, int, str]]] = [
    (
        "exactly minMember succeeded",
        [member(0, "Succeeded", "n0"), member(1, "Succeeded", "n0")],
        ("Succeeded", "Succeeded", 0, 2, 0, 2, 0, "True"),
    ),
    (
        "one succeeded, one still running: a finished member no longer counts as running",
        [member(0, "Succeeded", "n0"), member(1, node="n0")],
        ("Scheduled", "Scheduled", 1, 2, 1, 1, 0, "True"),
    ),
    (
        "exactly minMember succeeded while a spare member still runs",
        [member(0, "Succeeded", "n0"), member(1, "Succeeded", "n0"), member(2, node="n1")],
        ("Succeeded", "Succeeded", 1, 3, 1, 2, 0, "True"),
    ),
    (
        "the Job's successPolicy met: one succeeded, the others removed by the Job",
        [member(0, "Succeeded", "n0")],
        ("Succeeded", "Succeeded", 0, 1, 0, 1, 0, "True"),
    ),
    (
        "one succeeded, one failed, none left: failed wins",
        [member(0, "Succeeded", "n0"), member(1, "Failed", "n0")],
        ("Failed", "MembersFailed", 0, 2, 0, 1, 1, "True"),
    ),
    (
        "every member failed before binding",
        [member(0, "Failed"), member(1, "Failed")],
        ("Failed", "MembersFailed", 0, 0, 0, 0, 2, "False"),
    ),
    (
        "one failed while another still waits",
        [member(0, "Failed"), member(1)],
        ("Pending", "WaitingForMembers", 1, 0, 0, 0, 1, "False"),
    ),
    (
        "exactly minMember running",
        [member(0, node="n0"), member(1, node="n1")],
        ("Running", "Running", 2, 2, 2, 0, 0, "True"),
    ),
    (
        "both bound, one container still starting",
        [member(0, node="n0"), member(1, "Pending", "n1")],
        ("Scheduled", "Scheduled", 2, 2, 1, 0, 0, "True"),
    ),
    (
        "one bound of two",
        [member(0, node="n0"), member(1)],
        ("Pending", "Unschedulable", 2, 1, 1, 0, 0, "False"),
    ),
    (
        "nothing bound yet, all created",
        [member(0), member(1)],
        ("Pending", "Unschedulable", 2, 0, 0, 0, 0, "False"),
    ),
]


@pytest.mark.parametrize(
    ("pods", "expected"), [(p, e) for _, p, e in PHASES], ids=[n for n, _, _ in PHASES]
)
def test_phase_reason_counts_and_condition(
    pods: list[dict[str, Any]], expected: tuple[str, str, int, int, int, int, int, str]
) -> None:
    status = status_of(*pods)
    assert seen(status) == expected
    assert status.min_member == 2


def test_a_finished_gang_whose_job_removed_members_says_so_not_waiting_for_them() -> None:
    # examples/deepspeed: index 0 succeeds, the Job removes ranks 1-3; the gang is not
    # waiting for members to be created.
    status = status_of(member(0, "Succeeded", "n0"), min_member=4)
    assert (status.phase, status.members, status.succeeded) == ("Succeeded", 0, 1)
    assert "waiting" not in status.message and "1 member(s) succeeded" in status.message


def test_a_bound_gang_says_how_many_of_its_members_are_bound() -> None:
    status = status_of(member(0, node="n0"), member(1, node="n1"), member(2), min_member=2)
    assert status.message == "gang default/train: 2/2 members bound"


def test_a_gang_short_of_bound_members_says_it_waits() -> None:
    status = status_of(member(0, node="n0"), member(1))
    assert status.message == "gang default/train: waiting to be scheduled"


def test_a_planned_gang_is_scheduling_while_its_members_are_bound() -> None:
    core = new_core()
    pods = [member(0), member(1)]
    for p in pods:
        core.observe_pod(PodInfo.from_api(p), T0)
    core.apply_group_spec(GroupSpec.from_podgroup(make_podgroup("train", 2), source="PodGroup"))
    core.filter(core.snapshot.pods["uid-default-train-0"], ["n0", "n1", "n2"], T0)
    status = group_status(core, KEY)
    assert status is not None
    assert seen(status) == ("Scheduling", "Binding", 2, 0, 0, 0, 0, "False")
    assert status.message == "gang default/train: planned 2 members, binding"


def test_an_invalid_spec_is_pending_with_its_error_even_when_members_are_bound() -> None:
    pods = [
        make_pod("train-0").group("train").min_available(3).node("n0").obj(),
        make_pod("train-1").group("train").min_available(4).node("n0").obj(),
    ]
    status = status_of(*pods, min_member=None)
    assert (status.phase, status.reason, status.condition_status) == (
        "Pending",
        "InvalidSpec",
        "False",
    )
    assert status.message.startswith("gang default/train: ")
    assert "give every member the same value" in status.message
    assert "members bound" not in status.message


def test_no_size_declared_gives_no_status() -> None:
    core = new_core()
    core.observe_pod(PodInfo.from_api(make_pod("train-0").group("train").obj()), T0)
    assert group_status(core, KEY) is None


def test_the_api_form_is_what_the_podgroup_status_subresource_gets() -> None:
    status = status_of(member(0, node="n0"), member(1, "Pending", "n1"))
    assert status.as_api("2026-01-01T00:00:00Z") == {
        "phase": "Scheduled",
        "scheduled": 2,
        "running": 1,
        "succeeded": 0,
        "failed": 0,
        "conditions": [
            {
                "type": "Scheduled",
                "status": "True",
                "reason": "Scheduled",
                "message": "gang default/train: 2/2 members bound",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        ],
    }


# --- messages: other schedulers ------------------------------------------------------


def test_one_pod_of_another_scheduler_is_named_in_the_singular() -> None:
    stray = make_pod("train-9").group("train").scheduler("default-scheduler").obj()
    status = status_of(member(0), stray)
    assert status.message == (
        "gang default/train: 1 pod of this group uses schedulerName default-scheduler "
        "(train-9): set schedulerName: gang-extender in their pod template"
    )


def test_pods_of_two_other_schedulers_are_named_per_scheduler_in_name_order() -> None:
    pods = [
        make_pod("train-b").group("train").scheduler("volcano").obj(),
        make_pod("train-a").group("train").scheduler("default-scheduler").obj(),
    ]
    status = status_of(*pods, min_member=3)
    assert status.message == (
        "gang default/train: 1 pod of this group uses schedulerName default-scheduler "
        "(train-a): set schedulerName: gang-extender in their pod template; "
        "gang default/train: 1 pod of this group uses schedulerName volcano "
        "(train-b): set schedulerName: gang-extender in their pod template"
    )


def test_more_than_five_pods_of_another_scheduler_are_cut_short() -> None:
    pods = [
        make_pod(f"train-{i}").group("train").scheduler("default-scheduler").obj() for i in range(6)
    ]
    status = status_of(*pods, min_member=6)
    assert "(train-0, train-1, train-2, train-3, train-4, ...)" in status.message
    assert "6 pods of this group use" in status.message


def test_exactly_five_pods_of_another_scheduler_are_all_named() -> None:
    pods = [
        make_pod(f"train-{i}").group("train").scheduler("default-scheduler").obj() for i in range(5)
    ]
    status = status_of(*pods, min_member=5)
    assert "(train-0, train-1, train-2, train-3, train-4):" in status.message


def test_finished_pods_of_another_scheduler_are_not_named() -> None:
    done = make_pod("train-9").group("train").scheduler("default-scheduler").phase("Succeeded")
    status = status_of(member(0), done.obj())
    assert status.reason == "WaitingForMembers"


# --- messages: kube-scheduler's own refusals -------------------------------------------

REFUSALS = [
    (
        "a selector no node matches",
        "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector. "
        "preemption: not helpful.",
        "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector; fix the member's nodeSelector "
        "or affinity, or label nodes",
    ),
    (
        "a taint it does not tolerate",
        "0/3 nodes are available: 3 node(s) had untolerated taint {gpu: a100}. more.",
        "0/3 nodes are available: 3 node(s) had untolerated taint {gpu: a100}; add the toleration to the member's "
        "pod template",
    ),
    (
        "two resources short, named once each in name order",
        "0/3 nodes are available: 2 Insufficient nvidia.com/gpu, 3 Insufficient cpu, "
        "1 Insufficient nvidia.com/gpu. preemption: none.",
        "Insufficient cpu, nvidia.com/gpu; lower the per-pod request, or add nodes that have "
        "that much free",
    ),
]


@pytest.mark.parametrize(
    ("refusal", "said"), [(r, s) for _, r, s in REFUSALS], ids=[n for n, _, _ in REFUSALS]
)
def test_one_refused_member_gets_kube_schedulers_reason_and_the_fix(
    refusal: str, said: str
) -> None:
    status = status_of(
        make_pod("train-0").group("train").unschedulable(refusal).obj(), min_member=1
    )
    assert (status.phase, status.reason) == ("Pending", "Unschedulable")
    assert status.message == (
        "gang default/train: kube-scheduler's own filters refuse 1 member (train-0): " + said
    )


def test_a_refusal_of_one_sentence_is_kept_whole_without_its_period() -> None:
    refusal = "0/3 nodes are available: 3 node(s) had volume node affinity conflict."
    status = status_of(
        make_pod("train-0").group("train").unschedulable(refusal).obj(), min_member=1
    )
    assert status.message == (
        "gang default/train: kube-scheduler's own filters refuse 1 member (train-0): "
        "0/3 nodes are available: 3 node(s) had volume node affinity conflict; see the "
        "member's FailedScheduling events"
    )


def test_a_bound_member_once_refused_is_not_reported_as_refused() -> None:
    refusal = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
    bound = make_pod("train-0").group("train").unschedulable(refusal).node("n0").obj()
    status = status_of(bound, member(1))
    assert status.reason == "Unschedulable"
    assert "kube-scheduler" not in status.message


def test_pods_of_an_upstream_podgroup_another_scheduler_places_are_left_to_it_saying_so() -> None:
    core = new_core()
    core.apply_group_spec(
        upstream_podgroup_spec(
            {
                "metadata": {"name": "train", "namespace": "default"},
                "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}},
            }
        )
    )
    stray = make_pod("train-9").group("train").scheduler("default-scheduler").obj()
    status = status_in(core, stray, min_member=None)
    assert status.reason == "OtherScheduler"
    assert status.message == (
        "gang default/train: 1 pod of this group uses schedulerName default-scheduler "
        "(train-9), which gang-schedules Kubernetes' PodGroups itself where its "
        "GenericWorkload gate is on: gang-extender only wires them (for gang-extender to "
        "place the gang, set schedulerName: gang-extender in their pod template)"
    )


# --- messages: too few members -----------------------------------------------------


def test_too_few_members_of_an_upstream_podgroup_say_to_change_its_gang_min_count() -> None:
    core = new_core()
    core.apply_group_spec(
        upstream_podgroup_spec(
            {
                "metadata": {"name": "train", "namespace": "default"},
                "spec": {"schedulingPolicy": {"gang": {"minCount": 3}}},
            }
        )
    )
    status = status_in(core, member(0), min_member=None)
    assert status.reason == "WaitingForMembers"
    assert status.message == (
        "gang default/train: 1/3 members exist; waiting for the rest to be created (if the "
        "job creates fewer than 3 pods, set spec.schedulingPolicy.gang.minCount of PodGroup "
        "train (scheduling.k8s.io) to the number it creates)"
    )


def test_exactly_min_member_members_are_not_waiting_for_more() -> None:
    status = status_of(member(0), member(1))
    assert status.reason != "WaitingForMembers"


# --- messages: a PodGroup and its members' annotation --------------------------------


def test_members_that_agree_with_their_podgroup_get_no_disagreement_note() -> None:
    pods = [make_pod(f"train-{i}").group("train").min_available(2).obj() for i in range(2)]
    status = status_of(*pods, min_member=2)
    assert status.message == "gang default/train: waiting to be scheduled"


def test_members_that_disagree_with_their_podgroup_and_each_other_are_all_listed() -> None:
    pods = [
        make_pod("train-0").group("train").min_available(4).obj(),
        make_pod("train-1").group("train").min_available(3).obj(),
    ]
    status = status_of(*pods, min_member=2)
    assert status.message == (
        "gang default/train: waiting to be scheduled; PodGroup train sets minMember 2, which "
        "wins over the members' gang-extender.io/min-available (3, 4): change its "
        "spec.minMember, or delete it to let the annotation decide"
    )


def test_a_stray_pod_of_another_scheduler_beside_all_our_members_is_not_the_reason() -> None:
    stray = make_pod("stray").group("train").scheduler("default-scheduler").obj()
    status = status_of(member(0), member(1), stray)
    assert (status.phase, status.reason) == ("Pending", "Unschedulable")
    assert status.message == "gang default/train: waiting to be scheduled"


def test_only_the_first_sentence_of_a_long_refusal_is_kept() -> None:
    refusal = (
        "0/3 nodes are available: 3 node(s) had volume node affinity conflict. "
        "preemption: 0/3 nodes are available. 3 Preemption is not helpful."
    )
    status = status_of(
        make_pod("train-0").group("train").unschedulable(refusal).obj(), min_member=1
    )
    assert status.message == (
        "gang default/train: kube-scheduler's own filters refuse 1 member (train-0): "
        "0/3 nodes are available: 3 node(s) had volume node affinity conflict; see the "
        "member's FailedScheduling events"
    )


def test_a_resource_named_at_the_end_of_a_sentence_is_named_without_the_period() -> None:
    refusal = "0/3 nodes are available: 3 Insufficient cpu."
    status = status_of(
        make_pod("train-0").group("train").unschedulable(refusal).obj(), min_member=1
    )
    assert status.message == (
        "gang default/train: kube-scheduler's own filters refuse 1 member (train-0): "
        "Insufficient cpu; lower the per-pod request, or add nodes that have that much free"
    )
