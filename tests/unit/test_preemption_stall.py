"""A preemptor's plan outlives the wait for its own evictions (issue: the preemption stall).

kube-scheduler counts a victim until its deletion reaches it, so for a while its own
filters refuse the node the victim frees: a member asking then waits, its plan and
hold kept, and nobody else is planned on that room; the hold's deadline bounds the wait.
"""

from __future__ import annotations

from extender.domain.cluster.ledger import VICTIM_GONE_GRACE_SECONDS, Plan
from extender.domain.gang.gang import GangCore
from extender.domain.objects.membership import GroupKey
from extender.domain.objects.model import PodInfo
from extender.domain.state.decisions import FilterDecision, Verdict
from tests.unit.test_preemption import T0, core_with, high_gang, low_gang_running, pod

HIGH = GroupKey("default", "high")
OTHER = GroupKey("default", "other")


def member(core: GangCore, name: str) -> PodInfo:
    return next(p for p in core.snapshot.pods.values() if p.name == name)


def preempting() -> GangCore:
    """The high gang (two 1-GPU members) planned on n0 and n1 by evicting the low gang
    running there; a 1-GPU gang `other` of the same priority waits beside it."""
    low, low_spec = low_gang_running()
    core = core_with(
        {"n0": 1, "n1": 1},
        [*low, *high_gang(), pod("other-0", group="other", priority=1000)],
        {"low": low_spec, "high": {"minMember": 2}, "other": {"minMember": 1}},
    )
    assert core.filter(member(core, "high-0"), ["n0", "n1"], T0).verdict is Verdict.PLANNED
    core.drain_effects()
    return core


def being_deleted(core: GangCore, name: str, now: float) -> None:
    """The watch sees the victim's deletion begin (its grace period runs)."""
    victim = pod(name, node=f"n{name[-1]}", group="low", priority=10)
    victim["metadata"]["deletionTimestamp"] = "2026-11-28T00:00:00Z"
    core.observe_pod(PodInfo.from_api(victim), now)


def test_a_member_not_offered_a_node_its_victim_still_holds_waits_and_the_plan_is_kept() -> None:
    core = preempting()
    plan = core.ledger.plans[HIGH]
    node = plan.placements["uid-high-1"]
    victim = f"low-{node[-1]}"
    being_deleted(core, victim, T0 + 0.05)
    offered = [n for n in ("n0", "n1") if n != node]  # kube-scheduler still counts the victim
    decision = core.filter(member(core, "high-1"), offered, T0 + 0.08)
    assert decision.verdict is Verdict.WAIT
    assert f"evictions of default/{victim} on its planned node {node}" in decision.message
    assert core.ledger.plans.get(HIGH) is plan, "the plan survives the wait for its evictions"
    # Meanwhile the room is the preemptor's: the other gang is not planned on it.
    other = core.filter(member(core, "other-0"), ["n0", "n1"], T0 + 0.1)
    assert other.verdict is Verdict.WAIT
    assert OTHER not in core.ledger.plans
    # The victims go; kube-scheduler offers the node and the member gets it.
    for uid in ("uid-low-0", "uid-low-1"):
        core.forget_pod(uid, T0 + 1)
    decision = core.filter(member(core, "high-1"), ["n0", "n1"], T0 + 1.1)
    assert decision.verdict is Verdict.PLANNED
    assert decision.nodes == [node]
    assert core.ledger.plans[HIGH] is plan
    other = core.filter(member(core, "other-0"), ["n0", "n1"], T0 + 1.2)
    assert other.verdict is Verdict.WAIT
    assert OTHER not in core.ledger.plans


def test_victims_that_never_go_end_the_wait_at_the_holds_deadline() -> None:
    core = preempting()
    plan = core.ledger.plans[HIGH]
    node = plan.placements["uid-high-0"]
    offered = [n for n in ("n0", "n1") if n != node]
    assert core.filter(member(core, "high-0"), offered, T0 + 119).verdict is Verdict.WAIT
    assert core.ledger.plans.get(HIGH) is plan
    core.filter(member(core, "high-0"), offered, plan.deadline + 1)
    assert core.ledger.plans.get(HIGH) is not plan, "the hold's deadline bounds the wait"


def refused_after_victims_go(
    *, gone_at: float, asked_at: float
) -> tuple[GangCore, Plan, str, FilterDecision]:
    """The preemptor planned; both victims seen deleted at `gone_at`; its member asks at
    `asked_at` without its planned node among the candidates."""
    core = preempting()
    plan = core.ledger.plans[HIGH]
    node = plan.placements["uid-high-0"]
    for uid in ("uid-low-0", "uid-low-1"):
        core.forget_pod(uid, gone_at)
    offered = [n for n in ("n0", "n1") if n != node]
    return core, plan, node, core.filter(member(core, "high-0"), offered, asked_at)


def test_a_planned_node_refused_with_the_victims_gone_still_drops_the_plan() -> None:
    # Only the plan's own evictions excuse a refusal: once they are gone, a node
    # kube-scheduler still does not offer is refused for some other reason.
    core, plan, node, decision = refused_after_victims_go(
        gone_at=T0 + 1, asked_at=T0 + 1 + VICTIM_GONE_GRACE_SECONDS
    )
    assert decision.verdict is Verdict.WAIT
    assert core.ledger.plans.get(HIGH) is not plan
    assert f"no longer offers planned node {node}" in core.groups[HIGH].message


def test_a_victim_our_watch_saw_go_first_still_excuses_the_node_for_a_moment() -> None:
    # The victim is deleted at once (no grace period): the service's watch sees it gone
    # before kube-scheduler's does, or the member's cycle began before the delete, so the
    # node is not offered just after; the member waits instead of dropping the plan.
    core, plan, node, decision = refused_after_victims_go(gone_at=T0 + 0.05, asked_at=T0 + 0.1)
    assert decision.verdict is Verdict.WAIT
    assert f"evictions of default/low-{node[-1]} on its planned node {node}" in decision.message
    assert core.ledger.plans.get(HIGH) is plan
    decision = core.filter(member(core, "high-0"), ["n0", "n1"], T0 + 0.5)
    assert decision.nodes == [node]
