"""Placeholder pods (issue 13, item 2): a starvation reservation made visible to every
scheduler. The pure desired set and diff, the core's accounting (a gang's placeholders
are its own room), and the bind barrier that waits for them to be gone."""

from __future__ import annotations

from typing import Any

from extender.domain.gang.gang import PLACEHOLDER_RETRY_SECONDS, GangCore
from extender.domain.objects.membership import GroupKey
from extender.domain.objects.model import PLACEHOLDER_LABEL, PodInfo
from extender.domain.starvation.placeholders import (
    ObservedPlaceholder,
    desired,
    diff,
    placeholder_name,
)
from extender.domain.state.decisions import (
    BarrierReleased,
    BindDecision,
    BindVerdict,
    Effect,
    PlaceholderCreate,
    PlaceholderDelete,
    PlanCreated,
    Verdict,
)
from extender.kube.reservation_writes import placeholder_pod
from tests.builders import make_node, make_pod, placeholder_pod_info
from tests.unit.test_reservations import (
    BIG,
    T0,
    add_gang,
    bound_small,
    churned_core,
    core_with,
    finish,
    plain,
)

OTHER = GroupKey("default", "other")


def seen(name: str, node: str, gpus: int, *, group: GroupKey = BIG, active: bool = True) -> Any:
    return ObservedPlaceholder(group, name, node, gpus, active=active, deleting=False)


# ------------------------------------------------------------------ the pure module
def test_desired_is_what_each_reservation_holds_per_node() -> None:
    assert desired({BIG: {"a": 3, "b": 0}, OTHER: {"c": 1}}) == {(BIG, "a"): 3, (OTHER, "c"): 1}


def test_a_held_node_without_a_placeholder_gets_one_for_its_held_gpus() -> None:
    assert diff({(BIG, "n1"): 2}, []) == [
        PlaceholderCreate(BIG, placeholder_name(BIG, "n1", 1), "n1", 2)
    ]


def test_more_held_gpus_are_a_top_up_pod_never_a_swap() -> None:
    first = placeholder_name(BIG, "n1", 1)
    assert diff({(BIG, "n1"): 3}, [seen(first, "n1", 1)]) == [
        PlaceholderCreate(BIG, placeholder_name(BIG, "n1", 2), "n1", 2)
    ]


def test_placeholders_that_match_are_left_alone() -> None:
    observed = [seen("a", "n1", 1), seen("b", "n1", 2)]
    assert diff({(BIG, "n1"): 3}, observed) == []


def test_placeholders_nobody_wants_are_deleted() -> None:
    observed = [seen("a", "n1", 1), seen("b", "n2", 2, group=OTHER)]
    assert diff({}, observed) == [PlaceholderDelete(BIG, "a"), PlaceholderDelete(OTHER, "b")]


def test_fewer_held_gpus_delete_the_smallest_then_top_up() -> None:
    observed = [seen("a", "n1", 1), seen("b", "n1", 3)]
    effects = diff({(BIG, "n1"): 3}, observed)
    assert effects == [PlaceholderDelete(BIG, "a")]
    effects = diff({(BIG, "n1"): 2}, observed)
    assert effects[:2] == [PlaceholderDelete(BIG, "a"), PlaceholderDelete(BIG, "b")]
    assert effects[2] == PlaceholderCreate(BIG, placeholder_name(BIG, "n1", 1), "n1", 2)


def test_a_finished_placeholder_is_deleted_and_replaced_under_another_name() -> None:
    failed = placeholder_name(BIG, "n1", 1)
    effects = diff({(BIG, "n1"): 2}, [seen(failed, "n1", 2, active=False)])
    assert effects == [
        PlaceholderDelete(BIG, failed),
        PlaceholderCreate(BIG, placeholder_name(BIG, "n1", 2), "n1", 2),
    ]


def test_a_placeholder_being_deleted_is_left_to_go() -> None:
    going = ObservedPlaceholder(BIG, "a", "n1", 2, active=True, deleting=True)
    assert diff({}, [going]) == []


def test_names_are_deterministic_and_fit_a_pod_name() -> None:
    assert placeholder_name(BIG, "n1", 1) == "big-hold-n1-1"
    long_group = GroupKey("default", "g" * 60)
    name = placeholder_name(long_group, "node-" + "x" * 80, 3)
    assert len(name) <= 63 and name.endswith("-3")
    assert name == placeholder_name(long_group, "node-" + "x" * 80, 3)
    assert name != placeholder_name(long_group, "node-" + "y" * 80, 3)


def test_the_manifest_holds_the_gpus_on_the_node_for_its_group() -> None:
    owner = {"apiVersion": "v1", "kind": "PodGroup", "name": "big", "uid": "u"}
    body = placeholder_pod(
        namespace="team",
        name="big-hold-n1-1",
        group="big",
        node="n1",
        gpus=3,
        owner=owner,
        seal="sealed",
    )
    spec = body["spec"]
    assert body["metadata"]["annotations"] == {"gang-extender.io/seal": "sealed"}
    assert body["metadata"]["labels"][PLACEHOLDER_LABEL] == "big"
    assert body["metadata"]["ownerReferences"] == [owner]
    assert spec["nodeName"] == "n1" and spec["terminationGracePeriodSeconds"] == 0
    assert spec["tolerations"] == [{"operator": "Exists"}]
    resources = spec["containers"][0]["resources"]
    assert resources["requests"] == resources["limits"] == {"nvidia.com/gpu": "3"}
    pod = PodInfo.from_api({**body, "metadata": {**body["metadata"], "uid": "p"}})
    assert pod.placeholder_for == GroupKey("team", "big")
    assert pod.group is None  # never a member: not counted, not injected, not restarted
    assert pod.holds_capacity and pod.requests["nvidia.com/gpu"] == 3


# ------------------------------------------------------------------------ the core
def creates(effects: list[Effect]) -> list[PlaceholderCreate]:
    return [e for e in effects if isinstance(e, PlaceholderCreate)]


def deletes(effects: list[Effect]) -> list[PlaceholderDelete]:
    return [e for e in effects if isinstance(e, PlaceholderDelete)]


def reserving_core() -> tuple[GangCore, list[PodInfo]]:
    """The churned 4-GPU node with the big gang's reservation started."""
    core, smalls = churned_core()
    core.expire(T0 + 6)
    assert BIG in core.starvation.reservations
    core.drain_effects()
    return core, smalls


def test_a_freed_gpu_of_a_reservation_gets_a_placeholder() -> None:
    core, smalls = reserving_core()
    finish(core, smalls[0], T0 + 7)
    core.expire(T0 + 7)
    made = creates(core.drain_effects())
    assert made == [PlaceholderCreate(BIG, "big-hold-n1-1", "n1", 1)]


def test_a_placeholder_is_asked_for_once_until_the_watch_shows_it_or_the_retry_is_due() -> None:
    core, smalls = reserving_core()
    finish(core, smalls[0], T0 + 7)
    core.expire(T0 + 7)
    core.drain_effects()
    core.expire(T0 + 8)
    assert creates(core.drain_effects()) == []
    core.expire(T0 + 7 + PLACEHOLDER_RETRY_SECONDS)
    assert len(creates(core.drain_effects())) == 1  # not seen: asked again (a 409 if it exists)


def test_a_placeholder_is_counted_used_by_others_and_free_for_its_gang() -> None:
    core, smalls = reserving_core()
    finish(core, smalls[0], T0 + 7)
    core.expire(T0 + 7)
    core.observe_pod(placeholder_pod_info(creates(core.drain_effects())[0]), T0 + 7)
    assert core.free_for_planning(OTHER)["n1"]["nvidia.com/gpu"] == 0
    assert core.free_for_planning(BIG)["n1"]["nvidia.com/gpu"] == 1
    # The reservation still holds that GPU, and nothing more is asked for it.
    assert core.starvation.reservations[BIG] and core.starvation.held(BIG) == {"n1": 1}
    # Already taken from everyone by the pod itself; a plain pod whose kube-scheduler
    # has not seen the placeholder yet is still refused by the extender.
    assert core.starving_holds() == {"n1": (BIG, 0, "nvidia.com/gpu")}
    decision = core.filter(plain("late"), ["n1"], T0 + 7)
    assert decision.nodes == [] and decision.failed["n1"].startswith(
        "1 free nvidia.com/gpu on n1 are reserved"
    )
    core.expire(T0 + 8)
    assert creates(core.drain_effects()) == [] and deletes(core.drain_effects()) == []


def test_placeholders_grow_with_the_freed_gpus_and_the_gang_plans_on_them() -> None:
    core, smalls = reserving_core()
    for i, small in enumerate(smalls):
        finish(core, small, T0 + 7 + i)
        core.filter(plain(f"r{i}"), ["n1"], T0 + 7 + i)  # refused: the GPU is held
        core.expire(T0 + 7 + i)
        effects = core.drain_effects()
        if i < 3:
            (made,) = creates(effects)
            assert made.gpus == 1 and made.node == "n1"
            core.observe_pod(placeholder_pod_info(made), T0 + 7 + i)
        else:
            # The last GPU frees: its room and its placeholders' meet the need: planned,
            # and the placeholders are deleted for the members to take the node.
            assert [e.plan.group for e in effects if isinstance(e, PlanCreated)] == [BIG]
            assert sorted(d.name for d in deletes(effects)) == [
                "big-hold-n1-1",
                "big-hold-n1-2",
                "big-hold-n1-3",
            ]
    assert sum(p.requests["nvidia.com/gpu"] for p in core.snapshot.placeholders.values()) == 3


def planned_with_placeholders() -> tuple[GangCore, list[PodInfo], list[PodInfo]]:
    """The big gang planned on n1 while its 3 placeholders are still there."""
    core = core_with([make_node("n1").gpus(4).obj()])
    small = bound_small(core, "s0", "n1")
    big = add_gang(core, "big", 4, 1)
    core.filter(big[0], ["n1"], T0)
    core.expire(T0 + 6)
    for i in range(3):
        core.observe_pod(
            placeholder_pod_info(PlaceholderCreate(BIG, f"big-hold-n1-{i + 1}", "n1", 1)), T0 + 6
        )
    core.drain_effects()
    finish(core, small, T0 + 7)
    core.expire(T0 + 7)
    assert BIG in core.ledger.plans
    return core, big, list(core.snapshot.placeholders.values())


def test_a_planned_member_waits_while_kube_scheduler_does_not_offer_the_node_of_its_placeholders() -> (
    None
):
    core, big, _ = planned_with_placeholders()
    decision = core.filter(big[0], [], T0 + 7)
    assert decision.verdict is Verdict.WAIT
    assert "placeholder pods on its planned node n1" in decision.message
    assert BIG in core.ledger.plans  # not dropped


def test_the_barrier_releases_only_after_the_placeholders_are_seen_gone() -> None:
    core, big, placeholders = planned_with_placeholders()
    for member in big:
        core.barrier.offered[member.uid] = frozenset({"n1"})
    decisions = [core.arrive(m.uid, "n1", T0 + 8) for m in big]
    plan = core.ledger.plans[BIG]
    # complete, but the placeholders are there: the last waits on the same barrier
    assert decisions == [BindDecision(BindVerdict.WAIT, plan.plan_id, BIG)] * 4
    for p in placeholders[:-1]:
        core.forget_pod(p.uid, T0 + 8)
        assert not plan.released
    core.drain_effects()
    core.forget_pod(placeholders[-1].uid, T0 + 8)
    assert plan.released
    assert core.drain_effects() == [BarrierReleased(plan)]
    assert core.barrier_state(plan.plan_id, BIG) is BindVerdict.RELEASE


def test_a_node_short_when_the_placeholders_go_drops_the_plan_instead_of_releasing() -> None:
    core, big, placeholders = planned_with_placeholders()
    for member in big:
        core.barrier.offered[member.uid] = frozenset({"n1"})
        core.arrive(member.uid, "n1", T0 + 8)
    plan = core.ledger.plans[BIG]
    for p in placeholders[:-1]:
        core.forget_pod(p.uid, T0 + 8)
    # Another scheduler bound a pod into the gang's room before the last one went.
    core.observe_pod(PodInfo.from_api(make_pod("intruder").gpus(1).node("n1").obj()), T0 + 8)
    core.forget_pod(placeholders[-1].uid, T0 + 9)
    assert not plan.released
    assert BIG not in core.ledger.plans
    assert core.groups[BIG].message == (
        "gang default/big: plan dropped: node n1 has no room left for its reservations "
        "(nvidia.com/gpu short by 1): pods bound outside the plan took it before the gang "
        "was bound; re-planning"
    )
    assert core.groups[BIG].retry_after == T0 + 9 + core.timeouts.replan_backoff_seconds


def test_a_barrier_still_missing_members_is_not_released_by_the_placeholders_going() -> None:
    core, big, placeholders = planned_with_placeholders()
    core.arrive(big[0].uid, "n1", T0 + 8)
    for p in placeholders:
        core.forget_pod(p.uid, T0 + 8)
    assert not core.ledger.plans[BIG].released
    assert not [e for e in core.drain_effects() if isinstance(e, BarrierReleased)]


def test_a_leftover_placeholder_without_a_reservation_is_deleted() -> None:
    core = core_with([make_node("n1").gpus(4).obj()])
    left = placeholder_pod_info(PlaceholderCreate(BIG, "big-hold-n1-1", "n1", 2))
    core.observe_pod(left, T0)
    core.expire(T0)
    assert deletes(core.drain_effects()) == [PlaceholderDelete(BIG, "big-hold-n1-1")]


def test_an_ended_reservation_deletes_its_placeholders() -> None:
    core, smalls = reserving_core()
    finish(core, smalls[0], T0 + 7)
    core.expire(T0 + 7)
    core.observe_pod(placeholder_pod_info(creates(core.drain_effects())[0]), T0 + 7)
    for member in core.snapshot.members(BIG):
        core.forget_pod(member.uid, T0 + 8)  # the gang was deleted
    core.expire(T0 + 8)
    assert BIG not in core.starvation.reservations
    assert deletes(core.drain_effects()) == [PlaceholderDelete(BIG, "big-hold-n1-1")]
    assert ("delete", "big-hold-n1-1") in core.starvation.placeholder_requests
    placeholder = next(iter(core.snapshot.placeholders.values()))
    core.forget_pod(placeholder.uid, T0 + 9)  # the watch saw it go: no delete is pending
    assert ("delete", "big-hold-n1-1") not in core.starvation.placeholder_requests


def test_a_placeholder_someone_else_deleted_is_just_gone() -> None:
    core, smalls = reserving_core()
    finish(core, smalls[0], T0 + 7)
    core.expire(T0 + 7)
    core.observe_pod(placeholder_pod_info(creates(core.drain_effects())[0]), T0 + 7)
    placeholder = next(iter(core.snapshot.placeholders.values()))
    core.forget_pod(placeholder.uid, T0 + 8)  # kubectl delete: no request of ours pending
    assert core.snapshot.placeholders == {}
    assert BIG in core.starvation.reservations


def test_switched_off_no_placeholder_is_made() -> None:
    core, smalls = churned_core()
    core.placeholders = False
    core.expire(T0 + 6)
    finish(core, smalls[0], T0 + 7)
    core.expire(T0 + 7)
    assert creates(core.drain_effects()) == []
    assert core.starving_holds() == {
        "n1": (BIG, 1, "nvidia.com/gpu")
    }  # the reservation itself still holds


def test_a_gpu_freed_on_a_reserved_node_gets_its_placeholder_at_once_not_at_the_tick() -> None:
    core, smalls = reserving_core()
    finish(core, smalls[0], T0 + 6.5)  # no expire, no filter: the watch event alone
    assert creates(core.drain_effects()) == [PlaceholderCreate(BIG, "big-hold-n1-1", "n1", 1)]
    done = PodInfo.from_api(
        {**make_pod("s1").gpus(1).node("n1").phase("Succeeded").obj(), "metadata": {}}
        | {"metadata": {"name": "s1", "namespace": "default", "uid": smalls[1].uid}}
    )
    core.observe_pod(done, T0 + 6.6)  # finished, not deleted yet: its GPU is free too
    assert creates(core.drain_effects()) == [PlaceholderCreate(BIG, "big-hold-n1-2", "n1", 1)]


def test_a_placeholder_asked_for_and_not_seen_yet_holds_the_barrier_until_it_is() -> None:
    core, smalls = reserving_core()
    for small in smalls:  # a placeholder asked for each freed GPU, none seen yet
        finish(core, small, T0 + 7)
    assert BIG in core.ledger.plans  # planned on the free node meanwhile
    for member in core.snapshot.members(BIG):
        core.barrier.offered[member.uid] = frozenset({"n1"})
        assert core.arrive(member.uid, "n1", T0 + 7).verdict is BindVerdict.WAIT
    asked = [create for _, create in core.starvation.placeholder_creating.values()]
    assert [c.name for c in asked] == ["big-hold-n1-1", "big-hold-n1-2", "big-hold-n1-3"]
    landed = [placeholder_pod_info(c) for c in asked]
    for pod in landed:
        core.observe_pod(pod, T0 + 7.1)  # the creates landed after all
    for pod in landed:
        assert not core.ledger.plans[BIG].released
        core.forget_pod(pod.uid, T0 + 7.2)  # and their queued deletes
    assert core.ledger.plans[BIG].released


def test_a_create_never_seen_stops_holding_the_barrier_when_its_retry_is_due() -> None:
    core, smalls = reserving_core()
    for small in smalls:
        finish(core, small, T0 + 7)
    for member in core.snapshot.members(BIG):
        core.barrier.offered[member.uid] = frozenset({"n1"})
        core.arrive(member.uid, "n1", T0 + 7)
    assert not core.ledger.plans[BIG].released
    core.expire(T0 + 7 + PLACEHOLDER_RETRY_SECONDS)
    assert core.ledger.plans[BIG].released


def test_a_node_over_committed_by_another_schedulers_pod_keeps_its_placeholders() -> None:
    core, smalls = reserving_core()
    finish(core, smalls[0], T0 + 7)
    core.observe_pod(placeholder_pod_info(creates(core.drain_effects())[0]), T0 + 7)
    bound_small(core, "raced", "n1")  # the default scheduler bound into the same GPU
    assert core.snapshot.free_gpus("n1") == -1
    core.expire(T0 + 8)
    core.expire(T0 + 8 + PLACEHOLDER_RETRY_SECONDS)
    assert deletes(core.drain_effects()) == []
