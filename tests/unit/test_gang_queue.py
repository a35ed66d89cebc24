"""Queue order of held gangs: priority, then age; backfill; who a gang waits behind."""

from __future__ import annotations

from typing import Any

from extender.domain.decisions import BindDecision, BindVerdict, PlanCreated, Verdict
from extender.domain.gang import GangCore, Timeouts
from extender.domain.membership import GroupKey
from extender.domain.model import GroupSpec, NodeInfo, PodInfo
from extender.domain.policy import Policy
from extender.domain.queue import QueueRank, gangs_ahead, queue_order, rank_of
from tests.builders import make_node, make_pod, make_podgroup

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
    core = GangCore(policy=Policy(), timeouts=Timeouts(60, 30, 2))
    for n in nodes:
        core.snapshot.upsert_node(NodeInfo.from_api(n))
    for name, pods in gangs.items():
        core.snapshot.upsert_podgroup(
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
    core.snapshot.upsert_podgroup(
        GroupSpec.from_podgroup(make_podgroup("ahead", 2), source="PodGroup")
    )
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
    core.snapshot.upsert_podgroup(
        GroupSpec.from_podgroup(make_podgroup("high", 2), source="PodGroup")
    )
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
    core.snapshot.upsert_podgroup(GroupSpec.from_podgroup(bad, source="PodGroup"))
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
    from extender.domain.status import group_status

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
    real = GangCore._fits_when_empty

    def counted(self, key, members, nodes, allowed):  # type: ignore[no-untyped-def]
        computed.append(key)
        return real(self, key, members, nodes, allowed)

    monkeypatch.setattr(GangCore, "_fits_when_empty", counted)
    high = QueueRank(key("high"), 9, core.gang_ahead_of(key("low")).created)  # type: ignore[union-attr]
    for _ in range(3):
        assert core.gang_ahead_of(key("low")) == high
    assert computed == [key("low")]
    core.snapshot.upsert_node(NodeInfo.from_api(make_node("n2").gpus(1).obj()))
    assert core.gang_ahead_of(key("low")) == high
    assert computed == [key("low")] * 2  # a node changed
    core.observe_pod(PodInfo.from_api(gang("low", 3, 1)[2]), T0)  # a third member
    assert core.gang_ahead_of(key("low")) == high
    assert computed == [key("low")] * 3
    core.restrictions_version += 1  # kube-scheduler's last word on some member changed
    assert core.gang_ahead_of(key("low")) == high
    assert computed == [key("low")] * 4
    # Asked with other members or kube-scheduler's word (a filter's own): not kept.
    core.gang_ahead_of(key("low"), core.snapshot.members(key("low")))
    core.gang_ahead_of(key("low"), core.snapshot.members(key("low")))
    assert computed == [key("low")] * 6
    # Too big for the empty nodes it wants: no gang ahead, and that is kept too.
    core.observe_pod(PodInfo.from_api(make_pod("big").group("low").gpus(8).obj()), T0)
    assert core.gang_ahead_of(key("low")) is None
    assert core.gang_ahead_of(key("low")) is None
    assert computed == [key("low")] * 7


def held_core(pods: list[dict[str, Any]], **spec: Any) -> GangCore:
    core = GangCore(policy=Policy(), timeouts=Timeouts(60, 30, 2))
    core.snapshot.upsert_node(NodeInfo.from_api(make_node("n1").gpus(4).obj()))
    core.snapshot.upsert_podgroup(
        GroupSpec.from_podgroup(make_podgroup("g", 2, **spec), source="PodGroup")
    )
    for pod in pods:
        core.observe_pod(PodInfo.from_api(pod), T0)
    return core


def test_which_groups_are_held() -> None:
    two = [make_pod(f"g-{i}").group("g").gpus(1).obj() for i in range(2)]
    core = held_core(two)
    members = core.snapshot.members(key("g"))
    assert core._is_held(key("g"), members)  # pending, with a quorum
    core.filter(member(core, "g-0"), ["n1"], T0)
    plan = core.ledger.plans[key("g")]
    assert core._is_held(key("g"), members)  # planned, binding
    plan.released = True
    assert not core._is_held(key("g"), members)  # released: no longer waits for room
    bound = held_core([make_pod(f"g-{i}").group("g").gpus(1).node("n1").obj() for i in range(2)])
    assert not bound._is_held(key("g"), bound.snapshot.members(key("g")))  # nothing pending
    bad = held_core(two, minTaskMember={"worker": "x"})
    assert not bad._is_held(key("g"), bad.snapshot.members(key("g")))  # a spec error
    # minTaskMember asks for a master none of the members is: short of members.
    tasks = held_core(two, minTaskMember={"master": 1})
    assert not tasks._is_held(key("g"), tasks.snapshot.members(key("g")))
    assert not tasks._fits_when_empty(key("g"), tasks.snapshot.members(key("g")), {"n1"}, {})
    assert not core._fits_when_empty(key("none"), [], {"n1"}, {})  # no PodGroup
    assert held_core(two)._fits_when_empty(key("g"), members, {"n1"}, {})


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
    assert core.gang_ahead_of(key("low"), members, core.restrictions) is None


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
    core.snapshot.upsert_podgroup(
        GroupSpec.from_podgroup(make_podgroup("high", 2, preemptible="no"), source="PodGroup")
    )
    assert core.gang_ahead_of(key("low")) is None


def test_a_deleted_gang_is_no_longer_the_one_ahead() -> None:
    core = high_ahead_of_low()
    core.snapshot.delete_podgroup("PodGroup", key("high"))
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
