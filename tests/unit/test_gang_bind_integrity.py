"""Whole gang or nothing: the barrier's re-check and binding after release (pure core).

Situations from issue #11: the default scheduler binding onto a planned node while
the gang waits in the barrier, and a member's binding failing after the release.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from extender.domain.gang.gang import GangCore
from extender.domain.objects.model import PodInfo
from extender.domain.state.decisions import (
    BindVerdict,
    GangBound,
    GangBroken,
    MemberBindFailed,
    PlanDropped,
    Verdict,
)
from tests.builders import make_node, make_pod
from tests.core_builder import make_core

T0 = 1_000_000.0
GPU = "nvidia.com/gpu"


def core_with(nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> GangCore:
    return make_core(nodes, pods, now=T0)


def pod_info(core: GangCore, name: str) -> PodInfo:
    return next(p for p in core.snapshot.pods.values() if p.name == name)


def planned_pair(gpus: int = 2) -> GangCore:
    """Gang g of two members (`gpus` each) planned on n1 (4 GPUs), nothing arrived yet."""
    pods = [make_pod(f"w{i}").group("g").min_available(2).gpus(gpus).obj() for i in range(2)]
    core = core_with([make_node("n1").gpus(4).obj()], pods)
    assert core.filter(pod_info(core, "w0"), ["n1"], T0).verdict is Verdict.PLANNED
    core.drain_effects()
    return core


def released_pair() -> GangCore:
    core = planned_pair()
    assert core.arrive(pod_info(core, "w0").uid, "n1", T0 + 1).verdict is BindVerdict.WAIT
    assert core.arrive(pod_info(core, "w1").uid, "n1", T0 + 1).verdict is BindVerdict.RELEASE
    return core


def bind(core: GangCore, name: str, node: str, now: float = T0 + 2) -> None:
    core.observe_pod(dataclasses.replace(pod_info(core, name), node_name=node), now)


def default_scheduler_binds(core: GangCore, name: str, node: str, gpus: int) -> None:
    """A pod of the default scheduler, seen by the watch already bound."""
    core.observe_pod(PodInfo.from_api(make_pod(name).gpus(gpus).node(node).obj()), T0 + 1)


def test_a_default_scheduler_pod_on_a_planned_node_stops_the_release_and_nothing_binds() -> None:
    core = planned_pair()
    first = core.arrive(pod_info(core, "w0").uid, "n1", T0 + 1)
    default_scheduler_binds(core, "intruder", "n1", 1)
    last = core.arrive(pod_info(core, "w1").uid, "n1", T0 + 2)
    assert last.verdict is BindVerdict.ERROR
    assert "node n1 has no room left for its reservations" in last.message
    assert first.plan_id is not None and first.group is not None
    assert core.barrier_state(first.plan_id, first.group) is BindVerdict.ERROR
    assert core.ledger.plans == {}
    assert [type(e) for e in core.drain_effects()] == [PlanDropped]


def test_the_gang_is_planned_again_once_the_room_is_back() -> None:
    core = planned_pair()
    core.arrive(pod_info(core, "w0").uid, "n1", T0 + 1)
    default_scheduler_binds(core, "intruder", "n1", 1)
    core.arrive(pod_info(core, "w1").uid, "n1", T0 + 2)
    held = core.filter(pod_info(core, "w0"), ["n1"], T0 + 10)
    assert held.verdict is Verdict.WAIT
    core.forget_pod(pod_info(core, "intruder").uid, T0 + 11)
    assert core.filter(pod_info(core, "w0"), ["n1"], T0 + 12).verdict is Verdict.PLANNED


def test_a_pod_outside_the_plan_on_a_node_with_room_to_spare_does_not_stop_the_release() -> None:
    core = planned_pair(gpus=1)
    core.arrive(pod_info(core, "w0").uid, "n1", T0 + 1)
    default_scheduler_binds(core, "neighbour", "n1", 2)
    assert core.arrive(pod_info(core, "w1").uid, "n1", T0 + 2).verdict is BindVerdict.RELEASE


def test_a_failed_binding_after_release_keeps_the_members_reservation() -> None:
    core = released_pair()
    bind(core, "w0", "n1")
    core.bind_failed(pod_info(core, "w1").uid, "500: etcd leader changed", T0 + 3)
    effects = core.drain_effects()
    assert [type(e) for e in effects] == [MemberBindFailed]
    assert core.ledger.plans, "the plan stays"
    assert core.ledger.reserved("n1").get(GPU) == 2
    # kube-scheduler retries the member: filter gives its planned node, bind releases at once
    assert core.filter(pod_info(core, "w1"), ["n1"], T0 + 4).nodes == ["n1"]
    assert core.arrive(pod_info(core, "w1").uid, "n1", T0 + 5).verdict is BindVerdict.RELEASE
    bind(core, "w1", "n1", T0 + 6)
    assert [type(e) for e in core.drain_effects()] == [GangBound]


def test_a_released_plan_is_not_expired_by_the_schedule_timeout() -> None:
    core = released_pair()
    bind(core, "w0", "n1")
    core.bind_failed(pod_info(core, "w1").uid, "429: throttled", T0 + 3)
    core.expire(T0 + 3600)
    assert core.ledger.plans


def test_a_plain_pod_cannot_take_the_room_kept_for_a_member_whose_binding_failed() -> None:
    core = released_pair()
    bind(core, "w0", "n1")
    core.bind_failed(pod_info(core, "w1").uid, "503", T0 + 3)
    core.observe_pod(PodInfo.from_api(make_pod("plain").gpus(2).obj()), T0 + 3)
    decision = core.filter(pod_info(core, "plain"), ["n1"], T0 + 4)
    assert decision.nodes == []
    assert "reserved for gang default/g" in decision.failed["n1"]


def test_a_retried_member_whose_room_was_taken_waits_instead_of_over_committing() -> None:
    core = released_pair()
    bind(core, "w0", "n1")
    core.bind_failed(pod_info(core, "w1").uid, "503", T0 + 3)
    default_scheduler_binds(core, "intruder", "n1", 2)
    retried = core.arrive(pod_info(core, "w1").uid, "n1", T0 + 4)
    assert retried.verdict is BindVerdict.ERROR
    assert "keeps its reservation and waits for room" in retried.message
    core.forget_pod(pod_info(core, "intruder").uid, T0 + 5)
    assert core.arrive(pod_info(core, "w1").uid, "n1", T0 + 6).verdict is BindVerdict.RELEASE


def test_a_member_deleted_after_release_breaks_the_gang_loudly() -> None:
    core = released_pair()
    bind(core, "w0", "n1")
    core.drain_effects()
    core.forget_pod(pod_info(core, "w1").uid, T0 + 3)
    [broken] = core.drain_effects()
    assert isinstance(broken, GangBroken)
    assert (broken.member, broken.bound, broken.first) == ("default/w1", 1, True)
    assert "was deleted" in broken.cause
    assert core.ledger.plans == {}, "nothing left to bind: the plan is settled"
    assert core.ledger.reserved("n1").get(GPU, 0) == 0


def test_a_binding_that_finds_the_member_gone_breaks_the_gang() -> None:
    core = released_pair()
    bind(core, "w0", "n1")
    core.drain_effects()
    core.bind_failed(pod_info(core, "w1").uid, "pod was deleted", T0 + 3, gone=True)
    effects = core.drain_effects()
    assert isinstance(effects[0], GangBroken)
    # the watch has not said the pod is gone yet: the group is planned again for it
    # (w0 bound counts toward the quorum), and the watch's word drops that plan
    assert core.ledger.plans


def test_a_member_deleted_before_release_drops_the_plan_and_breaks_nothing() -> None:
    core = planned_pair()
    core.arrive(pod_info(core, "w0").uid, "n1", T0 + 1)
    plan = core.ledger.plan_of(pod_info(core, "w0").uid)
    assert plan is not None
    core.forget_pod(pod_info(core, "w1").uid, T0 + 2)
    assert core.drain_effects() == [
        PlanDropped(plan, "member default/w1 was deleted", timed_out=False)
    ]
    assert (
        core.groups[plan.group].message
        == "gang default/g: plan dropped: member default/w1 was deleted"
    )


def test_a_failed_binding_before_release_still_drops_the_plan() -> None:
    core = planned_pair()
    core.bind_failed(pod_info(core, "w1").uid, "forbidden", T0 + 1)
    assert [type(e) for e in core.drain_effects()] == [PlanDropped]


def test_a_bound_member_deleted_while_the_others_still_bind_breaks_the_gang() -> None:
    core = released_pair()
    bind(core, "w0", "n1")
    core.drain_effects()
    core.forget_pod(pod_info(core, "w0").uid, T0 + 3)
    [broken] = core.drain_effects()
    assert isinstance(broken, GangBroken)
    assert (broken.member, broken.bound) == ("default/w0", 0)
    assert broken.cause == "member default/w0 was deleted"


def test_a_bound_member_that_completes_while_the_others_still_bind_is_not_a_partial_gang() -> None:
    """A Job's pod can finish before the rest of its gang is bound: it ran, it is not lost."""
    core = released_pair()
    bind(core, "w0", "n1")
    core.drain_effects()
    done = dataclasses.replace(pod_info(core, "w0"), phase="Succeeded")
    core.observe_pod(done, T0 + 3)
    assert not [e for e in core.drain_effects() if isinstance(e, GangBroken)]
    bind(core, "w1", "n1", T0 + 4)
    assert [type(e) for e in core.drain_effects()] == [GangBound]


def test_a_bound_member_that_fails_while_the_others_still_bind_breaks_the_gang() -> None:
    core = released_pair()
    bind(core, "w0", "n1")
    core.drain_effects()
    core.observe_pod(dataclasses.replace(pod_info(core, "w0"), phase="Failed"), T0 + 3)
    [broken] = core.drain_effects()
    assert isinstance(broken, GangBroken)
    assert broken.member == "default/w0"


def released_across_two_nodes() -> GangCore:
    """Gang g of two 4-GPU members, one on each of n1 and n2, released; w0 bound."""
    pods = [make_pod(f"w{i}").group("g").min_available(2).gpus(4).obj() for i in range(2)]
    core = core_with([make_node("n1").gpus(4).obj(), make_node("n2").gpus(4).obj()], pods)
    core.filter(pod_info(core, "w0"), ["n1", "n2"], T0)
    plan = next(iter(core.ledger.plans.values()))
    for name in ("w0", "w1"):
        core.arrive(pod_info(core, name).uid, plan.placements[pod_info(core, name).uid], T0 + 1)
    assert plan.released
    bind(core, "w0", plan.placements[pod_info(core, "w0").uid])
    core.bind_failed(pod_info(core, "w1").uid, "503", T0 + 3)
    core.drain_effects()
    return core


def test_a_released_member_whose_node_is_not_offered_now_waits_for_it() -> None:
    core = released_across_two_nodes()
    planned = core.ledger.plan_of(pod_info(core, "w1").uid)
    assert planned is not None
    node = planned.placements[pod_info(core, "w1").uid]
    held = core.filter(pod_info(core, "w1"), [], T0 + 4)
    assert held.verdict is Verdict.WAIT and "keeps its reservation" in held.message
    assert core.ledger.plans and core.drain_effects() == []
    assert core.filter(pod_info(core, "w1"), [node], T0 + 5).nodes == [node]


def test_a_released_member_whose_planned_node_is_gone_breaks_the_gang() -> None:
    core = released_across_two_nodes()
    planned = core.ledger.plan_of(pod_info(core, "w1").uid)
    assert planned is not None
    node = planned.placements[pod_info(core, "w1").uid]
    core.forget_node(node)
    core.filter(pod_info(core, "w1"), [], T0 + 4)
    broken = [e for e in core.drain_effects() if isinstance(e, GangBroken)]
    assert [(b.member, b.cause) for b in broken] == [
        ("default/w1", f"its planned node {node} is gone")
    ]


def test_one_gpu_members_are_checked_for_room_too() -> None:
    core = planned_pair(gpus=1)  # 2 of n1's 4 GPUs reserved
    core.arrive(pod_info(core, "w0").uid, "n1", T0 + 1)
    default_scheduler_binds(core, "intruder", "n1", 3)
    last = core.arrive(pod_info(core, "w1").uid, "n1", T0 + 2)
    assert last.verdict is BindVerdict.ERROR
    assert "(nvidia.com/gpu short by 1)" in last.message


def test_a_resource_the_members_ask_none_of_being_short_does_not_stop_the_release() -> None:
    pods = [make_pod(f"w{i}").group("g").min_available(2).gpus(1).cpu("0").obj() for i in range(2)]
    core = core_with([make_node("n1").gpus(4).cpu("4").obj()], pods)
    assert core.filter(pod_info(core, "w0"), ["n1"], T0).verdict is Verdict.PLANNED
    core.arrive(pod_info(core, "w0").uid, "n1", T0 + 1)
    # Bound outside the plan, past the node's cpu: the gang asks for no cpu.
    core.observe_pod(PodInfo.from_api(make_pod("hog").cpu("6").node("n1").obj()), T0 + 1)
    assert core.arrive(pod_info(core, "w1").uid, "n1", T0 + 2).verdict is BindVerdict.RELEASE


def test_a_member_lost_after_release_gives_its_room_back_at_once() -> None:
    # Three 1-GPU members released on n1 (4 GPUs): w0 bound, w1 deleted, w2 still
    # binding. w1's GPU is free again now, not when w2 settles the plan.
    pods = [make_pod(f"w{i}").group("g").min_available(3).gpus(1).obj() for i in range(3)]
    core = core_with([make_node("n1").gpus(4).obj()], pods)
    assert core.filter(pod_info(core, "w0"), ["n1"], T0).verdict is Verdict.PLANNED
    for name in ("w0", "w1", "w2"):
        core.arrive(pod_info(core, name).uid, "n1", T0 + 1)
    assert core.binding_succeeded(pod_info(core, "w0").uid, "n1", T0 + 1)
    gone = make_pod("w1").group("g").min_available(3).gpus(1).obj()
    gone["metadata"]["deletionTimestamp"] = "2026-11-26T10:00:00Z"
    core.observe_pod(PodInfo.from_api(gone), T0 + 2)
    two_gpus = PodInfo.from_api(make_pod("plain").gpus(2).obj())
    assert core.filter(two_gpus, ["n1"], T0 + 2).nodes == ["n1"]


def test_the_drop_says_which_node_is_short_of_what_and_by_how_much() -> None:
    core = planned_pair()
    core.arrive(pod_info(core, "w0").uid, "n1", T0 + 1)
    default_scheduler_binds(core, "intruder", "n1", 1)
    plan = core.ledger.plan_of(pod_info(core, "w1").uid)
    assert plan is not None
    last = core.arrive(pod_info(core, "w1").uid, "n1", T0 + 2)
    assert (last.verdict, last.plan_id, last.group) == (BindVerdict.ERROR, plan.plan_id, plan.group)
    assert (
        "node n1 has no room left for its reservations (nvidia.com/gpu short by 1): pods "
        "bound outside the plan took it"
    ) in last.message


def released_apart() -> tuple[GangCore, Any]:
    """Gang g of two 4-GPU members released on n1 and n2, both bindings failed."""
    pods = [make_pod(f"w{i}").group("g").min_available(2).gpus(4).obj() for i in range(2)]
    core = core_with([make_node("n1").gpus(4).obj(), make_node("n2").gpus(4).obj()], pods)
    core.filter(pod_info(core, "w0"), ["n1", "n2"], T0)
    plan = next(iter(core.ledger.plans.values()))
    for name in ("w0", "w1"):
        uid = pod_info(core, name).uid
        core.arrive(uid, plan.placements[uid], T0 + 1)
    assert plan.released
    for name in ("w0", "w1"):
        core.bind_failed(pod_info(core, name).uid, "500: etcd leader changed", T0 + 2)
    core.drain_effects()
    return core, plan


def test_a_released_member_retried_at_another_node_is_told_where_it_is_reserved() -> None:
    core, plan = released_apart()
    w1 = pod_info(core, "w1")
    planned = plan.placements[w1.uid]
    other = "n1" if planned == "n2" else "n2"
    decision = core.arrive(w1.uid, other, T0 + 3)
    assert decision.verdict is BindVerdict.ERROR
    assert (decision.plan_id, decision.group) == (plan.plan_id, plan.group)
    assert decision.message == (
        f"gang default/g: default/w1 is reserved on {planned}, not {other}; retrying"
    )


def test_a_released_members_retry_checks_its_own_node_only() -> None:
    core, plan = released_apart()
    w0, w1 = pod_info(core, "w0"), pod_info(core, "w1")
    # Room on w1's node is taken by a pod outside the plan; w0's node is untouched.
    default_scheduler_binds(core, "intruder", plan.placements[w1.uid], 1)
    decision = core.arrive(w0.uid, plan.placements[w0.uid], T0 + 3)
    assert decision.verdict is BindVerdict.RELEASE
    assert w0.uid in plan.arrived
    short = core.arrive(w1.uid, plan.placements[w1.uid], T0 + 3)
    assert short.verdict is BindVerdict.ERROR
    assert (short.plan_id, short.group) == (plan.plan_id, plan.group)
    assert short.message == (
        f"gang default/g: node {plan.placements[w1.uid]} has no room left for its "
        "reservations (nvidia.com/gpu short by 1): pods bound outside the plan took it; "
        "default/w1 keeps its reservation and waits for room"
    )


def test_every_resource_a_node_is_short_of_is_named_with_its_shortfall() -> None:
    pods = [make_pod(f"w{i}").group("g").min_available(2).gpus(2).cpu("2").obj() for i in range(2)]
    core = core_with([make_node("n1").gpus(4).cpu("4").obj()], pods)
    core.filter(pod_info(core, "w0"), ["n1"], T0)
    core.arrive(pod_info(core, "w0").uid, "n1", T0 + 1)
    core.observe_pod(
        PodInfo.from_api(make_pod("intruder").gpus(1).cpu("3").node("n1").obj()), T0 + 1
    )
    last = core.arrive(pod_info(core, "w1").uid, "n1", T0 + 2)
    # cpu in millicores, as the core counts it
    assert "(cpu, nvidia.com/gpu short by 3000m, 1)" in last.message, last.message


def test_a_failed_binding_after_release_says_so_and_emits_exactly_what_failed() -> None:
    core = released_pair()
    core.groups.clear()  # a state the core lost (a leader that took over): made afresh
    w1 = pod_info(core, "w1")
    plan = core.ledger.plans[w1.group]  # type: ignore[index]
    core.bind_failed(w1.uid, "500: etcd leader changed", T0 + 3)
    assert w1.uid not in plan.arrived
    assert core.groups[plan.group].message == (
        "gang default/g: binding default/w1 failed (500: etcd leader changed); it keeps "
        "its reservation on n1 and is retried"
    )
    assert core.drain_effects() == [
        MemberBindFailed(plan, "default/w1", "500: etcd leader changed")
    ]


def test_a_member_gone_after_release_is_lost_with_its_cause() -> None:
    core = released_pair()
    bind(core, "w0", "n1")
    core.groups.clear()
    w1 = pod_info(core, "w1")
    plan = core.ledger.plans[w1.group]  # type: ignore[index]
    core.bind_failed(w1.uid, "404: pod deleted", T0 + 3, gone=True)
    assert plan.lost == {w1.uid: "binding failed: 404: pod deleted"}
    assert w1.uid not in plan.arrived
    assert core.ledger.plan_of(w1.uid) is not plan  # its reservation there is given back
    assert "gang default/g is partial: default/w1 cannot be bound (binding failed: 404" in (
        "".join(e.message for e in core.drain_effects() if isinstance(e, GangBroken))
    )


def test_a_timed_out_barrier_names_every_member_it_waited_for() -> None:
    pods = [make_pod(f"w{i}").group("g").min_available(3).gpus(1).obj() for i in range(3)]
    core = core_with([make_node("n1").gpus(4).obj()], pods)
    core.filter(pod_info(core, "w0"), ["n1"], T0)
    plan = next(iter(core.ledger.plans.values()))
    core.arrive(pod_info(core, "w0").uid, "n1", T0 + 1)
    assert core.barrier_deadline(plan.plan_id, plan.group) == T0 + 1 + 30
    assert core.barrier_deadline(plan.plan_id + 1, plan.group) is None
    message = core.barrier_timed_out(plan.plan_id, plan.group, T0 + 40)
    assert "bind barrier timed out waiting for default/w1, default/w2" in message
    assert core.ledger.plans == {}
    # Asked again (another waiter of the same plan): nothing more is dropped.
    assert core.barrier_timed_out(plan.plan_id, plan.group, T0 + 41) == message
    core.groups.clear()
    assert core.barrier_timed_out(plan.plan_id, plan.group, T0 + 42) == "bind barrier timed out"


def test_a_released_barrier_does_not_time_out() -> None:
    core = released_pair()
    plan = next(iter(core.ledger.plans.values()))
    core.barrier_timed_out(plan.plan_id, plan.group, T0 + 100)
    assert plan.group in core.ledger.plans
    assert core.barrier_deadline(plan.plan_id, plan.group) is not None


def test_the_watch_seeing_a_planned_member_again_keeps_the_plan() -> None:
    # The planned-node annotation the service writes comes back as a pod update.
    core = planned_pair()
    plan = core.ledger.plan_of(pod_info(core, "w0").uid)
    assert plan is not None
    again = make_pod("w1").group("g").min_available(2).gpus(2).obj()
    again["metadata"]["annotations"] = {"example.com/seen": "again"}
    core.observe_pod(PodInfo.from_api(again), T0 + 1)
    assert core.ledger.plans[plan.group] is plan


def test_a_planned_member_the_watch_sees_terminating_drops_the_plan_saying_so() -> None:
    core = planned_pair()
    plan = core.ledger.plan_of(pod_info(core, "w0").uid)
    assert plan is not None
    going = make_pod("w1").group("g").min_available(2).gpus(2).obj()
    going["metadata"]["deletionTimestamp"] = "2026-11-26T10:00:00Z"
    core.observe_pod(PodInfo.from_api(going), T0 + 1)
    assert core.drain_effects() == [PlanDropped(plan, "member default/w1 is gone")]
    assert core.groups[plan.group].retry_after == T0 + 1 + core.timeouts.replan_backoff_seconds


def test_a_bound_member_the_watch_sees_terminating_while_others_bind_breaks_the_gang() -> None:
    core = released_pair()
    bind(core, "w0", "n1")
    core.drain_effects()
    going = make_pod("w0").group("g").min_available(2).gpus(2).node("n1").obj()
    going["metadata"]["deletionTimestamp"] = "2026-11-26T10:00:00Z"
    core.observe_pod(PodInfo.from_api(going), T0 + 3)
    [broken] = core.drain_effects()
    assert isinstance(broken, GangBroken)
    assert (broken.member, broken.cause) == ("default/w0", "member default/w0 is gone")
