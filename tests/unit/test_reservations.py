"""Starvation reservations (issue 13, item 2): which nodes, what is held, for how long,
and what the core refuses others while a starving gang holds them."""

from __future__ import annotations

from typing import Any

import pytest

from extender.domain.gang.gang import GangCore, Timeouts
from extender.domain.objects.membership import GroupKey
from extender.domain.objects.model import STARVATION_ANNOTATION, GroupSpec, PodInfo
from extender.domain.starvation.reservations import (
    NodeGpus,
    Reservation,
    choose_nodes,
    hold,
    reservation_message,
    starving,
)
from extender.domain.state.decisions import BindVerdict, PlanCreated, Verdict
from extender.domain.state.gang_state import StarvingHold
from extender.domain.status.status import group_status
from tests.builders import make_node, make_pod, make_podgroup
from tests.core_builder import make_core

T0 = 1_000_000.0
CREATED_AT_T0 = "1970-01-12T13:46:40Z"  # T0 as an API timestamp
BIG = GroupKey("default", "big")


# ------------------------------------------------------------------ the pure module
def test_the_fewest_nodes_whose_capacity_holds_the_gang_are_chosen() -> None:
    nodes = {"a": NodeGpus(8, 0), "b": NodeGpus(4, 4), "c": NodeGpus(4, 3)}
    assert choose_nodes(8, nodes) == ("a",)
    assert choose_nodes(12, nodes) == ("b", "a")  # listed most free first


def test_among_as_few_nodes_the_most_free_now_is_preferred() -> None:
    nodes = {"a": NodeGpus(8, 0), "b": NodeGpus(4, 2), "c": NodeGpus(4, 3)}
    assert choose_nodes(4, nodes) == ("c",)


def test_nodes_too_small_in_all_are_no_choice() -> None:
    assert choose_nodes(9, {"a": NodeGpus(4, 4), "b": NodeGpus(4, 4)}) is None
    assert choose_nodes(0, {"a": NodeGpus(4, 4)}) is None


def test_a_choice_the_members_do_not_fit_is_widened() -> None:
    # Two 3-GPU members: capacity 6 on one 6-GPU node would do, but say it does not.
    nodes = {"a": NodeGpus(6, 6), "b": NodeGpus(4, 0), "c": NodeGpus(4, 1)}
    chosen = choose_nodes(6, nodes, holds=lambda ns: len(ns) >= 2)
    assert chosen == ("a", "c")  # a alone (most free) first, then widened
    assert choose_nodes(6, {"a": NodeGpus(6, 6)}, holds=lambda ns: False) is None


def test_nodes_given_up_are_taken_only_when_nothing_else_holds_the_gang() -> None:
    nodes = {"a": NodeGpus(4, 3), "b": NodeGpus(4, 1)}
    assert choose_nodes(4, nodes, avoid={"a"}) == ("b",)
    assert choose_nodes(8, nodes, avoid={"a"}) == ("a", "b")


def test_held_is_what_is_free_in_node_order_up_to_the_need() -> None:
    r = Reservation(BIG, ("a", "b"), need=5, started=T0, deadline=T0 + 10)
    assert hold(r, {"a": 3, "b": 4}) == {"a": 3, "b": 2}
    assert hold(r, {"a": -1, "b": 1}) == {"b": 1}
    assert hold(r, {"a": 9}) == {"a": 5}


def test_a_reservation_expires_at_its_deadline_not_before() -> None:
    r = Reservation(BIG, ("a",), need=1, started=T0, deadline=T0 + 10)
    assert not r.expired(T0 + 9.999)
    assert r.expired(T0 + 10)


def test_starving_is_held_strictly_longer_than_the_limit() -> None:
    assert not starving(T0, T0 + 5, 5)
    assert starving(T0, T0 + 5.001, 5)


def test_the_message_names_nodes_and_free_over_needed() -> None:
    r = Reservation(BIG, ("gpu-3", "gpu-7"), need=8, started=T0, deadline=T0 + 10)
    assert reservation_message(r, {"gpu-3": 4, "gpu-7": 2}) == (
        "reserving gpu-3, gpu-7: 6/8 GPUs free"
    )


# ------------------------------------------------------------------------ the core
def core_with(nodes: list[dict[str, Any]], *, starvation: float = 5, max_s: float = 30) -> GangCore:
    return make_core(
        nodes,
        timeouts=Timeouts(60, 30, 2, starvation_seconds=starvation, reservation_max_seconds=max_s),
    )


def add_gang(
    core: GangCore, name: str, size: int, gpus: int, *, spec: dict[str, Any] | None = None
) -> list[PodInfo]:
    core.apply_group_spec(
        GroupSpec.from_podgroup(make_podgroup(name, size, **(spec or {})), source="PodGroup")
    )
    pods = [
        PodInfo.from_api(
            make_pod(f"{name}-{i}").group(name).gpus(gpus).created(CREATED_AT_T0).obj()
        )
        for i in range(size)
    ]
    for p in pods:
        core.observe_pod(p, T0)
    return pods


def bound_small(core: GangCore, name: str, node: str) -> PodInfo:
    pod = PodInfo.from_api(make_pod(name).gpus(1).node(node).obj())
    core.observe_pod(pod, T0)
    return pod


def plain(name: str) -> PodInfo:
    return PodInfo.from_api(make_pod(name).gpus(1).obj())


def finish(core: GangCore, pod: PodInfo, now: float) -> None:
    core.forget_pod(pod.uid, now)


def churned_core() -> tuple[GangCore, list[PodInfo]]:
    """A 4-GPU node full of 1-GPU pods, a 4-GPU gang waiting for it (asked once)."""
    core = core_with([make_node("n1").gpus(4).obj()])
    smalls = [bound_small(core, f"s{i}", "n1") for i in range(4)]
    big = add_gang(core, "big", 4, 1)
    assert core.filter(big[0], ["n1"], T0).verdict is Verdict.WAIT
    return core, smalls


def test_before_starvation_seconds_a_freed_gpu_goes_to_a_small_pod() -> None:
    core, smalls = churned_core()
    finish(core, smalls[0], T0 + 1)
    decision = core.filter(plain("new"), ["n1"], T0 + 2)
    assert decision.nodes == ["n1"]
    assert core.starvation.reservations == {}


def test_after_starvation_seconds_a_freed_gpu_is_held_for_the_gang() -> None:
    core, smalls = churned_core()
    core.expire(T0 + 6)
    assert core.starvation.reservations[BIG].nodes == ("n1",)
    finish(core, smalls[0], T0 + 7)
    decision = core.filter(plain("new"), ["n1"], T0 + 7)
    core.expire(T0 + 7)  # the reconcile tick brings the message up to date
    assert decision.nodes == []
    assert decision.failed["n1"] == (
        "1 free nvidia.com/gpu on n1 are reserved for gang default/big, which has waited longer "
        "than its starvationSeconds; nothing else is placed there until it fits"
    )
    assert core.groups[BIG].message.startswith(
        "gang default/big: reserving n1: 1/4 GPUs free; it has waited longer than its "
        "starvationSeconds (5 s)"
    )
    status = group_status(core, BIG)
    assert status is not None and "reserving n1: 1/4 GPUs free" in status.message
    assert BIG in core.drain_touched()


def test_a_pod_without_gpus_is_never_refused_by_a_reservation() -> None:
    core, smalls = churned_core()
    core.expire(T0 + 6)
    finish(core, smalls[0], T0 + 7)
    cpu_only = PodInfo.from_api(make_pod("cpu-only").cpu("100m").obj())
    assert core.filter(cpu_only, ["n1"], T0 + 7).nodes == ["n1"]


def test_a_failed_binding_on_a_reserved_node_gives_the_room_back_and_keeps_the_reservation() -> (
    None
):
    core, smalls = churned_core()
    core.expire(T0 + 6)
    finish(core, smalls[0], T0 + 7)
    cpu_only = PodInfo.from_api(make_pod("cpu-only").cpu("100m").obj())
    core.observe_pod(cpu_only, T0 + 7)
    assumption = core.assume_bound(cpu_only.uid, "n1", T0 + 7)
    assert assumption is not None and core.snapshot.pods[cpu_only.uid].node_name == "n1"
    assert core.undo_assumption(assumption, T0 + 8)  # the binding call failed
    assert core.snapshot.pods[cpu_only.uid].node_name is None
    assert core.starvation.reservations[BIG].nodes == ("n1",)
    assert core.starving_holds()["n1"] == (BIG, 1, "nvidia.com/gpu")


def test_gpus_free_beyond_what_a_reservation_holds_stay_open_to_plain_pods() -> None:
    # A plain pod is refused only the GPUs the starving gang holds on the node: asked
    # with a hold of 2 of the 3 free GPUs, one is left for it.
    core = core_with([make_node("n1").gpus(8).obj()])
    smalls = [bound_small(core, f"s{i}", "n1") for i in range(6)]
    big = add_gang(core, "big", 4, 1)
    core.filter(big[0], ["n1"], T0)
    core.expire(T0 + 6)
    assert core.starvation.reservations[BIG].need == 4
    finish(core, smalls[0], T0 + 7)  # 3 free: all held for the gang (need 4)
    assert core.filter(plain("p1"), ["n1"], T0 + 7).nodes == []
    held = core.starving_holds()["n1"]
    assert held == (BIG, 3, "nvidia.com/gpu")
    # The refusal counts what the gang holds there, not what is free.
    assert (
        core.starvation.starving_refusal(plain("p2"), "n1", StarvingHold(BIG, 2, "nvidia.com/gpu"))
        == ""
    )
    assert core.starvation.starving_refusal(
        plain("p3"), "n1", StarvingHold(BIG, 3, "nvidia.com/gpu")
    ).startswith("3 free nvidia.com/gpu on n1")


def test_a_small_pod_that_passed_filter_before_the_reservation_is_refused_at_bind() -> None:
    core, smalls = churned_core()
    finish(core, smalls[0], T0 + 1)
    late = PodInfo.from_api(make_pod("late").gpus(1).obj())
    core.observe_pod(late, T0 + 1)
    assert core.filter(late, ["n1"], T0 + 1).nodes == ["n1"]
    core.expire(T0 + 6)
    decision = core.arrive(late.uid, "n1", T0 + 6)
    assert decision.verdict is BindVerdict.ERROR
    assert "reserved for gang default/big" in decision.message


def test_the_gang_is_planned_once_every_gpu_it_needs_is_free_there() -> None:
    core, smalls = churned_core()
    core.expire(T0 + 6)
    core.drain_effects()
    for i, pod in enumerate(smalls):
        finish(core, pod, T0 + 7 + i)
        core.filter(plain(f"r{i}"), ["n1"], T0 + 7 + i)  # each replacement is refused
        core.expire(T0 + 7 + i)
    planned = [e.plan.group for e in core.drain_effects() if isinstance(e, PlanCreated)]
    assert planned == [BIG]
    assert BIG not in core.starvation.reservations  # the plan holds the room now


def test_another_gang_is_not_planned_into_held_gpus() -> None:
    core, smalls = churned_core()
    core.expire(T0 + 6)
    small = add_gang(core, "pair", 2, 1)
    finish(core, smalls[0], T0 + 7)
    finish(core, smalls[1], T0 + 7)
    decision = core.filter(small[0], ["n1"], T0 + 7)
    assert decision.verdict is Verdict.WAIT
    assert GroupKey("default", "pair") not in core.ledger.plans


def test_a_gang_ahead_in_the_queue_keeps_the_one_behind_from_reserving() -> None:
    core = core_with([make_node("n1").gpus(4).obj()])
    for i in range(4):
        bound_small(core, f"s{i}", "n1")
    add_gang(core, "big", 4, 1)
    high = add_gang(core, "high", 2, 1)
    for p in high:
        again = make_pod(p.name).group("high").gpus(1).priority(9).created(CREATED_AT_T0)
        core.observe_pod(PodInfo.from_api(again.obj()), T0)
    core.expire(T0)  # both seen held from here
    core.expire(T0 + 6)
    assert set(core.starvation.reservations) == {GroupKey("default", "high")}


def test_a_reservation_gives_up_at_its_bound_and_chooses_other_nodes() -> None:
    core = core_with([make_node("n1").gpus(4).obj(), make_node("n2").gpus(4).obj()], max_s=30)
    for i in range(4):
        bound_small(core, f"a{i}", "n1")
        bound_small(core, f"b{i}", "n2")
    add_gang(core, "big", 4, 1)
    core.expire(T0)
    core.expire(T0 + 6)
    first = core.starvation.reservations[BIG]
    assert first.deadline == T0 + 6 + 30
    core.expire(T0 + 6 + 29)
    assert core.starvation.reservations[BIG] == first
    core.expire(T0 + 6 + 30)
    again = core.starvation.reservations[BIG]
    assert again.started == T0 + 36
    assert set(again.nodes).isdisjoint(first.nodes)


def test_spec_starvation_seconds_wins_over_the_default() -> None:
    core = core_with([make_node("n1").gpus(4).obj()], starvation=5)
    for i in range(4):
        bound_small(core, f"s{i}", "n1")
    add_gang(core, "big", 4, 1, spec={"starvationSeconds": 100})
    core.expire(T0)
    core.expire(T0 + 50)
    assert core.starvation.reservations == {}
    core.expire(T0 + 101)
    assert BIG in core.starvation.reservations


def test_the_annotation_form_sets_it_for_a_group_declared_by_annotation() -> None:
    core = core_with([make_node("n1").gpus(2).obj()], starvation=1000)
    bound_small(core, "s0", "n1")
    bound_small(core, "s1", "n1")
    for i in range(2):
        pod = (
            make_pod(f"ann-{i}")
            .group("ann")
            .gpus(1)
            .created(CREATED_AT_T0)
            .annotation("gang-extender.io/min-available", "2")
            .annotation(STARVATION_ANNOTATION, "7")
        )
        core.observe_pod(PodInfo.from_api(pod.obj()), T0)
    core.expire(T0)
    core.expire(T0 + 8)
    assert GroupKey("default", "ann") in core.starvation.reservations


@pytest.mark.parametrize("value", ["soon", "0", "-3", "inf"])
def test_an_unreadable_annotation_is_a_group_error_naming_it(value: str) -> None:
    pod = make_pod("x").group("g").annotation(STARVATION_ANNOTATION, value).obj()
    error = PodInfo.from_api(pod).group_error
    assert error is not None and STARVATION_ANNOTATION in error and "> 0" in error


@pytest.mark.parametrize("value", [0, -1, "60", True])
def test_a_bad_spec_starvation_seconds_is_an_invalid_spec(value: Any) -> None:
    spec = GroupSpec.from_podgroup(
        make_podgroup("g", 1, starvationSeconds=value), source="PodGroup"
    )
    assert spec.error == f"PodGroup spec.starvationSeconds={value!r} must be > 0"


def test_a_gang_that_needs_no_gpu_does_not_reserve() -> None:
    core = core_with([make_node("n1").gpus(4).obj()])
    core.apply_group_spec(GroupSpec.from_podgroup(make_podgroup("cpu", 1), source="PodGroup"))
    pod = make_pod("cpu-0").group("cpu").created(CREATED_AT_T0).obj()
    pod["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "999"}}
    core.observe_pod(PodInfo.from_api(pod), T0)
    core.expire(T0)
    core.expire(T0 + 60)
    assert core.starvation.reservations == {}


def test_the_wait_counts_from_when_the_service_first_saw_the_gang_held() -> None:
    # Members created long ago (gated, say) do not make a gang starve at once.
    core = core_with([make_node("n1").gpus(4).obj()], starvation=5)
    for i in range(4):
        bound_small(core, f"s{i}", "n1")
    add_gang(core, "big", 4, 1)  # created at T0
    core.expire(T0 + 100)
    assert core.starvation.reservations == {}
    core.expire(T0 + 105)
    assert core.starvation.reservations == {}
    core.expire(T0 + 106)
    assert BIG in core.starvation.reservations


def test_a_gang_no_longer_held_starts_its_wait_again() -> None:
    core, smalls = churned_core()
    core.expire(T0 + 3)
    core.apply_group_spec(
        GroupSpec.from_podgroup(make_podgroup("big", 5), source="PodGroup")
    )  # now short of a member: not held
    core.expire(T0 + 4)
    assert BIG not in core.starvation.held_since
    core.apply_group_spec(GroupSpec.from_podgroup(make_podgroup("big", 4), source="PodGroup"))
    core.expire(T0 + 5)
    core.expire(T0 + 10)
    assert core.starvation.reservations == {}
    core.expire(T0 + 10.5)  # within the check interval: not looked at
    core.expire(T0 + 11)
    assert BIG in core.starvation.reservations


def test_a_dropped_plan_does_not_restart_the_wait() -> None:
    core, smalls = churned_core()
    core.expire(T0 + 6)
    for pod in smalls:
        finish(core, pod, T0 + 7)
    core.expire(T0 + 8)
    plan = core.ledger.plans[BIG]
    core.barrier_timed_out(plan.plan_id, BIG, T0 + 9)  # nobody reached bind
    assert BIG not in core.ledger.plans
    for i in range(4):
        bound_small(core, f"again{i}", "n1")
    core.expire(T0 + 12)  # past the replan backoff: reserving again at once
    assert BIG in core.starvation.reservations


@pytest.mark.parametrize("podgroup_last", [False, True], ids=["podgroup first", "podgroup last"])
def test_a_reserving_gang_deleted_and_recreated_under_its_name_starts_afresh(
    podgroup_last: bool,
) -> None:
    # `kubectl replace` of a job: everything of big goes, a new big comes before the
    # next reservation pass. The new gang neither inherits the reservation nor the
    # old one's starvation clock.
    core, _ = churned_core()
    core.expire(T0 + 6)
    assert BIG in core.starvation.reservations

    def drop_podgroup() -> None:
        core.forget_group_spec("PodGroup", BIG)
        core.forget_group_if_gone(BIG)  # what the watch's PodGroup deletion does

    if not podgroup_last:
        drop_podgroup()
    for member in core.snapshot.members(BIG):
        core.forget_pod(member.uid, T0 + 7)
    if podgroup_last:
        drop_podgroup()
    assert BIG not in core.starvation.reservations and BIG not in core.groups
    new = add_gang(core, "big", 4, 1)
    core.filter(new[0], ["n1"], T0 + 8)
    core.expire(T0 + 8)
    assert BIG not in core.starvation.reservations  # its clock starts now, not at T0
    core.expire(T0 + 14)
    assert core.starvation.reservations[BIG].started == T0 + 14
