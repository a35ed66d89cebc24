"""When a plan nobody acts on ends, and when the gang is planned again.

The hand-made mutation run of issue 13 found the suite passing with a plan that
expired a moment after its deadline instead of at it: these contracts pin the
deadline, the message, the backoff before the next plan and the per-group timeout.
"""

from __future__ import annotations

from typing import Any

from extender.domain.gang.gang import GangCore, Timeouts
from extender.domain.objects.membership import GroupKey
from extender.domain.objects.model import GroupSpec, NodeInfo, PodInfo
from extender.domain.state.decisions import BindVerdict, PlanDropped, Verdict
from tests.builders import make_node, make_pod, make_podgroup
from tests.core_builder import make_core

T0 = 1_000_000.0
SCHEDULE_TIMEOUT, BARRIER_TIMEOUT, BACKOFF = 60.0, 30.0, 2.0
GROUP = GroupKey("default", "g")


def two_member_gang(*, podgroup: dict[str, Any] | None = None) -> GangCore:
    core = make_core(timeouts=Timeouts(SCHEDULE_TIMEOUT, BARRIER_TIMEOUT, BACKOFF))
    core.apply_node(NodeInfo.from_api(make_node("n1").gpus(4).obj()))
    for i in range(2):
        builder = make_pod(f"w{i}").group("g").gpus(1)
        if podgroup is None:
            builder = builder.min_available(2)
        core.observe_pod(PodInfo.from_api(builder.obj()), T0)
    if podgroup is not None:
        core.apply_group_spec(GroupSpec.from_podgroup(podgroup, source="PodGroup"))
    return core


def member(core: GangCore, name: str) -> PodInfo:
    return next(p for p in core.snapshot.pods.values() if p.name == name)


def plan_it(core: GangCore) -> None:
    decision = core.filter(member(core, "w0"), ["n1"], T0)
    assert decision.verdict is Verdict.PLANNED
    core.drain_effects()


def test_a_plan_nobody_acts_on_ends_exactly_at_its_deadline() -> None:
    core = two_member_gang()
    plan_it(core)
    core.expire(T0 + SCHEDULE_TIMEOUT - 0.001)
    assert GROUP in core.ledger.plans
    core.expire(T0 + SCHEDULE_TIMEOUT)
    assert GROUP not in core.ledger.plans
    assert core.ledger.reserved("n1").get("nvidia.com/gpu", 0) == 0


def test_an_expired_plan_says_who_did_not_reach_bind_and_counts_as_a_timeout() -> None:
    core = two_member_gang()
    plan_it(core)
    assert core.arrive(member(core, "w0").uid, "n1", T0 + 1).verdict is BindVerdict.WAIT
    core.expire(T0 + SCHEDULE_TIMEOUT)
    reason = "schedule timeout: default/w1 did not reach bind in time"
    dropped = [e for e in core.drain_effects() if isinstance(e, PlanDropped)]
    assert [(e.reason, e.timed_out) for e in dropped] == [(reason, True)]
    assert core.groups[GROUP].message == f"gang {GROUP}: plan dropped: {reason}"


def test_an_expired_plan_names_every_member_that_did_not_reach_bind() -> None:
    core = two_member_gang()
    plan_it(core)
    core.expire(T0 + SCHEDULE_TIMEOUT)
    assert core.groups[GROUP].message == (
        f"gang {GROUP}: plan dropped: schedule timeout: default/w0, default/w1 did not "
        "reach bind in time"
    )


def test_a_released_plan_never_expires() -> None:
    core = two_member_gang()
    plan_it(core)
    assert core.arrive(member(core, "w0").uid, "n1", T0 + 1).verdict is BindVerdict.WAIT
    assert core.arrive(member(core, "w1").uid, "n1", T0 + 1).verdict is BindVerdict.RELEASE
    core.expire(T0 + 10 * SCHEDULE_TIMEOUT)
    assert GROUP in core.ledger.plans


def test_a_dropped_gang_is_planned_again_once_its_backoff_has_passed_and_not_before() -> None:
    core = two_member_gang()
    plan_it(core)
    dropped_at = T0 + SCHEDULE_TIMEOUT
    core.expire(dropped_at)
    early = core.filter(member(core, "w0"), ["n1"], dropped_at + BACKOFF - 0.001)
    assert early.verdict is Verdict.WAIT
    assert "plan dropped: schedule timeout" in early.unresolvable["n1"]
    again = core.filter(member(core, "w0"), ["n1"], dropped_at + BACKOFF)
    assert again.verdict is Verdict.PLANNED


def test_a_podgroups_own_schedule_timeout_replaces_the_cluster_default() -> None:
    core = two_member_gang(podgroup=make_podgroup("g", 2, scheduleTimeoutSeconds=5))
    plan_it(core)
    plan = core.ledger.plans[GROUP]
    assert plan.deadline == T0 + 5
    core.expire(T0 + 5)
    assert GROUP not in core.ledger.plans


def test_a_plan_without_a_podgroup_timeout_gets_the_cluster_default() -> None:
    core = two_member_gang()
    plan_it(core)
    plan = core.ledger.plans[GROUP]
    assert (plan.created_at, plan.deadline) == (T0, T0 + SCHEDULE_TIMEOUT)
