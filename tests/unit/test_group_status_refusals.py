"""kube-scheduler's own refusals as a PodGroup's status reports them (domain/status/status.py):
the resources a refusal names are reported exactly as named, without the sentence's
period, whatever letters they end in and however the sentences are separated."""

from __future__ import annotations

from extender.domain.gang.gang import GangCore
from extender.domain.objects.membership import GroupKey
from extender.domain.objects.model import GroupSpec, NodeInfo, PodInfo
from extender.domain.status.status import MemberCounts, group_status, kube_scheduler_refusal
from tests.builders import make_node, make_pod, make_podgroup
from tests.core_builder import make_core

T0 = 1_000_000.0
KEY = GroupKey("default", "train")
PREFIX = "gang default/train: kube-scheduler's own filters refuse 1 member (train-0): "
FIX = "; lower the per-pod request, or add nodes that have that much free"


def refused_status_message(refusal: str) -> str:
    core = make_core()
    core.apply_node(NodeInfo.from_api(make_node("n0").gpus(4).obj()))
    pod = make_pod("train-0").group("train").unschedulable(refusal).obj()
    core.observe_pod(PodInfo.from_api(pod), T0)
    core.apply_group_spec(GroupSpec.from_podgroup(make_podgroup("train", 1), source="PodGroup"))
    status = group_status(core, KEY)
    assert status is not None
    assert (status.phase, status.reason) == ("Pending", "Unschedulable")
    return status.message


def test_a_resource_whose_name_ends_in_a_capital_is_named_whole() -> None:
    refusal = "0/1 nodes are available: 1 Insufficient example.com/FPGAX."
    pod = PodInfo.from_api(make_pod("train-0").group("train").unschedulable(refusal).obj())
    assert kube_scheduler_refusal(KEY, pod) == (
        "0/1 nodes are available: 1 Insufficient example.com/FPGAX"
    )
    assert refused_status_message(refusal) == PREFIX + "Insufficient example.com/FPGAX" + FIX


def test_a_resource_at_the_end_of_a_line_is_named_without_its_period() -> None:
    # Sentences separated by a line break, not ". ": the first sentence runs on.
    refusal = "0/1 nodes are available: 1 Insufficient cpu.\n1 Insufficient memory."
    assert refused_status_message(refusal) == PREFIX + "Insufficient cpu, memory" + FIX


# ------------------------------------------------- the gang ahead, as status names it
def _gang(name: str, size: int, *, priority: int = 0) -> list[PodInfo]:
    return [
        PodInfo.from_api(
            make_pod(f"{name}-{i}")
            .group(name)
            .gpus(1)
            .priority(priority)
            .created("2026-11-22T10:00:00Z")
            .obj()
        )
        for i in range(size)
    ]


def held_behind_high(*, low_members: int, low_size: int = 2) -> GangCore:
    """One 2-GPU node a plain pod fills; gang high (priority 9) and gang low both wait."""
    core = make_core()
    core.apply_node(NodeInfo.from_api(make_node("n1").gpus(2).obj()))
    for name, size in (("high", 2), ("low", low_size)):
        core.apply_group_spec(GroupSpec.from_podgroup(make_podgroup(name, size), source="PodGroup"))
    for pod in _gang("high", 2, priority=9) + _gang("low", low_members):
        core.observe_pod(pod, T0)
    core.observe_pod(PodInfo.from_api(make_pod("holder").gpus(2).node("n1").obj()), T0)
    return core


def test_a_gang_never_asked_about_says_it_waits_behind_the_gang_ahead() -> None:
    status = group_status(held_behind_high(low_members=2), GroupKey("default", "low"))
    assert status is not None and status.reason == "Unschedulable"
    assert status.message == (
        "gang default/low: waiting to be scheduled; waiting behind default/high (priority 9)"
    )


def test_a_hold_that_already_names_the_gang_ahead_is_not_told_twice() -> None:
    core = held_behind_high(low_members=2)
    low = next(p for p in core.snapshot.pods.values() if p.name == "low-0")
    decision = core.filter(low, ["n1"], T0 + 1)
    assert "waiting behind default/high (priority 9)" in decision.message
    status = group_status(core, GroupKey("default", "low"))
    assert status is not None
    assert status.message.count("waiting behind") == 1


def test_a_gang_still_short_of_members_does_not_say_it_waits_behind_another() -> None:
    status = group_status(held_behind_high(low_members=1, low_size=2), GroupKey("default", "low"))
    assert status is not None and status.reason == "WaitingForMembers"
    assert "waiting behind" not in status.message


def test_a_group_of_unknown_size_is_pending() -> None:
    counts = MemberCounts(active=3, scheduled=3, running=3, succeeded=0, failed=0)
    assert counts.phase(None) == "Pending"
    assert counts.phase(None, planned=True) == "Pending"
    assert counts.phase(3) == "Running"
