"""Gated admission: gangs behind gang-extender's scheduling gate are planned by the core.

kube-scheduler never asks about a gated pod, so nothing here calls `filter`: the
watch (`observe_pod`, `forget_pod`) and the periodic pass (`admit_gated`) are all
that plan such a gang, and the plan's writes lift the gate (docs/design.md#gated-admission).
"""

from __future__ import annotations

from typing import Any

import pytest

from extender.domain.cluster.fences import FenceNode
from extender.domain.gang.gang import GangCore, Timeouts
from extender.domain.objects.membership import ADMISSION_GATE, GroupKey
from extender.domain.objects.model import GroupSpec, PodInfo
from extender.domain.queue.gang_admission import (
    ADMISSION_WINDOW_MEMBERS,
    LIFT_RETRY_SECONDS,
    SPEC_GRACE_SECONDS,
)
from extender.domain.state.decisions import (
    EvictVictims,
    LiftAdmissionGate,
    PlanCreated,
    Verdict,
)
from extender.domain.state.gang_state import HoldReason
from tests.builders import make_node, make_pod, make_podgroup
from tests.core_builder import make_core

T0 = 1_000_000.0
KUEUE_GATE = "kueue.x-k8s.io/admission"


def gated_member(name: str, group: str = "g", size: int = 2, gpus: int = 1) -> Any:
    return make_pod(name).group(group).min_available(size).gpus(gpus).gate(ADMISSION_GATE)


# Gangs of 64 one-GPU members: FIT of them fill the admission window.
PER_GANG = 64
FIT = ADMISSION_WINDOW_MEMBERS // PER_GANG


def window_cluster(gangs: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """FIT + 2 nodes of PER_GANG GPUs, and `gangs` gated gangs g0, g1... of PER_GANG."""
    nodes = [make_node(f"n{i}").gpus(PER_GANG).obj() for i in range(FIT + 2)]
    members = [
        gated_member(f"g{g}-{m}", group=f"g{g}", size=PER_GANG).obj()
        for g in range(gangs)
        for m in range(PER_GANG)
    ]
    return nodes, members


def planned(core: GangCore) -> list[list[str]]:
    """The members of each plan the drained effects created, in order."""
    return [
        sorted(e.plan.names.values()) for e in core.drain_effects() if isinstance(e, PlanCreated)
    ]


def lifted(core: GangCore) -> list[tuple[str, str]]:
    return [(e.pod, e.reason) for e in core.drain_effects() if isinstance(e, LiftAdmissionGate)]


def info(core: GangCore, name: str) -> PodInfo:
    return next(p for p in core.snapshot.pods.values() if p.name == name)


@pytest.mark.parametrize(
    ("gates", "gated", "admission_gated"),
    [
        ([], False, False),
        ([ADMISSION_GATE], False, True),
        ([KUEUE_GATE], True, False),
        ([KUEUE_GATE, ADMISSION_GATE], True, True),
        (["example.com/other"], True, False),
    ],
)
def test_which_gate_holds_a_pod(gates: list[str], gated: bool, admission_gated: bool) -> None:
    builder = make_pod("p")
    for gate in gates:
        builder = builder.gate(gate)
    pod = PodInfo.from_api(builder.obj())
    assert (pod.gated, pod.admission_gated) == (gated, admission_gated)


def test_a_gated_gang_is_planned_when_its_last_member_arrives_without_any_filter() -> None:
    core = make_core([make_node("n1").gpus(4).obj()], [gated_member("w0", size=3).obj()], now=T0)
    assert planned(core) == []
    core.observe_pod(PodInfo.from_api(gated_member("w1", size=3).obj()), T0 + 1)
    assert planned(core) == []  # 2/3 members: held
    core.observe_pod(PodInfo.from_api(gated_member("w2", size=3).obj()), T0 + 2)
    assert planned(core) == [["default/w0", "default/w1", "default/w2"]]


def test_the_same_gang_without_the_gate_waits_for_kube_scheduler_to_ask() -> None:
    pods = [make_pod(f"w{i}").group("g").min_available(2).gpus(1).obj() for i in range(2)]
    core = make_core([make_node("n1").gpus(4).obj()], pods, now=T0)
    core.admit_gated(T0 + 1)
    assert planned(core) == []


def test_a_gated_gang_that_does_not_fit_is_planned_by_the_pass_once_room_frees() -> None:
    blocker = make_pod("blocker").gpus(3).node("n1").obj()
    gang = [gated_member(f"w{i}").obj() for i in range(2)]
    core = make_core([make_node("n1").gpus(4).obj()], [blocker, *gang], now=T0)
    core.admit_gated(T0 + 1)
    assert planned(core) == []
    core.forget_pod(info(core, "blocker").uid, T0 + 2)
    core.admit_gated(T0 + 3)
    assert planned(core) == [["default/w0", "default/w1"]]


def test_the_pass_plans_gated_gangs_in_queue_order() -> None:
    # Room for one gang of two: the higher priority one goes, though created later.
    low = [gated_member(f"l{i}", group="low").created("2026-11-22T09:00:00Z") for i in range(2)]
    high = [gated_member(f"h{i}", group="high").priority(100) for i in range(2)]
    blocker = make_pod("blocker").gpus(2).node("n1").obj()
    core = make_core(
        [make_node("n1").gpus(4).obj()], [blocker, *[p.obj() for p in low + high]], now=T0
    )
    assert planned(core) == [["default/l0", "default/l1"]]  # it fit when it arrived
    core.forget_pod(info(core, "blocker").uid, T0 + 1)
    core.admit_gated(T0 + 2)
    assert planned(core) == [["default/h0", "default/h1"]]


def test_a_gang_kueue_still_gates_is_not_planned_until_kueue_lifts_its_gate() -> None:
    # Kueue gates every pod of a workload and lifts its gate off all of them at admission.
    both = [gated_member(f"w{i}").gate(KUEUE_GATE).obj() for i in range(2)]
    core = make_core([make_node("n1").gpus(4).obj()], both, now=T0)
    core.admit_gated(T0 + 1)
    assert planned(core) == []
    core.observe_pod(PodInfo.from_api(gated_member("w0").obj()), T0 + 2)
    # Planned once Kueue admits; w1's Kueue gate, if still there, holds only its bind.
    assert planned(core) == [["default/w0", "default/w1"]]


@pytest.mark.parametrize(
    ("pod", "why"),
    [
        (make_pod("plain").gpus(1).gate(ADMISSION_GATE), "it is not a member of a gang"),
        (
            gated_member("other").scheduler("default-scheduler"),
            "its schedulerName is default-scheduler, not gang-extender",
        ),
        (
            make_pod("bad").group("g").min_available(0).gpus(1).gate(ADMISSION_GATE),
            "misdeclared",
        ),
    ],
)
def test_a_gate_nobody_will_plan_behind_is_lifted_with_why(pod: Any, why: str) -> None:
    core = make_core([make_node("n1").gpus(4).obj()], [pod.obj()], now=T0)
    core.admit_gated(T0)
    (effect,) = [e for e in core.drain_effects() if isinstance(e, LiftAdmissionGate)]
    assert effect.pod == f"default/{pod.obj()['metadata']['name']}"
    assert effect.group == PodInfo.from_api(pod.obj()).group
    assert why in effect.reason


def test_members_that_disagree_on_the_gang_size_are_ungated_for_the_filter_to_say_so() -> None:
    pods = [gated_member("w0", size=2).obj(), gated_member("w1", size=3).obj()]
    core = make_core([make_node("n1").gpus(4).obj()], pods, now=T0)
    core.admit_gated(T0)
    assert sorted(ref for ref, _ in lifted(core)) == ["default/w0", "default/w1"]


def test_a_member_without_a_group_spec_keeps_its_gate_for_a_grace_then_is_ungated() -> None:
    pod = make_pod("w0").group("g").gpus(1).gate(ADMISSION_GATE).obj()  # no size anywhere
    core = make_core([make_node("n1").gpus(4).obj()], [pod], now=T0)
    core.admit_gated(T0 + SPEC_GRACE_SECONDS - 1)
    assert lifted(core) == []
    core.admit_gated(T0 + SPEC_GRACE_SECONDS)
    ((ref, reason),) = lifted(core)
    assert ref == "default/w0" and "has no PodGroup" in reason


def test_a_podgroup_seen_within_the_grace_keeps_the_gate_and_plans_the_gang() -> None:
    pods = [make_pod(f"w{i}").group("g").gpus(1).gate(ADMISSION_GATE).obj() for i in range(2)]
    core = make_core([make_node("n1").gpus(4).obj()], pods, now=T0)
    core.apply_group_spec(GroupSpec.from_podgroup(make_podgroup("g", 2), source="PodGroup"))
    core.group_changed(GroupKey("default", "g"), T0 + 1)
    core.admit_gated(T0 + SPEC_GRACE_SECONDS + 1)
    effects = core.drain_effects()
    assert not any(isinstance(e, LiftAdmissionGate) for e in effects)
    assert [sorted(e.plan.names.values()) for e in effects if isinstance(e, PlanCreated)] == [
        ["default/w0", "default/w1"]
    ]


def test_a_lift_still_asked_for_does_not_hold_up_the_next_pod_s() -> None:
    core = make_core([make_node("n1").gpus(4).obj()], [make_pod("p").gate(ADMISSION_GATE).obj()])
    core.admit_gated(T0)
    assert [ref for ref, _ in lifted(core)] == ["default/p"]
    core.observe_pod(PodInfo.from_api(make_pod("q").gate(ADMISSION_GATE).obj()), T0 + 1)
    core.admit_gated(T0 + 1)
    assert lifted(core) == [("default/q", "it is not a member of a gang")]


def test_a_lift_is_asked_once_and_again_only_if_the_gate_outlives_the_retry() -> None:
    core = make_core([make_node("n1").gpus(4).obj()], [make_pod("p").gate(ADMISSION_GATE).obj()])
    core.admit_gated(T0)
    assert len(lifted(core)) == 1
    core.admit_gated(T0 + LIFT_RETRY_SECONDS - 1)
    assert lifted(core) == []
    core.admit_gated(T0 + LIFT_RETRY_SECONDS)
    assert len(lifted(core)) == 1


def test_a_pod_the_watch_shows_ungated_or_gone_is_forgotten() -> None:
    core = make_core(
        [make_node("n1").gpus(4).obj()],
        [make_pod("p").gate(ADMISSION_GATE).obj(), make_pod("q").gate(ADMISSION_GATE).obj()],
        now=T0,
    )
    assert set(core.shared.admission_gated) == {"uid-default-p", "uid-default-q"}
    core.admit_gated(T0)
    core.drain_effects()
    core.observe_pod(PodInfo.from_api(make_pod("p").obj()), T0 + 1)
    core.forget_pod("uid-default-q", T0 + 1)
    assert core.shared.admission_gated == {}
    assert core.shared.gates_lifting == {}


def test_a_gated_gang_of_higher_priority_preempts_without_kube_scheduler() -> None:
    filler = make_pod("filler").gpus(4).priority(0).node("n1").obj()
    gang = [gated_member(f"w{i}").priority(100).obj() for i in range(2)]
    core = make_core([make_node("n1").gpus(4).obj()], [filler, *gang], preemption=True, now=T0)
    effects = core.drain_effects()
    evicted = [v.ref for e in effects if isinstance(e, EvictVictims) for v in e.victims]
    assert evicted == ["default/filler"]
    assert [sorted(e.plan.names.values()) for e in effects if isinstance(e, PlanCreated)] == [
        ["default/w0", "default/w1"]
    ]


def test_a_gated_preemptor_keeps_its_gate_until_its_victims_are_gone() -> None:
    fillers = [make_pod(f"filler{i}").gpus(2).priority(0).node("n1").obj() for i in range(2)]
    gang = [gated_member(f"w{i}", gpus=2).priority(100).obj() for i in range(2)]
    core = make_core([make_node("n1").gpus(4).obj()], [*fillers, *gang], preemption=True, now=T0)
    (plan,) = core.ledger.plans.values()
    assert len(plan.victims) == 2
    assert plan.gates_held
    assert lifted(core) == []
    core.forget_pod(info(core, "filler0").uid, T0 + 1)
    assert lifted(core) == []  # filler1 still holds the node
    core.forget_pod(info(core, "filler1").uid, T0 + 2)
    assert sorted(ref for ref, _ in lifted(core)) == ["default/w0", "default/w1"]
    assert not plan.gates_held


def test_a_planned_gated_member_is_answered_from_its_plan_once_ungated() -> None:
    core = make_core(
        [make_node("n1").gpus(4).obj()], [gated_member(f"w{i}").obj() for i in range(2)]
    )
    (plan,) = core.ledger.plans.values()
    # The plan's write lifted the gate; kube-scheduler now asks about the member.
    core.observe_pod(PodInfo.from_api(make_pod("w0").group("g").min_available(2).gpus(1).obj()), T0)
    decision = core.filter(info(core, "w0"), ["n1"], T0 + 1)
    assert decision.verdict is Verdict.PLANNED
    assert plan.placements["uid-default-w0"] == "n1"


def test_gated_gangs_past_the_admission_window_wait_gated_until_planned_members_bind() -> None:
    per_gang = 64
    fit = ADMISSION_WINDOW_MEMBERS // per_gang  # gangs the window holds at once
    nodes = [make_node(f"n{i}").gpus(per_gang).obj() for i in range(fit + 2)]
    gangs = [
        gated_member(f"g{g}-{m}", group=f"g{g}", size=per_gang).obj()
        for g in range(fit + 1)
        for m in range(per_gang)
    ]
    core = make_core(nodes, gangs, now=T0)
    assert len(planned(core)) == fit  # room for one more gang, but the window is full
    last = core.shared.groups[GroupKey("default", f"g{fit}")]
    assert last.hold is HoldReason.ADMISSION_WINDOW
    assert f"binds {ADMISSION_WINDOW_MEMBERS} planned members" in last.message
    # kube-scheduler binds the first gang's members: its last binding admits the next
    # gang at once, without waiting for the periodic pass.
    (first,) = [p for p in core.ledger.plans.values() if p.group == GroupKey("default", "g0")]
    bindings = list(first.placements.items())
    for uid, node in bindings:
        core.arrive(uid, node, T0 + 1)
    for uid, node in bindings[:-1]:
        core.binding_succeeded(uid, node, T0 + 1)
    assert planned(core) == []  # 1 member still in flight: no room for 64
    core.binding_succeeded(*bindings[-1], T0 + 1)
    assert planned(core) == [sorted(f"default/g{fit}-{m}" for m in range(per_gang))]


def test_starvation_does_not_reserve_for_a_gang_waiting_its_turn_in_the_window() -> None:
    per_gang = 64
    fit = ADMISSION_WINDOW_MEMBERS // per_gang
    nodes = [make_node(f"n{i}").gpus(per_gang).obj() for i in range(fit + 2)]
    # The oldest gang, first in queue order, completes after the window filled.
    old = [
        gated_member(f"old-{m}", group="old", size=per_gang).created("2026-11-22T09:00:00Z")
        for m in range(per_gang)
    ]
    young = [
        gated_member(f"g{g}-{m}", group=f"g{g}", size=per_gang).obj()
        for g in range(fit)
        for m in range(per_gang)
    ]
    # Plans outlive the wait (600 s) that makes a held gang starve (5 s).
    core = make_core(
        nodes,
        [*[p.obj() for p in old[:-1]], *young],
        now=T0,
        timeouts=Timeouts(600, 30, 2, starvation_seconds=5),
    )
    core.observe_pod(PodInfo.from_api(old[-1].obj()), T0)
    assert core.shared.groups[GroupKey("default", "old")].hold is HoldReason.ADMISSION_WINDOW
    core.expire(T0 + 1)  # the starvation check first sees the gang held
    core.expire(T0 + 100)
    assert core.starving_holds() == {}
    assert not any(isinstance(e, FenceNode) for e in core.drain_effects())


def test_a_gang_starving_for_room_still_reserves_beside_one_waiting_in_the_window() -> None:
    per_gang, fit = PER_GANG, FIT
    nodes, young = window_cluster(fit)
    old = [
        gated_member(f"old-{m}", group="old", size=per_gang).created("2026-11-22T09:00:00Z")
        for m in range(per_gang)
    ]
    # First in queue order, last by name: 3 whole nodes, 2 free. It starves for room.
    big = [
        make_pod(f"zz-{m}")
        .group("zz")
        .min_available(3)
        .gpus(per_gang)
        .created("2026-11-22T08:00:00Z")
        .obj()
        for m in range(3)
    ]
    # It arrives once the young gangs hold 4 of the 6 nodes; old completes last.
    core = make_core(
        nodes,
        [*young, *[p.obj() for p in old[:-1]], *big, old[-1].obj()],
        now=T0,
        timeouts=Timeouts(600, 30, 2, starvation_seconds=5),
    )
    assert GroupKey("default", "zz") not in core.ledger.plans
    assert core.shared.groups[GroupKey("default", "old")].hold is HoldReason.ADMISSION_WINDOW
    core.expire(T0 + 1)
    core.expire(T0 + 100)
    holders = {hold.owner for hold in core.starving_holds().values()}
    assert holders == {GroupKey("default", "zz")}


def test_an_ungated_gang_is_planned_whatever_the_window_holds() -> None:
    fit = FIT
    nodes, gated = window_cluster(fit)
    free = [make_pod(f"u-{m}").group("u").min_available(2).gpus(1).obj() for m in range(2)]
    core = make_core(nodes, [*gated, *free], now=T0)
    core.drain_effects()
    decision = core.filter(info(core, "u-0"), [f"n{i}" for i in range(fit + 2)], T0 + 1)
    assert decision.verdict is Verdict.PLANNED


def test_a_gang_larger_than_the_window_is_planned_when_nothing_else_is_in_flight() -> None:
    size = ADMISSION_WINDOW_MEMBERS + 1
    nodes = [make_node(f"n{i}").gpus(64).obj() for i in range(size // 64 + 1)]
    gang = [gated_member(f"w{m}", size=size).obj() for m in range(size)]
    core = make_core(nodes, gang, now=T0)
    assert len(planned(core)) == 1
