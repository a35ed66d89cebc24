"""The starvation reservations' upkeep (issue 13, item 2): which held gangs the
once-a-second look finds starving, when a reservation's gang is told (and its status
re-written), and how the placeholder pods and the fence taints are kept in line with
the reservations: what is asked for, asked again, forgotten once the watch shows it
done, and cleaned up when the feature is switched off."""

from __future__ import annotations

from dataclasses import replace

from extender.domain.cluster.fences import FENCE_TAINT_KEY, UnfenceNode
from extender.domain.gang.gang import PLACEHOLDER_RETRY_SECONDS, GangCore
from extender.domain.objects.membership import GroupKey
from extender.domain.objects.model import GroupSpec, NodeInfo, PodInfo
from extender.domain.state.decisions import (
    BindVerdict,
    PlaceholderCreate,
    PlaceholderDelete,
    Verdict,
)
from tests.builders import make_node, make_pod, make_podgroup, placeholder_pod_info
from tests.unit.test_fences import fences
from tests.unit.test_placeholders import creates, deletes, reserving_core
from tests.unit.test_reservations import (
    BIG,
    CREATED_AT_T0,
    T0,
    add_gang,
    bound_small,
    churned_core,
    core_with,
    finish,
)

ALPHA = GroupKey("default", "alpha")
OTHER = GroupKey("default", "other")
ONE, TWO = GroupKey("default", "one"), GroupKey("default", "two")
CREATED_LATER = "1970-01-12T13:47:40Z"  # T0 + 60: behind every gang created at T0


# ------------------------------------------------------------- finding starving gangs
def core_with_alpha() -> tuple[GangCore, list[PodInfo]]:
    """The big gang held on a full 4-GPU node; "alpha" (one 8-GPU member, created after
    big: behind it in the queue, before it in name order) planned on an 8-GPU node."""
    core = core_with([make_node("n1").gpus(4).obj(), make_node("n2").gpus(8).obj()])
    for i in range(4):
        bound_small(core, f"s{i}", "n1")
    core.apply_group_spec(GroupSpec.from_podgroup(make_podgroup("alpha", 1), source="PodGroup"))
    alpha = PodInfo.from_api(
        make_pod("alpha-0").group("alpha").gpus(8).created(CREATED_LATER).obj()
    )
    core.observe_pod(alpha, T0)
    assert core.filter(alpha, ["n2"], T0).verdict is Verdict.PLANNED
    big = add_gang(core, "big", 4, 1)
    assert core.filter(big[0], ["n1", "n2"], T0).verdict is Verdict.WAIT
    core.expire(T0 + 1)  # big seen held from here
    return core, big


def test_a_planned_gang_earlier_in_name_order_does_not_hide_a_starving_one() -> None:
    core, _ = core_with_alpha()
    core.expire(T0 + 7)
    assert ALPHA in core.ledger.plans
    assert set(core.starvation.reservations) == {BIG}


def test_a_gang_backing_off_earlier_in_name_order_does_not_hide_a_starving_one() -> None:
    core, _ = core_with_alpha()
    plan = core.ledger.plans[ALPHA]
    core.barrier_timed_out(plan.plan_id, ALPHA, T0 + 6)  # dropped: backing off, still held
    core.observe_pod(PodInfo.from_api(make_pod("hog").gpus(8).node("n2").obj()), T0 + 6)
    assert core.groups[ALPHA].retry_after > T0 + 7
    core.expire(T0 + 7)
    assert set(core.starvation.reservations) == {BIG}


def test_a_dropped_gang_reserves_again_the_moment_its_replan_backoff_ends() -> None:
    core, smalls = churned_core()
    core.expire(T0 + 6)
    for pod in smalls:
        finish(core, pod, T0 + 7)
    plan = core.ledger.plans[BIG]
    core.barrier_timed_out(plan.plan_id, BIG, T0 + 9)  # nobody reached bind
    for i in range(4):
        bound_small(core, f"again{i}", "n1")
    assert core.groups[BIG].retry_after == T0 + 11
    core.expire(T0 + 11)
    assert BIG in core.starvation.reservations


# ------------------------------------------------------ what the reserving gang is told
def test_a_gangs_status_is_written_again_only_when_its_reservation_message_changes() -> None:
    core, smalls = reserving_core()
    core.drain_touched()
    core.expire(T0 + 7)  # nothing changed: its status is not written again
    assert core.drain_touched() == set()
    finish(core, smalls[0], T0 + 8)  # 1/4 free now
    assert core.groups[BIG].message.startswith("gang default/big: reserving n1: 1/4 GPUs free")
    assert core.drain_touched() == {BIG}


def add_pinned_gang(core: GangCore, name: str, pool: str) -> list[PodInfo]:
    """A gang of two 1-GPU members whose nodeSelector asks for nodes of `pool`."""
    core.apply_group_spec(GroupSpec.from_podgroup(make_podgroup(name, 2), source="PodGroup"))
    pods = []
    for i in range(2):
        obj = make_pod(f"{name}-{i}").group(name).gpus(1).created(CREATED_AT_T0).obj()
        obj["spec"]["nodeSelector"] = {"pool": pool}
        pods.append(PodInfo.from_api(obj))
    for pod in pods:
        core.observe_pod(pod, T0)
    return pods


def test_a_reservation_started_as_another_gang_is_planned_from_its_own_is_told_so() -> None:
    core = core_with(
        [
            make_node("n1").gpus(2).label("pool", "a").obj(),
            make_node("n2").gpus(2).label("pool", "b").obj(),
        ]
    )
    on_n1 = [bound_small(core, f"a{i}", "n1") for i in range(2)]
    for i in range(2):
        bound_small(core, f"b{i}", "n2")
    add_pinned_gang(core, "one", "a")
    core.expire(T0)  # one seen held from here
    add_pinned_gang(core, "two", "b")
    core.expire(T0 + 3)  # two seen held from here
    core.expire(T0 + 6)
    assert set(core.starvation.reservations) == {ONE}
    finish(core, on_n1[0], T0 + 7)
    core.drain_touched()
    # The last GPU one needs frees just as two has waited past its 5 s: one is planned
    # and two reserves in the same pass.
    finish(core, on_n1[1], T0 + 8.5)
    assert ONE in core.ledger.plans and set(core.starvation.reservations) == {TWO}
    assert core.groups[TWO].message.startswith(
        "gang default/two: reserving n2: 0/2 GPUs free; it has waited longer than its "
        "starvationSeconds (5 s)"
    )
    assert core.drain_touched() == {ONE, TWO}


# ------------------------------------------------------------------------- fences
def fenced_node(value: str) -> NodeInfo:
    return NodeInfo.from_api(make_node("n1").gpus(4).taint(FENCE_TAINT_KEY, value).obj())


def unfenced_node() -> NodeInfo:
    return NodeInfo.from_api(make_node("n1").gpus(4).obj())


def test_a_fence_taken_down_is_asked_for_once_until_the_watch_shows_it_or_the_retry_is_due() -> (
    None
):
    core = core_with([])
    core.apply_node(fenced_node("default.gone"))
    core.expire(T0)
    assert fences(core.drain_effects()) == [UnfenceNode("n1", "default.gone")]
    core.expire(T0 + 1)
    assert fences(core.drain_effects()) == []
    core.expire(T0 + PLACEHOLDER_RETRY_SECONDS)
    assert fences(core.drain_effects()) == [UnfenceNode("n1", "default.gone")]


def check_a_fence_that_comes_back_is_taken_down_again_at_once(core: GangCore) -> None:
    core.apply_node(fenced_node("default.gone"))
    core.expire(T0)
    assert fences(core.drain_effects()) == [UnfenceNode("n1", "default.gone")]
    core.apply_node(unfenced_node())  # the watch shows it done
    core.expire(T0 + 1)
    assert fences(core.drain_effects()) == []
    core.apply_node(fenced_node("default.gone"))  # a previous leader's write lands
    core.expire(T0 + 2)
    assert fences(core.drain_effects()) == [UnfenceNode("n1", "default.gone")]


def test_a_leftover_fence_that_comes_back_after_its_removal_was_seen_goes_again_at_once() -> None:
    check_a_fence_that_comes_back_is_taken_down_again_at_once(core_with([]))


def test_switched_off_leftover_fences_are_still_taken_down() -> None:
    core = core_with([])
    core.fences = False
    check_a_fence_that_comes_back_is_taken_down_again_at_once(core)


def test_a_removal_still_awaited_on_one_node_does_not_hold_back_another_nodes() -> None:
    core = core_with([])
    core.apply_node(fenced_node("default.gone"))
    core.expire(T0)
    assert fences(core.drain_effects()) == [UnfenceNode("n1", "default.gone")]
    core.apply_node(
        NodeInfo.from_api(make_node("n2").gpus(4).taint(FENCE_TAINT_KEY, "default.old").obj())
    )
    core.expire(T0 + 1)
    assert fences(core.drain_effects()) == [UnfenceNode("n2", "default.old")]


def test_a_fence_taint_without_a_value_is_taken_down_naming_the_empty_value() -> None:
    core = core_with([])
    core.apply_node(fenced_node(""))
    assert core.snapshot.fences == {"n1": ""}
    core.expire(T0)
    assert fences(core.drain_effects()) == [UnfenceNode("n1", "")]


# ------------------------------------------------------------------- placeholders
def leftover(group: GroupKey, name: str, node: str = "n1") -> PodInfo:
    return placeholder_pod_info(PlaceholderCreate(group, name, node, 1))


def test_switched_off_leftover_placeholders_are_deleted_and_none_is_made() -> None:
    core, smalls = churned_core()
    core.placeholders = False
    core.apply_node(NodeInfo.from_api(make_node("n2").gpus(1).obj()))
    core.observe_pod(leftover(OTHER, "other-hold-n2-1", "n2"), T0)  # a previous leader's
    core.expire(T0 + 6)
    finish(core, smalls[0], T0 + 7)  # the reservation holds the freed GPU
    core.expire(T0 + 7)
    effects = core.drain_effects()
    assert deletes(effects) == [PlaceholderDelete(OTHER, "other-hold-n2-1")]
    assert creates(effects) == []
    assert core.starving_holds() == {
        "n1": (BIG, 1, "nvidia.com/gpu")
    }  # the reservation itself holds it


def test_a_leftover_placeholder_already_being_deleted_is_not_asked_to_go_again() -> None:
    core = core_with([make_node("n1").gpus(4).obj()])
    core.observe_pod(replace(leftover(BIG, "big-hold-n1-1"), deleting=True), T0)
    core.expire(T0)
    assert deletes(core.drain_effects()) == []


def test_a_pod_labelled_as_a_placeholder_that_requests_no_gpu_holds_none() -> None:
    core, smalls = reserving_core()
    core.observe_pod(replace(leftover(BIG, "big-hold-n1-1"), requests={}), T0 + 6)
    finish(core, smalls[0], T0 + 7)
    core.expire(T0 + 7)
    effects = core.drain_effects()
    assert creates(effects) == [PlaceholderCreate(BIG, "big-hold-n1-2", "n1", 1)]
    assert deletes(effects) == []


def test_a_placeholder_delete_not_seen_done_is_asked_again_when_its_retry_is_due() -> None:
    core = core_with([make_node("n1").gpus(4).obj()])
    core.observe_pod(leftover(BIG, "big-hold-n1-1"), T0)
    core.expire(T0)
    assert deletes(core.drain_effects()) == [PlaceholderDelete(BIG, "big-hold-n1-1")]
    core.expire(T0 + 1)
    assert deletes(core.drain_effects()) == []
    core.expire(T0 + PLACEHOLDER_RETRY_SECONDS)
    assert deletes(core.drain_effects()) == [PlaceholderDelete(BIG, "big-hold-n1-1")]


def test_a_delete_still_awaited_does_not_hold_back_the_next_placeholders() -> None:
    core = core_with([make_node("n1").gpus(4).obj()])
    core.observe_pod(leftover(BIG, "big-hold-n1-1"), T0)
    core.expire(T0)
    assert deletes(core.drain_effects()) == [PlaceholderDelete(BIG, "big-hold-n1-1")]
    core.observe_pod(leftover(OTHER, "other-hold-n1-1"), T0 + 1)
    core.expire(T0 + 1)
    assert deletes(core.drain_effects()) == [PlaceholderDelete(OTHER, "other-hold-n1-1")]


def test_a_create_never_seen_whose_node_was_taken_meanwhile_drops_the_plan_at_its_retry() -> None:
    core, smalls = reserving_core()
    for small in smalls:  # a placeholder asked for each freed GPU, none seen
        finish(core, small, T0 + 7)
    for member in core.snapshot.members(BIG):
        core.barrier.offered[member.uid] = frozenset({"n1"})
        assert core.arrive(member.uid, "n1", T0 + 7).verdict is BindVerdict.WAIT
    core.observe_pod(PodInfo.from_api(make_pod("intruder").gpus(1).node("n1").obj()), T0 + 8)
    core.expire(T0 + 7 + PLACEHOLDER_RETRY_SECONDS)
    assert BIG not in core.ledger.plans
    assert core.groups[BIG].message == (
        "gang default/big: plan dropped: node n1 has no room left for its reservations "
        "(nvidia.com/gpu short by 1): pods bound outside the plan took it before the gang "
        "was bound; re-planning"
    )
    assert core.groups[BIG].retry_after == (
        T0 + 7 + PLACEHOLDER_RETRY_SECONDS + core.timeouts.replan_backoff_seconds
    )
