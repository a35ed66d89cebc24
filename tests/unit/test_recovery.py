"""Plans rebuilt from planned-node annotations when a replica takes over (domain/failover/recovery.py)."""

from __future__ import annotations

from typing import Any

import pytest

from extender.domain.cluster.snapshot import ClusterSnapshot
from extender.domain.failover.recovery import RecoveredPlan, Recovery, Refused, recover_plans
from extender.domain.objects.membership import PLANNED_NODE_ANNOTATION, GroupKey
from extender.domain.objects.model import GroupSpec, NodeInfo, PodInfo
from tests.builders import PodBuilder, make_node, make_pod, make_podgroup
from tests.core_builder import make_core

T0 = 1_800_000_000.0
JOB = GroupKey("default", "job")


def member(name: str, planned: str | None = None, gpus: int = 2) -> PodBuilder:
    pod = make_pod(name).group("job").gpus(gpus)
    return pod.annotation(PLANNED_NODE_ANNOTATION, planned) if planned else pod


def snapshot(
    pods: list[dict[str, Any]],
    *,
    nodes: list[dict[str, Any]] | None = None,
    min_member: int | None = 3,
) -> ClusterSnapshot:
    snap = ClusterSnapshot()
    for node in nodes or [make_node("n1").gpus(4).obj(), make_node("n2").gpus(4).obj()]:
        snap.upsert_node(NodeInfo.from_api(node))
    if min_member is not None:
        snap.upsert_podgroup(
            GroupSpec.from_podgroup(make_podgroup("job", min_member), source="PodGroup")
        )
    for pod in pods:
        snap.upsert_pod(PodInfo.from_api(pod))
    return snap


def test_the_plan_the_leader_made_is_rebuilt_as_it_was() -> None:
    # The previous leader planned 3 x 2 GPU onto n1, n1, n2 and annotated them.
    core = make_core()
    for node in ("n1", "n2"):
        core.apply_node(NodeInfo.from_api(make_node(node).gpus(4).obj()))
    core.apply_group_spec(GroupSpec.from_podgroup(make_podgroup("job", 3), source="PodGroup"))
    for i in range(3):
        core.observe_pod(PodInfo.from_api(member(f"w{i}").obj()), T0)
    decision = core.filter(core.snapshot.pods["uid-default-w0"], ["n1", "n2"], T0)
    original = dict(core.ledger.plans[JOB].placements)
    assert decision.nodes
    annotated = [
        member(f"w{i}", original[f"uid-default-w{i}"]).obj() for i in range(3)
    ]  # what the effect writer wrote on the members

    found = recover_plans(snapshot(annotated), reserved={})
    assert found.refused == ()
    assert [(p.group, dict(p.placements)) for p in found.plans] == [(JOB, original)]


def test_recovered_plans_reserve_in_the_core_and_a_plain_pod_is_kept_off() -> None:
    core = make_core(
        snapshot=snapshot(
            [member("w0", "n1").obj(), member("w1", "n1").obj(), member("w2", "n2").obj()]
        ),
    )
    found = core.recover(T0)
    assert len(found.plans) == 1 and not core.drain_effects()  # nothing to write again
    assert core.ledger.plans[JOB].deadline == T0 + 60
    plain = PodInfo.from_api(make_pod("plain").gpus(3).obj())
    assert core.filter(plain, ["n1", "n2"], T0).nodes == []
    # A second recovery (a later term) leaves the plan as it is: not refused, left alone.
    again = core.recover(T0)
    assert again.plans == () and again.refused == ()


def test_members_already_bound_count_toward_the_quorum() -> None:
    pods = [
        member("w0").node("n1").obj(),  # bound before the crash
        member("w1", "n1").obj(),
        member("w2", "n2").obj(),
    ]
    found = recover_plans(snapshot(pods), reserved={})
    assert [dict(p.placements) for p in found.plans] == [
        {"uid-default-w1": "n1", "uid-default-w2": "n2"}
    ]


@pytest.mark.parametrize(
    ("pods", "nodes", "min_member", "why"),
    [
        pytest.param(
            [member("w0", "n1").obj(), member("w1", "n2").obj(), member("w2").obj()],
            None,
            3,
            "partial plan",
            id="fewer annotated members than minMember: partial",
        ),
        pytest.param(
            [member("w0", "n1").obj(), member("w1", "n1").obj(), member("w2", "gone").obj()],
            None,
            3,
            "planned node gone is gone",
            id="a planned node was deleted: stale",
        ),
        pytest.param(
            [
                member("w0", "n1").obj(),
                member("w1", "n1").obj(),
                member("w2", "n2").obj(),
                make_pod("squatter").gpus(3).node("n2").obj(),
            ],
            None,
            3,
            "no room left on planned node n2",
            id="a pod bound to a planned node in the gap: stale",
        ),
        pytest.param(
            [member("w0", "n1").obj(), member("w1", "n1").obj(), member("w2", "n2").obj()],
            [make_node("n1").gpus(4).obj(), make_node("n2").gpus(4).taint("gpu", "broken").obj()],
            3,
            "no longer accepts it",
            id="a planned node was tainted: stale",
        ),
        pytest.param(
            [member("w0", "n1").obj(), member("w1", "n1").obj(), member("w2", "n2").obj()],
            None,
            None,
            "no PodGroup and no min-available",
            id="the group lost its PodGroup",
        ),
    ],
)
def test_partial_or_stale_plans_are_refused_whole(
    pods: list[dict[str, Any]], nodes: list[dict[str, Any]] | None, min_member: int | None, why: str
) -> None:
    found = recover_plans(snapshot(pods, nodes=nodes, min_member=min_member), reserved={})
    assert found.plans == ()
    assert len(found.refused) == 1 and found.refused[0].group == JOB
    assert why in found.refused[0].reason, found.refused


def test_capacity_already_reserved_by_another_plan_is_not_given_twice() -> None:
    pods = [member("w0", "n1").obj(), member("w1", "n1").obj(), member("w2", "n2").obj()]
    found = recover_plans(snapshot(pods), reserved={"n2": {"nvidia.com/gpu": 3}})
    assert found.plans == () and "no room left on planned node n2" in found.refused[0].reason


def test_groups_with_a_plan_already_and_unannotated_groups_are_left_alone() -> None:
    pods = [member("w0", "n1").obj(), member("w1", "n1").obj(), member("w2", "n2").obj()]
    assert recover_plans(snapshot(pods), reserved={}, planned={JOB}) == recover_plans(
        snapshot([member(f"w{i}").obj() for i in range(3)]), reserved={}
    )


# ---- several groups, and the exact reasons an operator reads ----
A, B = GroupKey("default", "a"), GroupKey("default", "b")  # taken in this (key) order


def gang_member(group: str, name: str, planned: str | None = None, gpus: int = 2) -> PodBuilder:
    pod = make_pod(name).group(group).gpus(gpus)
    return pod.annotation(PLANNED_NODE_ANNOTATION, planned) if planned else pod


def two_groups(a_pods: list[dict[str, Any]], b_min: int = 2, a_min: int = 2) -> ClusterSnapshot:
    """Group "a" (taken first) with `a_pods`; group "b" with a plan that fits: b0, b1 on n2."""
    snap = snapshot([], min_member=None)
    for name, min_member in (("a", a_min), ("b", b_min)):
        snap.upsert_podgroup(
            GroupSpec.from_podgroup(make_podgroup(name, min_member), source="PodGroup")
        )
    for pod in [*a_pods, gang_member("b", "b0", "n2").obj(), gang_member("b", "b1", "n2").obj()]:
        snap.upsert_pod(PodInfo.from_api(pod))
    return snap


B_RECOVERED = RecoveredPlan(B, {"uid-default-b0": "n2", "uid-default-b1": "n2"})


@pytest.mark.parametrize(
    ("a_pods", "a_min", "a_refused"),
    [
        pytest.param(
            [gang_member("a", "a0").obj(), gang_member("a", "a1").obj()],
            2,
            (),
            id="an earlier group with no annotation",
        ),
        pytest.param(
            [gang_member("a", "a0", "n1").obj(), gang_member("a", "a1", "n1").obj()],
            0,
            ("gang default/a: PodGroup spec.minMember=0 must be a whole number >= 1",),
            id="an earlier group with a misdeclared PodGroup",
        ),
        pytest.param(
            [gang_member("a", "a0", "n1").obj(), gang_member("a", "a1").obj()],
            2,
            ("gang default/a: partial plan: 1 annotated + 0 bound < minMember 2",),
            id="an earlier group with a partial plan",
        ),
        pytest.param(
            [gang_member("a", "a0", "n1").obj(), gang_member("a", "a1", "gone").obj()],
            2,
            ("gang default/a: stale plan: default/a1: planned node gone is gone",),
            id="an earlier group with a stale plan",
        ),
    ],
)
def test_a_group_left_out_or_refused_does_not_stop_the_groups_after_it(
    a_pods: list[dict[str, Any]], a_min: int, a_refused: tuple[str, ...]
) -> None:
    found = recover_plans(two_groups(a_pods, a_min=a_min), reserved={})
    assert found.plans == (B_RECOVERED,)
    assert tuple(r.reason for r in found.refused) == a_refused


def test_a_group_that_already_has_a_plan_does_not_stop_the_groups_after_it() -> None:
    snap = two_groups([gang_member("a", "a0", "n1").obj(), gang_member("a", "a1", "n1").obj()])
    found = recover_plans(snap, reserved={"n1": {"nvidia.com/gpu": 4}}, planned={A})
    assert found == Recovery((B_RECOVERED,), ())


def test_every_recovered_group_is_returned_and_holds_its_capacity_for_the_next() -> None:
    # a fills n2 (2 x 2 of 4 GPUs); b's plan on n2 then finds no room left.
    both = two_groups([gang_member("a", "a0", "n2").obj(), gang_member("a", "a1", "n2").obj()])
    found = recover_plans(both, reserved={})
    assert found.plans == (RecoveredPlan(A, {"uid-default-a0": "n2", "uid-default-a1": "n2"}),)
    assert [r.reason for r in found.refused] == [
        "gang default/b: stale plan: default/b0: no room left on planned node n2"
    ]
    # With room for both, both come back, in key order.
    apart = two_groups([gang_member("a", "a0", "n1").obj(), gang_member("a", "a1", "n1").obj()])
    assert recover_plans(apart, reserved={}).plans == (
        RecoveredPlan(A, {"uid-default-a0": "n1", "uid-default-a1": "n1"}),
        B_RECOVERED,
    )


def test_members_planned_onto_one_node_add_up_against_its_room() -> None:
    # 3 x 2 GPUs annotated onto n1 (4 GPUs): the third does not fit after the first two.
    pods = [member(f"w{i}", "n1").obj() for i in range(3)]
    found = recover_plans(snapshot(pods), reserved={})
    assert found.plans == ()
    assert [r.reason for r in found.refused] == [
        "gang default/job: stale plan: default/w2: no room left on planned node n1"
    ]


def test_a_bound_member_counts_once_toward_the_quorum() -> None:
    pods = [member("w0").node("n1").obj(), member("w1", "n1").obj(), member("w2").obj()]
    found = recover_plans(snapshot(pods), reserved={})
    assert found == Recovery(
        (), (Refused(JOB, "gang default/job: partial plan: 1 annotated + 1 bound < minMember 3"),)
    )


def test_a_group_that_lost_its_podgroup_is_refused_saying_so() -> None:
    pods = [member(f"w{i}", "n1").obj() for i in range(2)]
    found = recover_plans(snapshot(pods, min_member=None), reserved={})
    assert found == Recovery(
        (), (Refused(JOB, "gang default/job: no PodGroup and no min-available"),)
    )


def test_a_recovered_plan_is_a_fresh_plan_of_the_groups_timeout_and_its_status_says_so() -> None:
    core = make_core(
        snapshot=snapshot(
            [member("w0", "n1").obj(), member("w1", "n1").obj(), member("w2", "n2").obj()]
        ),
    )
    core.apply_group_spec(
        GroupSpec.from_podgroup(
            make_podgroup("job", 3, scheduleTimeoutSeconds=15), source="PodGroup"
        )
    )
    before = core.ledger.new_plan_id()
    core.shared.shortfalls.remember(JOB, core.snapshot.members(JOB), topology=False, priority=0)
    core.recover(T0)
    assert JOB not in core.shared.shortfalls  # planned now: its "does not fit" is void
    plan = core.ledger.plans[JOB]
    assert plan.plan_id == before + 1
    assert (plan.created_at, plan.deadline) == (T0, T0 + 15)
    state = core.groups[JOB]
    assert (state.waiting, state.shortfall_generation) == (False, None)
    assert state.message == "gang default/job: plan of 3 members recovered, binding"
    assert core.ledger.reserved("n1")["nvidia.com/gpu"] == 4


def test_a_recovery_gives_no_node_twice_and_leaves_planned_groups_alone() -> None:
    # The new leader planned "other" on n1 before the old plan of "job" was recovered:
    # job's members annotated onto n1 cannot be given that room again.
    core = make_core(
        snapshot=snapshot(
            [member("w0", "n1").obj(), member("w1", "n1").obj(), member("w2", "n2").obj()]
        ),
    )
    core.apply_group_spec(GroupSpec.from_podgroup(make_podgroup("other", 1), source="PodGroup"))
    other = PodInfo.from_api(make_pod("o0").group("other").gpus(4).obj())
    core.observe_pod(other, T0)
    assert core.filter(other, ["n1"], T0).nodes == ["n1"]
    found = core.recover(T0)
    assert found.plans == () and [r.group for r in found.refused] == [JOB]
    assert set(core.ledger.plans) == {GroupKey("default", "other")}
    # And a group that has a plan already is not recovered over it.
    planned_again = core.recover(T0)
    assert GroupKey("default", "other") not in [r.group for r in planned_again.refused]


def test_a_replica_that_stands_down_drops_every_plan_saying_why() -> None:
    core = make_core(
        snapshot=snapshot(
            [member("w0", "n1").obj(), member("w1", "n1").obj(), member("w2", "n2").obj()]
        ),
    )
    core.recover(T0)
    core.stand_down(T0 + 1)
    assert core.ledger.plans == {}
    (dropped,) = core.drain_effects()
    assert dropped.reason == "this replica is no longer the leader"  # type: ignore[union-attr]
