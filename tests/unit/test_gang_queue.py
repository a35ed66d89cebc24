"""Queue order of held gangs: priority, then age; backfill; who a gang waits behind."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from extender.domain.gang.gang import GangCore
from extender.domain.objects.membership import GroupKey
from extender.domain.objects.model import GroupSpec, NodeInfo, PodInfo
from extender.domain.planning.queue import QueueRank, gangs_ahead, queue_order, rank_of
from extender.domain.queue.gang_queue import QueueOrder
from extender.domain.state.decisions import BindDecision, BindVerdict, PlanCreated, Verdict
from tests.builders import make_node, make_pod, make_podgroup
from tests.core_builder import make_core

T0 = 1_000_000.0


def gang(
    name: str, size: int, gpus: int, *, priority: int | None = None, created: str = "10:00:00"
) -> list[dict[str, Any]]:
    pods = []
    for i in range(size):
        builder = make_pod(f"{name}-{i}").group(name).gpus(gpus)
        builder = builder.created(f"2026-11-22T{created}Z")
        if priority is not None:
            builder = builder.priority(priority)
        pods.append(builder.obj())
    return pods


def core_with(nodes: list[dict[str, Any]], gangs: dict[str, list[dict[str, Any]]]) -> GangCore:
    core = make_core()
    for n in nodes:
        core.apply_node(NodeInfo.from_api(n))
    for name, pods in gangs.items():
        core.apply_group_spec(
            GroupSpec.from_podgroup(make_podgroup(name, len(pods)), source="PodGroup")
        )
        for p in pods:
            core.observe_pod(PodInfo.from_api(p), T0)
    return core


def member(core: GangCore, name: str) -> PodInfo:
    return next(p for p in core.snapshot.pods.values() if p.name == name)


def planned_groups(core: GangCore) -> list[str]:
    return [e.plan.group.name for e in core.drain_effects() if isinstance(e, PlanCreated)]


def key(name: str) -> GroupKey:
    return GroupKey("default", name)


# ------------------------------------------------------------------ the pure queue
def test_priority_is_parsed_from_the_pod_and_defaults_to_zero() -> None:
    assert PodInfo.from_api(make_pod("a").priority(1000).obj()).priority == 1000
    assert PodInfo.from_api(make_pod("b").obj()).priority == 0
    malformed = make_pod("c").obj()
    malformed["spec"]["priority"] = "high"
    assert PodInfo.from_api(malformed).priority == 0
    flag = make_pod("d").obj()
    flag["spec"]["priority"] = True
    assert PodInfo.from_api(flag).priority == 0


def test_a_groups_rank_is_its_highest_member_priority_and_oldest_member() -> None:
    pods = [
        PodInfo.from_api(make_pod("a").priority(5).created("2026-11-22T10:00:05Z").obj()),
        PodInfo.from_api(make_pod("b").priority(9).created("2026-11-22T10:00:09Z").obj()),
    ]
    rank = rank_of(key("g"), pods)
    assert rank.priority == 9
    assert rank.created == pods[0].created
    assert rank_of(key("empty"), []) == QueueRank(key("empty"), 0, 0.0)


def test_higher_priority_goes_first_then_older_then_by_name() -> None:
    low_old = QueueRank(key("low-old"), 0, 1.0)
    high_new = QueueRank(key("high-new"), 10, 5.0)
    low_new_a = QueueRank(key("a"), 0, 2.0)
    low_new_b = QueueRank(key("b"), 0, 2.0)
    assert queue_order([low_new_b, low_old, low_new_a, high_new]) == [
        high_new,
        low_old,
        low_new_a,
        low_new_b,
    ]
    assert gangs_ahead(low_new_a, [low_new_b, low_old, low_new_a, high_new]) == [
        high_new,
        low_old,
    ]
    assert gangs_ahead(high_new, [low_old, high_new]) == []
    assert not low_new_a.is_ahead_of(low_new_a)


# --------------------------------------------------------------- the core in order
def test_a_higher_priority_gang_created_later_is_planned_first_whoever_asks() -> None:
    nodes = [make_node("n1").gpus(2).obj()]
    core = core_with(
        nodes,
        {
            "low": gang("low", 2, 1, created="10:00:00"),
            "high": gang("high", 2, 1, priority=1000, created="10:05:00"),
        },
    )
    # Both were created while every GPU was taken (kube-scheduler never asked about
    # either); then the room appears and the low gang's member is asked about first.
    decision = core.filter(member(core, "low-0"), ["n1"], T0 + 1)
    assert decision.verdict is Verdict.WAIT
    assert planned_groups(core) == ["high"]
    assert "waiting behind default/high (priority 1000)" in decision.message
    assert core.groups[key("low")].message == decision.message


def test_an_older_gang_of_equal_priority_goes_first() -> None:
    nodes = [make_node("n1").gpus(2).obj()]
    core = core_with(
        nodes,
        {
            "new": gang("new", 2, 1, created="10:05:00"),
            "old": gang("old", 2, 1, created="10:00:00"),
        },
    )
    decision = core.filter(member(core, "new-0"), ["n1"], T0 + 1)
    assert planned_groups(core) == ["old"]
    assert "waiting behind default/old (priority 0)" in decision.message


def test_a_lower_gang_backfills_room_the_gang_ahead_cannot_use() -> None:
    # The big gang ahead needs 4 GPUs, only 2 are free: the small one takes them.
    nodes = [make_node("n1").gpus(2).obj()]
    core = core_with(
        nodes,
        {
            "big": gang("big", 4, 1, priority=1000),
            "small": gang("small", 2, 1),
        },
    )
    core.filter(member(core, "big-0"), ["n1"], T0)
    decision = core.filter(member(core, "small-0"), ["n1"], T0 + 1)
    assert decision.verdict is Verdict.PLANNED
    assert planned_groups(core) == ["small"]
    assert "waiting behind" not in core.groups[key("big")].message


def test_a_gang_ahead_short_of_members_does_not_block_anyone() -> None:
    nodes = [make_node("n1").gpus(2).obj()]
    ahead = gang("ahead", 2, 1, priority=1000)[:1]  # 1 of 2 members exists
    core = core_with(nodes, {"small": gang("small", 2, 1)})
    core.apply_group_spec(GroupSpec.from_podgroup(make_podgroup("ahead", 2), source="PodGroup"))
    core.observe_pod(PodInfo.from_api(ahead[0]), T0)
    core.filter(member(core, "ahead-0"), ["n1"], T0)
    decision = core.filter(member(core, "small-0"), ["n1"], T0 + 1)
    assert decision.verdict is Verdict.PLANNED
    assert planned_groups(core) == ["small"]


def test_a_gated_gang_is_not_queued() -> None:
    # Its members carry a scheduling gate (Kueue's): kube-scheduler does not queue them.
    nodes = [make_node("n1").gpus(2).obj()]
    high = gang("high", 2, 1, priority=1000)
    for pod in high:
        pod["spec"]["schedulingGates"] = [{"name": "kueue.x-k8s.io/admission"}]
    core = core_with(nodes, {"high": high, "low": gang("low", 2, 1)})
    decision = core.filter(member(core, "low-0"), ["n1"], T0)
    assert decision.verdict is Verdict.PLANNED
    assert planned_groups(core) == ["low"]


def test_a_gang_ahead_backing_off_does_not_block_anyone() -> None:
    nodes = [make_node("n1").gpus(2).obj()]
    core = core_with(nodes, {"high": gang("high", 2, 1, priority=1000), "low": gang("low", 2, 1)})
    core.filter(member(core, "high-0"), [], T0)
    core.restrictions.clear()  # kube-scheduler's filters would place it now
    core.groups[key("high")].retry_after = T0 + 100
    decision = core.filter(member(core, "low-0"), ["n1"], T0 + 1)
    assert decision.verdict is Verdict.PLANNED
    assert planned_groups(core) == ["low"]


def test_a_gang_ahead_already_planned_is_named_when_its_plan_holds_the_room() -> None:
    nodes = [make_node("n1").gpus(2).obj()]
    core = core_with(nodes, {"high": gang("high", 2, 1, priority=7), "low": gang("low", 2, 1)})
    assert core.filter(member(core, "high-0"), ["n1"], T0).verdict is Verdict.PLANNED
    decision = core.filter(member(core, "low-0"), ["n1"], T0 + 1)
    assert decision.verdict is Verdict.WAIT
    assert decision.message.endswith("; waiting behind default/high (priority 7)")


def test_a_gang_ahead_whose_released_plan_still_binds_is_named() -> None:
    # high's barrier released (both members at bind, neither bound yet): it is no
    # longer a held gang, but its reservations hold the room low lacks.
    nodes = [make_node("n1").gpus(2).obj()]
    core = core_with(nodes, {"high": gang("high", 2, 1, priority=7), "low": gang("low", 2, 1)})
    assert core.filter(member(core, "high-0"), ["n1"], T0).verdict is Verdict.PLANNED
    plan = core.ledger.plans[key("high")]
    decisions = [core.arrive(member(core, f"high-{i}").uid, "n1", T0 + 1) for i in range(2)]
    assert [d.verdict for d in decisions] == [BindVerdict.WAIT, BindVerdict.RELEASE]
    assert decisions[0] == BindDecision(BindVerdict.WAIT, plan.plan_id, plan.group)
    decision = core.filter(member(core, "low-0"), ["n1"], T0 + 2)
    assert decision.verdict is Verdict.WAIT
    assert decision.message.endswith("; waiting behind default/high (priority 7)")


def test_a_gang_that_would_not_fit_even_without_the_plans_ahead_names_none() -> None:
    nodes = [make_node("n1").gpus(2).obj()]
    core = core_with(nodes, {"high": gang("high", 2, 1, priority=7), "huge": gang("huge", 3, 1)})
    core.filter(member(core, "high-0"), ["n1"], T0)
    decision = core.filter(member(core, "huge-0"), ["n1"], T0 + 1)
    assert decision.verdict is Verdict.WAIT
    assert "waiting behind" not in decision.message


def test_a_gang_behind_is_not_planned_by_the_gang_aheads_attempt() -> None:
    # Queue order runs one way: asking for the high gang never plans the low one.
    nodes = [make_node("n1").gpus(4).obj()]
    core = core_with(nodes, {"low": gang("low", 2, 1)})
    core.filter(member(core, "low-0"), [], T0)
    core.restrictions.clear()
    core.apply_group_spec(GroupSpec.from_podgroup(make_podgroup("high", 2), source="PodGroup"))
    for pod in gang("high", 2, 1, priority=7):
        core.observe_pod(PodInfo.from_api(pod), T0)
    assert core.filter(member(core, "high-0"), ["n1"], T0 + 1).verdict is Verdict.PLANNED
    assert planned_groups(core) == ["high"]


def test_a_memoised_shortfall_is_not_retried_for_the_gang_behind() -> None:
    nodes = [make_node("n1").gpus(2).obj()]
    core = core_with(nodes, {"big": gang("big", 4, 1, priority=9), "low": gang("low", 3, 1)})
    core.filter(member(core, "big-0"), ["n1"], T0)
    first = core.groups[key("big")].message
    core.groups[key("big")].message = "memo kept"
    core.filter(member(core, "low-0"), ["n1"], T0 + 1)
    # Nothing changed since big's attempt: its memo answered, it was not re-planned.
    assert core.groups[key("big")].message == "memo kept"
    assert first.startswith("gang default/big: ")


def test_a_planned_or_bound_gang_ahead_is_left_alone() -> None:
    nodes = [make_node("n1").gpus(4).obj()]
    core = core_with(
        nodes,
        {
            "done": gang("done", 1, 1, priority=9),
            "binding": gang("binding", 1, 1, priority=8),
            "low": gang("low", 1, 3),
        },
    )
    core.filter(member(core, "done-0"), ["n1"], T0)
    core.binding_succeeded(member(core, "done-0").uid, "n1", T0)
    core.filter(member(core, "binding-0"), ["n1"], T0)
    done, binding = core.groups[key("done")].message, core.groups[key("binding")].message
    assert done == "gang default/done: all 1 planned members bound"
    assert binding == "gang default/binding: planned 1 members, binding"
    core.drain_effects()
    core.filter(member(core, "low-0"), ["n1"], T0 + 1)
    assert planned_groups(core) == []
    assert core.groups[key("done")].message == done
    assert core.groups[key("binding")].message == binding


def test_a_gang_ahead_without_a_size_or_with_a_bad_one_is_skipped_and_the_next_goes_first() -> None:
    nodes = [make_node("n1").gpus(1).obj()]
    core = core_with(nodes, {"mid": gang("mid", 1, 1, priority=5), "low": gang("low", 1, 1)})
    # No PodGroup, no annotation: no size (spec None).
    for pod in gang("nosize", 1, 1, priority=1000):
        core.observe_pod(PodInfo.from_api(pod), T0)
    # A PodGroup whose minMember is not a number: an invalid spec, never planned.
    bad = make_podgroup("bad", 1)
    bad["spec"]["minMember"] = "1"
    core.apply_group_spec(GroupSpec.from_podgroup(bad, source="PodGroup"))
    for pod in gang("bad", 1, 1, priority=900):
        core.observe_pod(PodInfo.from_api(pod), T0)
    assert core.snapshot.group_spec(key("bad")).error
    decision = core.filter(member(core, "low-0"), ["n1"], T0)
    assert planned_groups(core) == ["mid"]
    assert "waiting behind default/mid (priority 5)" in decision.message


def test_every_gang_ahead_is_tried_in_order_past_one_already_planned() -> None:
    nodes = [make_node("n1").gpus(2).obj()]
    core = core_with(
        nodes,
        {
            "first": gang("first", 1, 1, priority=9),
            "second": gang("second", 1, 1, priority=8),
            "third": gang("third", 1, 1),
        },
    )
    core.filter(member(core, "first-0"), ["n1"], T0)
    core.drain_effects()
    core.filter(member(core, "third-0"), ["n1"], T0 + 1)
    assert planned_groups(core) == ["second"]
    assert key("second") in core.groups  # queued when first asked


# ------------------------------------------- the gang ahead named while it is held
def test_a_gang_ahead_held_for_room_is_named_while_both_wait() -> None:
    # A pod holds both GPUs: neither gang fits. The high gang is held waiting for the
    # room too (no plan); the low gang's hold names it all the same, before any room
    # appears (it used to be named only while the gang ahead's plan held the room).
    nodes = [make_node("n1").gpus(2).obj()]
    core = core_with(nodes, {"high": gang("high", 2, 1, priority=1000), "low": gang("low", 2, 1)})
    core.observe_pod(PodInfo.from_api(make_pod("holder").gpus(2).node("n1").obj()), T0)
    assert core.filter(member(core, "high-0"), ["n1"], T0).verdict is Verdict.WAIT
    assert key("high") not in core.ledger.plans
    decision = core.filter(member(core, "low-0"), ["n1"], T0 + 1)
    assert decision.verdict is Verdict.WAIT
    assert decision.message.endswith("; waiting behind default/high (priority 1000)")


def test_the_status_of_a_gang_never_asked_about_names_the_held_gang_ahead() -> None:
    # kube-scheduler's own filters refuse every node (all GPUs taken): it never asks
    # the extender about either gang, and the status still says who goes first.
    from extender.domain.status.status import group_status

    nodes = [make_node("n1").gpus(2).obj()]
    core = core_with(nodes, {"low": gang("low", 2, 1), "high": gang("high", 2, 1, priority=9)})
    core.observe_pod(PodInfo.from_api(make_pod("holder").gpus(2).node("n1").obj()), T0)
    low = group_status(core, key("low"))
    high = group_status(core, key("high"))
    assert low is not None and high is not None
    assert low.message.endswith("; waiting behind default/high (priority 9)")
    assert "waiting behind" not in high.message


def test_a_held_gang_ahead_on_other_nodes_is_not_named() -> None:
    # The high gang wants only n2 (its selector): the low gang on n1 is not behind it.
    nodes = [
        make_node("n1").gpus(2).label("pool", "a").obj(),
        make_node("n2").gpus(2).label("pool", "b").obj(),
    ]
    high, low = gang("high", 2, 1, priority=1000), gang("low", 2, 1)
    for pods, pool in ((high, "b"), (low, "a")):
        for pod in pods:
            pod["spec"]["nodeSelector"] = {"pool": pool}
    core = core_with(nodes, {"high": high, "low": low})
    core.observe_pod(PodInfo.from_api(make_pod("h1").gpus(2).node("n1").obj()), T0)
    core.observe_pod(PodInfo.from_api(make_pod("h2").gpus(2).node("n2").obj()), T0)
    core.filter(member(core, "high-0"), ["n2"], T0)
    decision = core.filter(member(core, "low-0"), ["n1"], T0 + 1)
    assert decision.verdict is Verdict.WAIT
    assert "waiting behind" not in decision.message


def test_a_lower_gang_still_backfills_beside_a_held_gang_ahead() -> None:
    # The high gang needs 4 GPUs and 2 are free: the low one takes them (backfill),
    # held gang ahead or not.
    nodes = [make_node("n1").gpus(4).obj()]
    core = core_with(nodes, {"high": gang("high", 4, 1, priority=1000), "low": gang("low", 2, 1)})
    core.observe_pod(PodInfo.from_api(make_pod("holder").gpus(2).node("n1").obj()), T0)
    core.filter(member(core, "high-0"), ["n1"], T0)
    decision = core.filter(member(core, "low-0"), ["n1"], T0 + 1)
    assert decision.verdict is Verdict.PLANNED


def test_the_status_writers_question_is_answered_once_per_inputs(monkeypatch) -> None:
    """The status writer asks gang_ahead_of for every held gang on each pass; whether a
    gang would fit on the empty nodes it wants (a plan over every wanted node) is kept
    until its members, the nodes or kube-scheduler's last word change."""
    nodes = [make_node("n1").gpus(2).obj()]
    core = core_with(nodes, {"low": gang("low", 2, 1), "high": gang("high", 2, 1, priority=9)})
    core.observe_pod(PodInfo.from_api(make_pod("holder").gpus(2).node("n1").obj()), T0)
    computed: list[GroupKey] = []
    real = QueueOrder.fits_on_empty_nodes

    def counted(self, key, members, nodes, allowed):  # type: ignore[no-untyped-def]
        computed.append(key)
        return real(self, key, members, nodes, allowed)

    monkeypatch.setattr(QueueOrder, "fits_on_empty_nodes", counted)
    high = QueueRank(key("high"), 9, core.gang_ahead_of(key("low")).created)  # type: ignore[union-attr]
    for _ in range(3):
        assert core.gang_ahead_of(key("low")) == high
    assert computed == [key("low")]
    core.apply_node(NodeInfo.from_api(make_node("n2").gpus(1).obj()))
    assert core.gang_ahead_of(key("low")) == high
    assert computed == [key("low")] * 2  # a node changed
    core.observe_pod(PodInfo.from_api(gang("low", 3, 1)[2]), T0)  # a third member
    assert core.gang_ahead_of(key("low")) == high
    assert computed == [key("low")] * 3
    core.restrictions_version += 1  # kube-scheduler's last word on some member changed
    assert core.gang_ahead_of(key("low")) == high
    assert computed == [key("low")] * 4
    # Asked with other members or kube-scheduler's word (a filter's own): not kept.
    core.queue.gang_ahead_of(key("low"), core.snapshot.members(key("low")))
    core.queue.gang_ahead_of(key("low"), core.snapshot.members(key("low")))
    assert computed == [key("low")] * 6
    # Too big for the empty nodes it wants: no gang ahead, and that is kept too.
    core.observe_pod(PodInfo.from_api(make_pod("big").group("low").gpus(8).obj()), T0)
    assert core.gang_ahead_of(key("low")) is None
    assert core.gang_ahead_of(key("low")) is None
    assert computed == [key("low")] * 7


def held_core(pods: list[dict[str, Any]], **spec: Any) -> GangCore:
    core = make_core()
    core.apply_node(NodeInfo.from_api(make_node("n1").gpus(4).obj()))
    core.apply_group_spec(GroupSpec.from_podgroup(make_podgroup("g", 2, **spec), source="PodGroup"))
    for pod in pods:
        core.observe_pod(PodInfo.from_api(pod), T0)
    return core


def test_which_groups_are_held() -> None:
    two = [make_pod(f"g-{i}").group("g").gpus(1).obj() for i in range(2)]
    core = held_core(two)
    members = core.snapshot.members(key("g"))
    assert core.queue.is_held(key("g"), members)  # pending, with a quorum
    core.filter(member(core, "g-0"), ["n1"], T0)
    plan = core.ledger.plans[key("g")]
    assert core.queue.is_held(key("g"), members)  # planned, binding
    plan.released = True
    assert not core.queue.is_held(key("g"), members)  # released: no longer waits for room
    bound = held_core([make_pod(f"g-{i}").group("g").gpus(1).node("n1").obj() for i in range(2)])
    assert not bound.queue.is_held(key("g"), bound.snapshot.members(key("g")))  # nothing pending
    bad = held_core(two, minTaskMember={"worker": "x"})
    assert not bad.queue.is_held(key("g"), bad.snapshot.members(key("g")))  # a spec error
    # minTaskMember asks for a master none of the members is: short of members.
    tasks = held_core(two, minTaskMember={"master": 1})
    assert not tasks.queue.is_held(key("g"), tasks.snapshot.members(key("g")))
    assert not tasks.queue.fits_on_empty_nodes(
        key("g"), tasks.snapshot.members(key("g")), {"n1"}, {}
    )
    assert not core.queue.fits_on_empty_nodes(key("none"), [], {"n1"}, {})  # no PodGroup
    assert held_core(two).queue.fits_on_empty_nodes(key("g"), members, {"n1"}, {})


def test_a_gang_waits_behind_no_one_on_nodes_kube_scheduler_does_not_offer_it() -> None:
    # Both gangs are held (a pod holds each node's GPUs). The high gang wants n1 only
    # (its selector); kube-scheduler offered the low gang's member n2 only, so the low
    # gang waits behind nobody, in the status writer's answer and in a filter's.
    nodes = [
        make_node("n1").gpus(2).label("pool", "a").obj(),
        make_node("n2").gpus(2).label("pool", "b").obj(),
    ]
    high = gang("high", 2, 1, priority=9)
    for pod in high:
        pod["spec"]["nodeSelector"] = {"pool": "a"}
    core = core_with(nodes, {"high": high, "low": gang("low", 2, 1)})
    for holder, node in (("h1", "n1"), ("h2", "n2")):
        core.observe_pod(PodInfo.from_api(make_pod(holder).gpus(2).node(node).obj()), T0)
    assert core.gang_ahead_of(key("low")) is not None  # not asked yet: it could use n1
    for name in ("low-0", "low-1"):
        core.filter(member(core, name), ["n2"], T0)
    assert core.gang_ahead_of(key("low")) is None
    members = core.snapshot.members(key("low"))
    assert core.queue.gang_ahead_of(key("low"), members, core.restrictions) is None


def high_ahead_of_low() -> GangCore:
    """n1 has 1 of its 2 GPUs taken: neither 2-GPU gang fits; high is ahead of low."""
    core = core_with(
        [make_node("n1").gpus(2).obj()],
        {"high": gang("high", 2, 1, priority=1000), "low": gang("low", 2, 1)},
    )
    core.observe_pod(PodInfo.from_api(make_pod("busy").gpus(1).node("n1").obj()), T0)
    core.filter(member(core, "high-0"), ["n1"], T0)
    core.filter(member(core, "low-0"), ["n1"], T0 + 1)
    ahead = core.gang_ahead_of(key("low"))
    assert ahead is not None and ahead.key == key("high")
    return core


def test_a_gang_ahead_that_stops_being_held_is_no_longer_the_one_ahead() -> None:
    # A group held by its spec error waits for a fix, not for room.
    core = high_ahead_of_low()
    assert core.groups[key("low")].message.endswith("waiting behind default/high (priority 1000)")
    core.apply_group_spec(
        GroupSpec.from_podgroup(make_podgroup("high", 2, preemptible="no"), source="PodGroup")
    )
    assert core.gang_ahead_of(key("low")) is None


def test_a_deleted_gang_is_no_longer_the_one_ahead() -> None:
    core = high_ahead_of_low()
    core.forget_group_spec("PodGroup", key("high"))
    for name in ("high-0", "high-1"):
        core.forget_pod(member(core, name).uid, T0 + 2)
    assert key("high") not in core.groups
    assert core.gang_ahead_of(key("low")) is None


def test_a_gang_whose_plan_released_is_no_longer_the_one_ahead() -> None:
    core = high_ahead_of_low()
    core.forget_pod(member(core, "busy").uid, T0 + 2)
    assert core.filter(member(core, "high-0"), ["n1"], T0 + 2).verdict is Verdict.PLANNED
    plan = core.ledger.plans[key("high")]
    for name in ("high-0", "high-1"):
        core.arrive(member(core, name).uid, "n1", T0 + 3)
    assert plan.released
    assert core.gang_ahead_of(key("low")) is None


# ------------------------------------------- the empty-nodes answer, kept per demand shape
def one_gpu_gang(name: str, *, pool: str | None = None, gpus: int = 1) -> list[dict[str, Any]]:
    pods = gang(name, 2, gpus)
    for pod in pods:
        if pool is not None:
            pod["spec"]["nodeSelector"] = {"pool": pool}
    return pods


def test_held_gangs_of_one_template_share_one_plan_on_the_empty_nodes(monkeypatch) -> None:
    """After a node changes every held gang's empty-nodes answer is asked again (the
    status writer's pass): gangs of one template cost one plan, not one each."""
    import extender.domain.queue.gang_queue as gang_queue

    nodes = [make_node(f"n{i}").gpus(2).label("pool", "a").obj() for i in range(3)]
    gangs = {f"g{i}": one_gpu_gang(f"g{i}") for i in range(6)}
    gangs["other"] = one_gpu_gang("other", pool="a")
    core = core_with(nodes, gangs)
    for i in range(3):  # every GPU taken: every gang is held
        core.observe_pod(PodInfo.from_api(make_pod(f"busy{i}").gpus(2).node(f"n{i}").obj()), T0)
    planned: list[tuple[str, ...]] = []
    real = gang_queue.plan_gang

    def counted(members, *args, **kwargs):  # type: ignore[no-untyped-def]
        planned.append(tuple(m.name for m in members))
        return real(members, *args, **kwargs)

    monkeypatch.setattr(gang_queue, "plan_gang", counted)
    first = [core.gang_ahead_of(key(name)) for name in gangs]
    assert first[0] is None and all(a is not None for a in first[1:])  # g0 heads the queue
    assert len(planned) == 2  # one template, and "other" with its nodeSelector
    core.apply_node(NodeInfo.from_api(make_node("n0").gpus(2).label("pool", "b").obj()))
    planned.clear()
    assert [core.gang_ahead_of(key(name)) for name in gangs] == first
    assert len(planned) == 2
    assert [core.gang_ahead_of(key(name)) for name in gangs] == first
    assert len(planned) == 2  # nothing changed since: each gang's own answer is kept


def shape_of(pods: list[dict[str, Any]], allowed: dict[str, Any] | None = None) -> object:
    from extender.domain.queue.gang_queue import demand_shape

    infos = [PodInfo.from_api(p) for p in pods]
    restrictions = {infos[0].uid: allowed["restriction"]} if allowed else {}
    return demand_shape(infos, restrictions)


def test_a_demand_shape_names_what_the_planner_reads_and_nothing_else() -> None:
    from extender.domain.objects.policy import GroupTopology
    from extender.domain.planning.planner import NodeRestriction

    base = shape_of(one_gpu_gang("a"))
    assert shape_of(one_gpu_gang("b")) == base  # another gang of the same template
    assert shape_of(gang("c", 2, 1, priority=7, created="11:00:00")) == base
    with_pool = one_gpu_gang("d", pool="a")
    tolerating = make_pod("e-0").group("e").gpus(1).obj()
    tolerating["spec"]["tolerations"] = [{"key": "k", "operator": "Exists"}]
    cpu = make_pod("f-0").group("f").gpus(1).obj()
    cpu["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "2"
    planned = make_pod("g-0").group("g").gpus(1).obj()
    planned["metadata"]["annotations"] = {"gang-extender.io/planned-node": "n1"}
    topology = make_pod("h-0").group("h").gpus(1).obj()
    topology["metadata"]["annotations"] = {
        "kueue.x-k8s.io/podset-required-topology": "topology.kubernetes.io/zone"
    }
    restricted = {"restriction": NodeRestriction(allowed=frozenset({"n1"}))}
    differing = [
        shape_of(one_gpu_gang("c", gpus=2)),
        shape_of(with_pool),
        shape_of(gang("d", 3, 1)),
        shape_of([tolerating, one_gpu_gang("e")[1]]),
        shape_of([cpu, one_gpu_gang("f")[1]]),
        shape_of(one_gpu_gang("x"), restricted),
    ]
    assert all(shape != base for shape in differing)
    assert len(set(differing)) == len(differing)
    planned_info = PodInfo.from_api(planned)
    topology_info = PodInfo.from_api(topology)
    assert planned_info.planned_node == "n1", "the builder's annotation is the planner's"
    assert topology_info.topology == GroupTopology(required="topology.kubernetes.io/zone")
    assert shape_of([planned, one_gpu_gang("g")[1]]) != base
    elsewhere = make_pod("g-0").group("g").gpus(1).obj()
    elsewhere["metadata"]["annotations"] = {"gang-extender.io/planned-node": "n2"}
    assert shape_of([planned, one_gpu_gang("g")[1]]) != shape_of([elsewhere, one_gpu_gang("g")[1]])
    assert shape_of([topology, one_gpu_gang("h")[1]]) != base


def test_a_demand_shape_keeps_the_planners_member_order() -> None:
    def pair(name: str, pools: tuple[str, str]) -> list[dict[str, Any]]:
        pods = gang(name, 2, 1)
        for pod, pool in zip(pods, pools, strict=True):
            pod["spec"]["nodeSelector"] = {"pool": pool}
        return pods

    # By name the planner places a's pool-a member first, b's pool-b member first.
    assert shape_of(pair("a", ("a", "b"))) != shape_of(pair("b", ("b", "a")))
    assert shape_of(pair("a", ("a", "b"))) == shape_of(pair("c", ("a", "b")))


@st.composite
def held_cluster(draw: st.DrawFn) -> GangCore:
    """Random nodes (GPUs, pool, some tainted), some GPUs taken, and gangs of random
    templates, some members restricted by kube-scheduler's last word."""
    node_count = draw(st.integers(min_value=1, max_value=5))
    nodes = []
    for i in range(node_count):
        built = make_node(f"n{i}").gpus(draw(st.sampled_from([2, 4, 8])))
        built = built.label("pool", draw(st.sampled_from(["a", "b"])))
        if draw(st.integers(0, 3)) == 0:
            built = built.taint("dedicated", "x")
        nodes.append(built.obj())
    gangs: dict[str, list[dict[str, Any]]] = {}
    for g in range(draw(st.integers(min_value=1, max_value=6))):
        template = draw(
            st.lists(
                st.tuples(
                    st.sampled_from([1, 2, 4]),
                    st.sampled_from([None, None, "a"]),
                    st.booleans(),
                ),
                min_size=1,
                max_size=3,
            )
        )
        pods = []
        for i, (gpus, pool, tolerant) in enumerate(template):
            pod = make_pod(f"g{g}-{i}").group(f"g{g}").gpus(gpus)
            pod = pod.priority(draw(st.integers(0, 2)))
            obj = pod.obj()
            if pool is not None:
                obj["spec"]["nodeSelector"] = {"pool": pool}
            if tolerant:
                obj["spec"]["tolerations"] = [{"key": "dedicated", "operator": "Exists"}]
            pods.append(obj)
        gangs[f"g{g}"] = pods
    core = core_with(nodes, gangs)
    for i in range(node_count):
        taken = draw(st.sampled_from([0, 2, 4]))
        if taken:
            busy = make_pod(f"busy{i}").gpus(taken).node(f"n{i}").obj()
            core.observe_pod(PodInfo.from_api(busy), T0)
    from extender.domain.planning.planner import NodeRestriction

    for pod in list(core.snapshot.pods.values()):
        if pod.group is not None and draw(st.booleans()):
            allowed = frozenset(f"n{draw(st.integers(0, node_count - 1))}" for _ in range(2))
            core.restrictions[pod.uid] = NodeRestriction(allowed=allowed)
    core.restrictions_version += 1
    return core


@given(held_cluster(), st.integers(min_value=0, max_value=4))
@settings(max_examples=300, deadline=None)
def test_kept_empty_nodes_answers_are_the_answers_asked_afresh(
    core: GangCore, relabel: int
) -> None:
    """Whom each held gang waits behind, with the answers kept per group and per demand
    shape, is what asking with no memo at all says; also after a node changes."""
    keys = sorted(
        core.groups.keys()
        | core.queue.unasked
        | {p.group for p in core.snapshot.pods.values() if p.group}
    )
    for step in range(2):
        kept = {k: core.gang_ahead_of(k) for k in keys}
        kept_again = {k: core.gang_ahead_of(k) for k in keys}
        for k in keys:
            core.queue.fits_when_empty.clear()
            core.queue.fits_by_shape.clear()
            assert core.gang_ahead_of(k) == kept[k] == kept_again[k], k
        if step == 0 and f"n{relabel}" in core.snapshot.nodes:
            node = core.snapshot.nodes[f"n{relabel}"]
            changed = make_node(node.name).gpus(node.allocatable.get("nvidia.com/gpu", 0) + 2)
            core.apply_node(NodeInfo.from_api(changed.label("pool", "a").obj()))


TAINTED = {"key": "dedicated", "operator": "Exists"}


@pytest.mark.parametrize(
    ("nodes", "fitting", "not_fitting"),
    [
        pytest.param(
            [("n0", 4, "a", False), ("n1", 2, "b", False)],
            [{"pool": "a"}, {"pool": "a"}, {}],
            [{"pool": "b"}, {"pool": "b"}, {}],
            id="nodeSelector",
        ),
        pytest.param(
            [("n0", 4, "a", False), ("n1", 2, "a", False)],
            [{}, {}, {}],
            [{"allowed": "n1"}, {"allowed": "n1"}, {}],
            id="kube-scheduler's last word",
        ),
        pytest.param(
            [("n0", 2, "a", False), ("n1", 4, "a", True)],
            [{"tolerates": True}, {"tolerates": True}, {}],
            [{"tolerates": True}, {}, {}],
            id="tolerations",
        ),
    ],
)
def test_gangs_that_want_the_same_nodes_but_place_differently_get_their_own_answer(
    nodes: list[tuple[str, int, str, bool]],
    fitting: list[dict[str, Any]],
    not_fitting: list[dict[str, Any]],
) -> None:
    """Three 2-GPU members each, wanting both nodes: one gang fits the empty nodes (it
    waits behind the gang ahead), the other never does (it waits behind no one)."""
    from extender.domain.planning.planner import NodeRestriction

    built = []
    for name, gpus, pool, tainted in nodes:
        node = make_node(name).gpus(gpus).label("pool", pool)
        built.append((node.taint("dedicated", "x") if tainted else node).obj())
    ahead = gang("ahead", 1, 2, priority=9)
    ahead[0]["spec"]["tolerations"] = [TAINTED]

    def three(name: str, members: list[dict[str, Any]]) -> list[dict[str, Any]]:
        pods = gang(name, 3, 2)
        for pod, how in zip(pods, members, strict=True):
            if "pool" in how:
                pod["spec"]["nodeSelector"] = {"pool": how["pool"]}
            if how.get("tolerates"):
                pod["spec"]["tolerations"] = [TAINTED]
        return pods

    core = core_with(
        built,
        {"ahead": ahead, "fits": three("fits", fitting), "never": three("never", not_fitting)},
    )
    for name, gpus, _, _ in nodes:
        busy = make_pod(f"busy-{name}").gpus(gpus).node(name).obj()
        core.observe_pod(PodInfo.from_api(busy), T0)
    for name, members in (("fits", fitting), ("never", not_fitting)):
        for i, how in enumerate(members):
            if "allowed" in how:
                uid = member(core, f"{name}-{i}").uid
                core.restrictions[uid] = NodeRestriction(allowed=frozenset({how["allowed"]}))
    core.restrictions_version += 1
    queue = core.queue.held_queue_view()
    wanted = {k: queue.wanted.of_gang(core.snapshot.members(key(k))) for k in ("fits", "never")}
    assert wanted["fits"] == wanted["never"] == {"n0", "n1"}
    ahead_rank = core.gang_ahead_of(key("fits"))
    assert ahead_rank is not None and ahead_rank.key == key("ahead")
    assert core.gang_ahead_of(key("never")) is None


def test_a_gated_member_leaves_its_nodes_out_of_the_empty_nodes_its_gang_is_planned_on() -> None:
    """Same members but one gated: kube-scheduler does not queue it, so its gang wants
    only the other members' nodes, and on those alone the gang never fits."""
    built = [
        make_node("n0").gpus(4).label("pool", "a").obj(),
        make_node("n1").gpus(2).label("pool", "b").obj(),
    ]
    gangs = {"ahead": gang("ahead", 1, 2, priority=9)}
    for name in ("open", "gated"):
        pods = gang(name, 3, 2)
        for pod, pool in zip(pods, ("a", "a", "b"), strict=True):
            pod["spec"]["nodeSelector"] = {"pool": pool}
        gangs[name] = pods
    gangs["gated"][2]["spec"]["schedulingGates"] = [{"name": "example.com/wait"}]
    core = core_with(built, gangs)
    for name, gpus in (("n0", 4), ("n1", 2)):
        core.observe_pod(PodInfo.from_api(make_pod(f"busy-{name}").gpus(gpus).node(name).obj()), T0)
    ahead = core.gang_ahead_of(key("open"))
    assert ahead is not None and ahead.key == key("ahead")
    assert core.gang_ahead_of(key("gated")) is None


def test_a_held_gang_stops_naming_a_gang_ahead_once_that_gang_is_gone() -> None:
    """Its "does not fit" is kept (nothing since could give it room), but the gang it
    said it waits behind was deleted: its next answer names no one."""
    nodes = [make_node("n1").gpus(2).obj()]
    core = core_with(nodes, {"high": gang("high", 2, 1, priority=7), "low": gang("low", 2, 1)})
    core.observe_pod(PodInfo.from_api(make_pod("busy").gpus(2).node("n1").obj()), T0)
    assert core.filter(member(core, "high-0"), ["n1"], T0).verdict is Verdict.WAIT
    decision = core.filter(member(core, "low-0"), ["n1"], T0 + 1)
    assert decision.message.endswith("; waiting behind default/high (priority 7)")
    for i in range(2):
        core.forget_pod(member(core, f"high-{i}").uid, T0 + 2)
    decision = core.filter(member(core, "low-0"), ["n1"], T0 + 3)
    assert decision.verdict is Verdict.WAIT
    assert "waiting behind" not in decision.message, decision.message


def test_a_held_gang_stops_naming_a_gang_ahead_once_that_gang_is_bound() -> None:
    nodes = [make_node("n1").gpus(2).obj()]
    core = core_with(nodes, {"high": gang("high", 2, 1, priority=7), "low": gang("low", 2, 1)})
    assert core.filter(member(core, "high-0"), ["n1"], T0).verdict is Verdict.PLANNED
    decision = core.filter(member(core, "low-0"), ["n1"], T0 + 1)
    assert decision.message.endswith("; waiting behind default/high (priority 7)")
    for i in range(2):
        bound = gang("high", 2, 1, priority=7)[i]
        bound["spec"]["nodeName"] = "n1"
        bound["status"] = {"phase": "Running"}
        core.observe_pod(PodInfo.from_api(bound), T0 + 2)
    assert key("high") not in core.ledger.plans
    decision = core.filter(member(core, "low-0"), ["n1"], T0 + 3)
    assert decision.verdict is Verdict.WAIT
    assert "waiting behind" not in decision.message, decision.message


# ------------------------------------------- the work of one call is bounded
def test_one_call_tries_at_most_the_budget_of_gangs_ahead_and_the_rest_are_tried_later() -> None:
    from extender.domain.queue.gang_queue import GANGS_AHEAD_TRIED_PER_CALL as BUDGET

    # BUDGET + 4 one-GPU gangs ahead of "last", room for all: one filter of "last"
    # plans the first BUDGET of them (in queue order), then "last" itself (backfill).
    ahead = BUDGET + 4
    nodes = [make_node("n1").gpus(ahead + 1).obj()]
    gangs = {f"g{i:02d}": gang(f"g{i:02d}", 1, 1, priority=100 - i) for i in range(ahead)}
    core = core_with(nodes, {**gangs, "last": gang("last", 1, 1)})
    core.filter(member(core, "last-0"), ["n1"], T0)
    assert planned_groups(core) == [f"g{i:02d}" for i in range(BUDGET)] + ["last"]
    # the next call (any gang's) goes on with the ones not tried yet
    core.filter(member(core, f"g{ahead - 1:02d}-0"), ["n1"], T0 + 1)
    assert planned_groups(core) == [f"g{i:02d}" for i in range(BUDGET, ahead)]


def test_a_gang_behind_more_unplaceable_gangs_than_the_budget_is_still_planned() -> None:
    from extender.domain.queue.gang_queue import GANGS_AHEAD_TRIED_PER_CALL as BUDGET

    # Gangs ahead that can never fit (4 GPUs a member on a 2-GPU node) take the
    # budget on every call; the small gang behind them is planned all the same.
    nodes = [make_node("n1").gpus(2).obj()]
    gangs = {f"big{i:02d}": gang(f"big{i:02d}", 1, 4, priority=50) for i in range(BUDGET * 2)}
    core = core_with(nodes, {**gangs, "small": gang("small", 2, 1)})
    decision = core.filter(member(core, "small-0"), ["n1"], T0)
    assert decision.verdict is Verdict.PLANNED
    assert planned_groups(core) == ["small"]


def test_a_gang_that_does_not_fit_after_the_budget_still_names_the_gang_ahead() -> None:
    from extender.domain.queue.gang_queue import GANGS_AHEAD_TRIED_PER_CALL as BUDGET

    # BUDGET + 2 one-GPU gangs ahead take every GPU of n1; "last" (2 GPUs) then
    # waits behind the first of them, named, rather than failing.
    ahead = BUDGET + 2
    nodes = [make_node("n1").gpus(BUDGET).obj()]
    gangs = {f"g{i:02d}": gang(f"g{i:02d}", 1, 1, priority=100 - i) for i in range(ahead)}
    core = core_with(nodes, {**gangs, "last": gang("last", 1, 2)})
    decision = core.filter(member(core, "last-0"), ["n1"], T0)
    assert decision.verdict is Verdict.WAIT
    assert "waiting behind default/g00" in decision.message, decision.message
