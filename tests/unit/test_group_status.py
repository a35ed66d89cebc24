"""The PodGroup condition a user reads names the cause and the fix (pure: no cluster).

Each case is a new user's mistake or a situation that looked like one: pods left
to another scheduler, a size larger than the job, a member kube-scheduler's own
filters refuse, a PodGroup and its members that disagree on the size.
"""

from __future__ import annotations

from typing import Any

from extender.domain.objects.membership import GroupKey
from extender.domain.objects.model import GroupSpec, NodeInfo, PodInfo
from extender.domain.status.status import GroupStatus, group_status
from tests.builders import make_node, make_pod, make_podgroup
from tests.core_builder import make_core

T0 = 1_000_000.0
KEY = GroupKey("default", "train")
GPU_REFUSAL = (
    "0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are "
    "available: 3 No preemption victims found for incoming pod."
)


def status_of(*pods: dict[str, Any], podgroup: dict[str, Any] | None = None) -> GroupStatus:
    core = make_core()
    for n in range(3):
        core.apply_node(NodeInfo.from_api(make_node(f"n{n}").gpus(4).obj()))
    for p in pods:
        core.observe_pod(PodInfo.from_api(p), T0)
    if podgroup is not None:
        core.apply_group_spec(GroupSpec.from_podgroup(podgroup, source="PodGroup"))
    status = group_status(core, KEY)
    assert status is not None
    return status


def test_every_pod_left_to_the_default_scheduler_is_named_with_the_fix_not_as_missing() -> None:
    pods = [
        make_pod(f"train-{i}").group("train").scheduler("default-scheduler").node("n0").obj()
        for i in range(4)
    ]
    status = status_of(*pods, podgroup=make_podgroup("train", 4))
    assert (status.phase, status.reason, status.scheduled) == ("Pending", "OtherScheduler", 0)
    assert status.message == (
        "gang default/train: 4 pods of this group use schedulerName default-scheduler "
        "(train-0, train-1, train-2, train-3): set schedulerName: gang-extender in their "
        "pod template"
    )


def test_workers_left_to_the_default_scheduler_beside_a_master_of_ours_are_named() -> None:
    master = make_pod("train-master").group("train").task("master").min_available(4).obj()
    workers = [
        make_pod(f"train-worker-{i}").group("train").scheduler("default-scheduler").obj()
        for i in range(3)
    ]
    status = status_of(master, *workers)
    assert status.reason == "OtherScheduler"
    assert "3 pods of this group use schedulerName default-scheduler" in status.message
    assert "train-master" not in status.message


def test_pods_of_another_scheduler_beside_a_complete_gang_of_ours_change_nothing() -> None:
    ours = [make_pod(f"train-{i}").group("train").node("n0").obj() for i in range(2)]
    stray = make_pod("stray").group("train").scheduler("default-scheduler").obj()
    status = status_of(*ours, stray, podgroup=make_podgroup("train", 2))
    assert (status.phase, status.message) == ("Running", "gang default/train: 2/2 members bound")


def test_a_member_too_big_for_any_node_carries_kube_schedulers_reason_and_the_fix() -> None:
    pods = [
        make_pod(f"train-{i}").group("train").gpus(8).unschedulable(GPU_REFUSAL).obj()
        for i in range(2)
    ]
    status = status_of(*pods, podgroup=make_podgroup("train", 2))
    assert (status.phase, status.reason) == ("Pending", "Unschedulable")
    assert status.message == (
        "gang default/train: kube-scheduler's own filters refuse 2 members (train-0, train-1): "
        "Insufficient nvidia.com/gpu; lower the per-pod request, or add nodes that have that "
        "much free"
    )


def test_a_member_refused_by_this_extender_is_not_mistaken_for_kube_schedulers_refusal() -> None:
    ours = "0/3 nodes are available: 3 gang default/train: 1/2 members exist; waiting. x"
    status = status_of(
        make_pod("train-0").group("train").unschedulable(ours).obj(),
        podgroup=make_podgroup("train", 2),
    )
    assert status.reason == "WaitingForMembers"


def test_a_refusal_kube_scheduler_gives_for_an_unknown_reason_points_at_its_events() -> None:
    refusal = "0/3 nodes are available: 3 node(s) had volume node affinity conflict."
    status = status_of(
        make_pod("train-0").group("train").unschedulable(refusal).obj(),
        podgroup=make_podgroup("train", 1),
    )
    assert status.message.endswith(
        "3 node(s) had volume node affinity conflict; see the member's FailedScheduling events"
    )


def test_too_few_members_of_an_annotated_group_say_how_to_lower_the_size() -> None:
    pods = [make_pod(f"train-{i}").group("train").min_available(5).obj() for i in range(4)]
    status = status_of(*pods)
    assert status.reason == "WaitingForMembers"
    assert status.message == (
        "gang default/train: 4/5 members exist; waiting for the rest to be created (if the job "
        "creates fewer than 5 pods, set gang-extender.io/min-available in the pod template to "
        "the number it creates)"
    )


def test_too_few_members_of_a_podgroup_say_to_change_its_min_member() -> None:
    status = status_of(make_pod("train-0").group("train").obj(), podgroup=make_podgroup("train", 2))
    assert status.message.endswith("set spec.minMember of PodGroup train to the number it creates)")


def test_a_podgroup_gang_extender_created_follows_its_members_new_size() -> None:
    pods = [make_pod(f"train-{i}").group("train").min_available(3).obj() for i in range(3)]
    status = status_of(*pods, podgroup=make_podgroup("train", 5, created=True))
    assert status.min_member == 3
    assert status.reason == "Unschedulable"  # all 3 exist: now it is about fitting


def test_a_users_podgroup_wins_over_the_annotation_and_the_condition_says_so() -> None:
    pods = [make_pod(f"train-{i}").group("train").min_available(3).obj() for i in range(3)]
    status = status_of(*pods, podgroup=make_podgroup("train", 5))
    assert status.min_member == 5
    assert status.message.endswith(
        "; PodGroup train sets minMember 5, which wins over the members' "
        "gang-extender.io/min-available (3): change its spec.minMember, or delete it to let "
        "the annotation decide"
    )


def test_members_of_a_created_podgroup_that_disagree_are_told_to_agree() -> None:
    pods = [
        make_pod("train-0").group("train").min_available(3).obj(),
        make_pod("train-1").group("train").min_available(4).obj(),
    ]
    status = status_of(*pods, podgroup=make_podgroup("train", 5, created=True))
    assert status.reason == "InvalidSpec"
    assert "give every member the same value" in status.message


def test_the_cores_word_wins_over_a_refusal_once_a_member_reached_the_extender() -> None:
    pods = [make_pod(f"train-{i}").group("train").gpus(1).obj() for i in range(2)]
    pods.append(make_pod("train-2").group("train").gpus(1).unschedulable(GPU_REFUSAL).obj())
    core = make_core()
    core.apply_node(NodeInfo.from_api(make_node("n0").gpus(2).obj()))
    for p in pods:
        core.observe_pod(PodInfo.from_api(p), T0)
    core.apply_group_spec(GroupSpec.from_podgroup(make_podgroup("train", 3), source="PodGroup"))
    core.filter(core.snapshot.pods["uid-default-train-0"], ["n0"], T0)
    status = group_status(core, KEY)
    assert status is not None
    assert "members placeable" in status.message
