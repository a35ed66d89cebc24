"""Edges of the core's filter and prioritize that the mutation run of 2026-11-26 found
untested: a plain pod beside a plan's reservation, a refusal naming every gang that
reserved a node, a planned member's prioritize, a member the watch has not delivered,
and which placeholders keep a planned member waiting."""

from __future__ import annotations

import pytest

import extender.domain.gang.gang_filter as gang_filter_module
from extender.domain.cluster.ledger import Plan
from extender.domain.gang.gang import GangCore
from extender.domain.objects.membership import GroupKey
from extender.domain.objects.model import PodInfo
from extender.domain.planning.planner import NodeRestriction
from extender.domain.planning.scoring import MAX_SCORE
from extender.domain.state.decisions import BindDecision, BindVerdict, PlaceholderCreate, Verdict
from tests.builders import make_node, make_pod, make_podgroup, placeholder_pod_info
from tests.unit.test_gang_core import T0, core_with, pod_info


def gang_pods(group: str, size: int, gpus: int) -> list[dict]:  # type: ignore[type-arg]
    return [
        make_pod(f"{group}-{i}").group(group).min_available(size).gpus(gpus).obj()
        for i in range(size)
    ]


def planned_apart() -> tuple[GangCore, Plan]:
    """Gang g of two 4-GPU members planned on n1 and n2 (4 GPUs each)."""
    nodes = [make_node("n1").gpus(4).obj(), make_node("n2").gpus(4).obj()]
    core = core_with(nodes, gang_pods("g", 2, 4))
    core.filter(pod_info(core, "g-0"), ["n1", "n2"], T0)
    return core, core.ledger.plans[GroupKey("default", "g")]


def test_a_plain_pod_that_fits_beside_a_plans_reservation_is_offered_the_node() -> None:
    core = core_with([make_node("n1").gpus(4).obj()], [*gang_pods("g", 2, 1)])
    assert core.filter(pod_info(core, "g-0"), ["n1"], T0).verdict is Verdict.PLANNED
    plain = core.asked_about(make_pod("plain").gpus(2).obj())
    assert core.filter(plain, ["n1"], T0).nodes == ["n1"]  # 4 - 2 reserved = 2 left
    bigger = core.asked_about(make_pod("bigger").gpus(3).obj())
    decision = core.filter(bigger, ["n1"], T0)
    assert decision.nodes == []
    assert decision.failed["n1"] == "capacity on n1 is reserved for gang default/g"


def test_a_refusal_names_every_gang_that_reserved_the_node() -> None:
    core = core_with(
        [make_node("n1").gpus(4).obj()], [*gang_pods("a", 2, 1), *gang_pods("b", 2, 1)]
    )
    for group in ("a", "b"):
        assert core.filter(pod_info(core, f"{group}-0"), ["n1"], T0).verdict is Verdict.PLANNED
    plain = core.asked_about(make_pod("plain").gpus(1).obj())
    decision = core.filter(plain, ["n1"], T0)
    assert decision.failed["n1"] == "capacity on n1 is reserved for gang default/a, default/b"


def test_a_planned_members_prioritize_names_its_planned_node_only() -> None:
    core, plan = planned_apart()
    member = pod_info(core, "g-1")
    assert core.priorities(member).scores == {plan.placements[member.uid]: MAX_SCORE}


def test_a_member_the_watch_has_not_delivered_notes_interest_only_in_a_group_it_has() -> None:
    core = core_with([make_node("n1").gpus(4).obj()], [make_pod("w0").group("g").obj()])
    known = core.asked_about(make_pod("w1").group("g").gpus(1).obj())
    core.filter(known, ["n1"], T0 + 5)
    assert GroupKey("default", "g") in core.groups
    stranger = core.asked_about(make_pod("x0").group("nobody").gpus(1).obj())
    assert core.filter(stranger, ["n1"], T0 + 6).verdict is Verdict.WAIT
    assert GroupKey("default", "nobody") not in core.groups


def test_a_released_member_whose_node_is_not_offered_keeps_its_reservation_and_says_so() -> None:
    core, plan = planned_apart()
    for name in ("g-0", "g-1"):
        member = pod_info(core, name)
        core.barrier.offered[member.uid] = frozenset({plan.placements[member.uid]})
        core.arrive(member.uid, plan.placements[member.uid], T0 + 1)
    assert plan.released
    member = pod_info(core, "g-1")
    node = plan.placements[member.uid]
    other = "n1" if node == "n2" else "n2"
    decision = core.filter(member, [other], T0 + 2)
    assert decision.message == (
        f"gang default/g: default/g-1 keeps its reservation on {node}, which "
        "kube-scheduler does not offer now; waiting for it"
    )


def placeholder_on(core: GangCore, group: str, node: str) -> None:
    create = PlaceholderCreate(GroupKey("default", group), f"{group}-hold-{node}-1", node, 1)
    core.observe_pod(placeholder_pod_info(create), T0)


def test_only_the_gangs_own_placeholders_on_its_planned_nodes_keep_a_member_waiting() -> None:
    core = core_with([make_node("n1").gpus(8).obj(), make_node("n2").gpus(8).obj()])
    key = GroupKey("default", "g")
    placeholder_on(core, "other", "n1")  # another gang's, on the planned node
    placeholder_on(core, "g", "n2")  # its own, on another node
    assert not core.starvation.placeholders_on(key, {"n1"})
    core.starvation.placeholder_creating["x"] = (
        T0,
        PlaceholderCreate(GroupKey("default", "other"), "x", "n1", 1),
    )
    core.starvation.placeholder_creating["y"] = (T0, PlaceholderCreate(key, "y", "n3", 1))
    assert not core.starvation.placeholders_on(key, {"n1"})
    core.starvation.placeholder_creating["z"] = (T0, PlaceholderCreate(key, "z", "n1", 1))
    assert core.starvation.placeholders_on(key, {"n1"})


def test_a_member_without_a_plan_reaching_bind_is_refused_saying_why() -> None:
    core = core_with([make_node("n1").gpus(4).obj()], gang_pods("g", 2, 4))
    w0 = pod_info(core, "g-0")
    never_asked = core.arrive(w0.uid, "n1", T0)
    assert never_asked == BindDecision(
        BindVerdict.ERROR,
        group=GroupKey("default", "g"),
        message="gang default/g has no plan for default/g-0 (no plan); retrying",
    )
    core.filter(w0, ["n1"], T0)  # held: 8 GPUs asked, 4 there
    held = core.arrive(w0.uid, "n1", T0 + 1)
    assert held.verdict is BindVerdict.ERROR and held.group == GroupKey("default", "g")
    assert held.message == (
        f"gang default/g has no plan for default/g-0 ({core.groups[held.group].message}); retrying"
    )


def test_a_plain_pod_whose_node_was_reserved_after_its_filter_is_refused_naming_the_gangs() -> None:
    core = core_with(
        [make_node("n1").gpus(4).obj()], [*gang_pods("a", 2, 1), *gang_pods("b", 1, 1)]
    )
    plain = make_pod("plain").gpus(2).obj()
    core.observe_pod(core.asked_about(plain), T0)
    for group in ("a", "b"):
        core.filter(pod_info(core, f"{group}-0"), ["n1"], T0)
    decision = core.arrive(pod_info(core, "plain").uid, "n1", T0)
    assert decision == BindDecision(
        BindVerdict.ERROR,
        message="capacity on n1 was reserved for gang default/a, default/b after "
        "default/plain passed filter; retrying",
    )
    room = make_pod("small").gpus(1).obj()
    core.observe_pod(core.asked_about(room), T0)
    assert core.arrive(pod_info(core, "small").uid, "n1", T0).verdict is BindVerdict.BIND_NOW


def test_a_plain_pod_whose_node_a_starving_gang_holds_is_refused_at_bind() -> None:
    from tests.unit.test_reservations import BIG, churned_core, finish

    core, smalls = churned_core()
    late = PodInfo.from_api(make_pod("late").gpus(1).obj())
    core.observe_pod(late, T0)
    core.expire(T0 + 6)
    assert BIG in core.starvation.reservations
    finish(core, smalls[0], T0 + 7)
    decision = core.arrive(late.uid, "n1", T0 + 7)
    assert decision == BindDecision(
        BindVerdict.ERROR,
        message="1 free nvidia.com/gpu on n1 are reserved for gang default/big, which has waited "
        "longer than its starvationSeconds; nothing else is placed there until it fits "
        "(reserved after default/late passed filter); retrying",
    )
    other = core.arrive(PodInfo.from_api(make_pod("x").gpus(1).obj()).uid, "n1", T0 + 7)
    assert other.verdict is BindVerdict.BIND_NOW  # not in the cache: nothing to check


def test_a_member_reaching_bind_on_another_node_drops_the_plan_and_is_told_so() -> None:
    core, plan = planned_apart()
    w0 = pod_info(core, "g-0")
    planned = plan.placements[w0.uid]
    other = "n1" if planned == "n2" else "n2"
    decision = core.arrive(w0.uid, other, T0 + 1)
    assert decision.verdict is BindVerdict.ERROR
    assert (decision.plan_id, decision.group) == (plan.plan_id, plan.group)
    assert decision.message == core.groups[plan.group].message
    assert f"default/g-0 reached bind on {other}, planned {planned}" in decision.message
    assert core.ledger.plans == {}


def test_a_deleted_pod_takes_what_kube_scheduler_said_of_it_along() -> None:
    # A held member filtered with fewer than all nodes leaves a restriction (which
    # nodes kube-scheduler offered it); once the pod is gone, so is that, and the
    # restrictions' version moves by one so memos keyed on it are void.
    nodes = [make_node("n1").gpus(1).obj(), make_node("n2").gpus(1).obj()]
    core = core_with(nodes, gang_pods("g", 3, 1))
    held = pod_info(core, "g-0")
    assert core.filter(held, ["n1"], T0).nodes == []
    core.barrier.offered[held.uid] = frozenset({"n1"})
    assert held.uid in core.restrictions
    version = core.restrictions_version
    core.forget_pod(held.uid, T0 + 1)
    assert held.uid not in core.restrictions
    assert held.uid not in core.barrier.offered
    assert core.restrictions_version == version + 1
    core.forget_pod(pod_info(core, "g-1").uid, T0 + 1)  # never restricted: nothing moves
    assert core.restrictions_version == version + 1


def test_a_pod_the_core_never_saw_deleted_changes_nothing() -> None:
    core, plan = planned_apart()
    core.drain_effects()
    core.forget_pod("no-such-uid", T0 + 1)
    assert core.ledger.plans[plan.group] is plan
    assert core.drain_effects() == []


def test_a_gang_without_a_podgroup_is_forgotten_with_its_last_member_one_with_is_kept() -> None:
    nodes = [make_node("n1").gpus(1).obj()]
    annotated = [make_pod(f"a-{i}").group("a").min_available(2).gpus(1).obj() for i in range(2)]
    with_pg = [make_pod(f"b-{i}").group("b").gpus(1).obj() for i in range(2)]
    core = core_with(nodes, [*annotated, *with_pg], [make_podgroup("b", 2)])
    for name in ("a-0", "b-0"):
        assert core.filter(pod_info(core, name), ["n1"], T0).nodes == []  # held: 2 GPUs, 1 node
    a, b = GroupKey("default", "a"), GroupKey("default", "b")
    assert a in core.groups and a in core.shared.shortfalls and b in core.groups
    core.forget_pod(pod_info(core, "a-0").uid, T0 + 1)
    assert a in core.groups  # a-1 is left
    core.forget_pod(pod_info(core, "a-1").uid, T0 + 1)
    assert a not in core.groups and a not in core.shared.shortfalls
    for name in ("b-0", "b-1"):
        core.forget_pod(pod_info(core, name).uid, T0 + 1)
    assert b in core.groups  # its PodGroup still says it exists


def test_a_freed_gpu_off_any_reservation_does_not_start_one_before_the_tick() -> None:
    # big (4 GPUs) has waited past starvationSeconds, but only the reconcile tick
    # (expire) starts its reservation; a pod finishing on some node does not.
    from tests.unit.test_reservations import BIG, add_gang, bound_small, core_with, finish

    core = core_with([make_node("n1").gpus(4).obj(), make_node("n2").gpus(1).obj()])
    smalls = [bound_small(core, f"s{i}", "n1") for i in range(4)]
    elsewhere = bound_small(core, "e0", "n2")
    big = add_gang(core, "big", 4, 1)
    core.filter(big[0], ["n1", "n2"], T0)
    finish(core, elsewhere, T0 + 6)
    assert BIG not in core.starvation.reservations
    core.expire(T0 + 6)
    assert core.starvation.reservations[BIG].nodes == ("n1",)
    assert smalls  # still bound on n1


# ---- what kube-scheduler offered a held member: the smaller of allow- and deny-list ----


def offered_to(core: GangCore, member: PodInfo, nodes: list[str]) -> NodeRestriction | None:
    core.filter(member, nodes, T0)
    return core.restrictions.get(member.uid)


def test_what_kube_scheduler_offers_a_member_is_kept_as_the_smaller_list(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(gang_filter_module, "RESTRICTION_MEMORY_LIMIT", 2)
    names = [f"n{i}" for i in range(6)]
    core = core_with([make_node(n).gpus(1).obj() for n in names], gang_pods("g", 8, 1))
    member = pod_info(core, "g-0")
    version = core.restrictions_version

    assert offered_to(core, member, names[:2]) == NodeRestriction(allowed=frozenset(names[:2]))
    assert core.restrictions_version == version + 1
    assert offered_to(core, member, names[:2]) == NodeRestriction(allowed=frozenset(names[:2]))
    assert core.restrictions_version == version + 1  # the same word: nothing moves
    assert offered_to(core, member, names[:4]) == NodeRestriction(denied=frozenset(names[4:]))
    assert core.restrictions_version == version + 2
    assert offered_to(core, member, names[:3]) is None  # 3 offered, 3 not: neither kept
    assert core.restrictions_version == version + 3
    assert offered_to(core, member, names[:1]) == NodeRestriction(allowed=frozenset(names[:1]))
    assert offered_to(core, member, names) is None  # every node: no restriction
    assert core.restrictions_version == version + 5
    other = pod_info(core, "g-1")
    assert offered_to(core, other, names[:3]) is None  # never restricted: nothing moves
    assert core.restrictions_version == version + 5


def test_a_planned_member_is_told_its_node_and_one_left_out_why_it_waits() -> None:
    nodes = [make_node("n1").gpus(1).obj(), make_node("n2").gpus(1).obj()]
    pods = [make_pod(f"g-{i}").group("g").min_available(2).gpus(1).obj() for i in range(3)]
    core = core_with(nodes, pods)
    first = core.filter(pod_info(core, "g-0"), ["n1", "n2"], T0)
    plan = core.ledger.plans[GroupKey("default", "g")]
    assert first.message == f"planned on {plan.placements[pod_info(core, 'g-0').uid]}"
    left_out = next(n for n in ("g-1", "g-2") if pod_info(core, n).uid not in plan.placements)
    decision = core.filter(pod_info(core, left_out), ["n1", "n2"], T0)
    assert (decision.verdict, decision.message) == (
        Verdict.WAIT,
        "gang default/g: being placed without this member; it is scheduled after",
    )


def test_a_member_of_a_group_nothing_declares_is_told_what_to_create() -> None:
    core = core_with([make_node("n1").gpus(1).obj()], [make_pod("w0").group("ghost").obj()])
    decision = core.filter(pod_info(core, "w0"), ["n1"], T0)
    assert (decision.verdict, decision.message) == (
        Verdict.WAIT,
        "gang default/ghost: no PodGroup ghost and no gang-extender.io/min-available "
        "annotation; create the PodGroup or annotate the pods",
    )


def test_the_member_asking_left_out_of_its_own_plan_is_told_it_waits() -> None:
    # minMember 2 of 3, room for 2: the youngest asks first, the two oldest are planned.
    nodes = [make_node("n1").gpus(2).obj()]
    pods = [
        make_pod(f"g-{i}").group("g").min_available(2).gpus(1).created(f"2026-01-01T00:00:0{i}Z")
        for i in range(3)
    ]
    core = core_with(nodes, [p.obj() for p in pods])
    decision = core.filter(pod_info(core, "g-2"), ["n1"], T0)
    assert (decision.verdict, decision.failed) == (Verdict.WAIT, {})
    assert decision.unresolvable == {
        "n1": "gang default/g: being placed without this member; it is scheduled after"
    }


def test_the_asking_member_is_planned_only_on_nodes_kube_scheduler_offered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Offered 3 of 6 nodes with a memory limit of 2, kube-scheduler's word is not kept
    # for later; this filter still plans within it, though n5 is binpack's choice.
    monkeypatch.setattr(gang_filter_module, "RESTRICTION_MEMORY_LIMIT", 2)
    names = [f"n{i}" for i in range(5)]
    nodes = [make_node(n).gpus(2).obj() for n in names] + [make_node("n5").gpus(4).obj()]
    core = core_with(
        nodes,
        [
            make_pod("w0").group("g").min_available(1).gpus(1).obj(),
            make_pod("busy").gpus(3).node("n5").obj(),
        ],
    )
    decision = core.filter(pod_info(core, "w0"), names[:3], T0)
    assert decision.verdict is Verdict.PLANNED
    assert decision.nodes[0] in names[:3]


def test_a_member_of_another_scheduler_asked_about_is_neither_counted_nor_planned() -> None:
    # Two of a 2-member gang exist, but one names the default scheduler: the gang is
    # short of a member, whichever pod kube-scheduler asks about.
    nodes = [make_node("n1").gpus(2).obj()]
    pods = gang_pods("g", 2, 1)
    pods[1]["spec"]["schedulerName"] = "default-scheduler"
    core = core_with(nodes, pods)
    stray = core.asked_about(pods[1])
    decision = core.filter(stray, ["n1"], T0)
    assert decision.verdict is Verdict.WAIT
    assert core.ledger.plans == {}
    assert "1/2 members exist" in core.groups[GroupKey("default", "g")].message
