"""Reservation fences (issue 13, item 2): while a starving gang's reservation holds a
node, the node carries a NoSchedule taint that gang members tolerate, so no other
scheduler places a pod there, not even one already pending when a GPU frees. The
pure desired set and diff, then the core: when a fence goes up, stays, comes down."""

from __future__ import annotations

import pytest

from extender.domain.cluster.fences import (
    FENCE_TAINT_KEY,
    MEMBER_TOLERATION,
    FenceNode,
    UnfenceNode,
    changes,
    desired,
    fence_value,
    observed_fence,
    tolerates_fence,
)
from extender.domain.gang.gang import PLACEHOLDER_RETRY_SECONDS, GangCore
from extender.domain.objects.membership import GroupKey
from extender.domain.objects.model import GroupSpec, NodeInfo, PodInfo, Taint, Toleration
from extender.domain.state.decisions import Effect, PlanCreated, Verdict
from tests.builders import make_node, make_pod, make_podgroup
from tests.unit.test_reservations import (
    BIG,
    CREATED_AT_T0,
    T0,
    bound_small,
    core_with,
    finish,
)

OTHER = GroupKey("default", "other")
FENCED = Taint(FENCE_TAINT_KEY, "default.big", "NoSchedule")


def toleration(**fields: str) -> Toleration:
    return Toleration(
        fields.get("key"),
        fields.get("operator", "Equal"),
        fields.get("value"),
        fields.get("effect"),
    )


# ------------------------------------------------------------------ the pure module
def test_a_value_of_exactly_63_characters_is_kept_and_a_cut_never_ends_in_punctuation() -> None:
    exact = GroupKey("team", "b" * (63 - len("team.")))
    assert fence_value(exact) == f"team.{'b' * 58}"
    # The cut falls on the "-" after 51 characters: it is dropped, not kept before "-<hash>".
    cut = fence_value(GroupKey("team", "c" * 46 + "-" + "d" * 30))
    head, digest = cut.rsplit("-", 1)
    assert head == "team." + "c" * 46 and len(digest) == 10
    assert all(ch in "0123456789abcdef" for ch in digest)


def test_the_value_names_the_gang_and_a_long_one_is_hashed_to_a_label_value() -> None:
    assert fence_value(BIG) == "default.big"
    long_a, long_b = GroupKey("team", "a" * 70), GroupKey("team", "a" * 69 + "b")
    assert len(fence_value(long_a)) == 63 and fence_value(long_a).startswith("team.aaa")
    assert fence_value(long_a) != fence_value(long_b)
    assert fence_value(long_a) == fence_value(GroupKey("team", "a" * 70))


@pytest.mark.parametrize(
    ("tolerations", "tolerated"),
    [
        ((toleration(**MEMBER_TOLERATION),), True),
        ((), False),
        ((toleration(key=FENCE_TAINT_KEY, value="default.big", effect="NoSchedule"),), True),
        ((toleration(key=FENCE_TAINT_KEY, value="default.other"),), False),
        ((toleration(key=FENCE_TAINT_KEY, operator="Exists", effect="NoExecute"),), False),
        ((toleration(operator="Exists"),), True),  # tolerates everything
        ((toleration(key="nvidia.com/gpu", operator="Exists"),), False),
        (
            (toleration(key="nvidia.com/gpu", operator="Exists"), toleration(**MEMBER_TOLERATION)),
            True,
        ),
    ],
)
def test_which_tolerations_let_a_member_onto_its_fenced_node(
    tolerations: tuple[Toleration, ...], tolerated: bool
) -> None:
    assert tolerates_fence(tolerations, BIG) is tolerated


def test_the_watch_shows_a_fence_by_its_key_and_effect() -> None:
    assert observed_fence([Taint("nvidia.com/gpu", "", "NoSchedule"), FENCED]) == "default.big"
    assert observed_fence([Taint(FENCE_TAINT_KEY, "x", "PreferNoSchedule")]) is None
    assert observed_fence([]) is None


def test_desired_fences_known_nodes_and_a_contested_node_goes_to_the_first_group() -> None:
    wanted = desired({OTHER: ["n2", "n3"], BIG: ["n1", "n2", "gone"]}, {"n1", "n2", "n3"})
    assert wanted == {"n1": BIG, "n2": BIG, "n3": OTHER}


@pytest.mark.parametrize(
    ("wanted", "observed", "expected"),
    [
        ({"n1": BIG}, {"n1": "default.big"}, []),
        ({"n1": BIG}, {}, [FenceNode(BIG, "n1", "default.big")]),
        ({"n1": BIG}, {"n1": "default.other"}, [FenceNode(BIG, "n1", "default.big")]),
        ({}, {"n1": "default.old"}, [UnfenceNode("n1", "default.old")]),
        (
            {"n2": BIG, "n0": OTHER},
            {"n1": "x"},
            [
                FenceNode(OTHER, "n0", "default.other"),
                UnfenceNode("n1", "x"),
                FenceNode(BIG, "n2", "default.big"),
            ],
        ),
    ],
)
def test_changes_are_the_writes_from_what_the_watch_shows_to_what_is_wanted(
    wanted: dict[str, GroupKey], observed: dict[str, str], expected: list[object]
) -> None:
    assert changes(wanted, observed) == expected


# ------------------------------------------------------------------------ the core
def fences(effects: list[Effect]) -> list[Effect]:
    return [e for e in effects if isinstance(e, FenceNode | UnfenceNode)]


def add_tolerating_gang(
    core: GangCore, name: str, size: int, *, tolerate: bool = True
) -> list[PodInfo]:
    core.apply_group_spec(GroupSpec.from_podgroup(make_podgroup(name, size), source="PodGroup"))
    pods = []
    for i in range(size):
        pod = make_pod(f"{name}-{i}").group(name).gpus(1).created(CREATED_AT_T0)
        if tolerate:
            pod = pod.tolerate(dict(MEMBER_TOLERATION))
        pods.append(PodInfo.from_api(pod.obj()))
    for p in pods:
        core.observe_pod(p, T0)
    return pods


def starving_core(*, tolerate: bool = True) -> tuple[GangCore, list[PodInfo], list[PodInfo]]:
    """A 4-GPU node full of 1-GPU pods, a 4-GPU gang that waited past its starvationSeconds."""
    core = core_with([make_node("n1").gpus(4).obj(), make_node("n2").gpus(2).obj()])
    smalls = [bound_small(core, f"s{i}", "n1") for i in range(4)]
    big = add_tolerating_gang(core, "big", 4, tolerate=tolerate)
    core.filter(big[0], ["n1"], T0)
    core.expire(T0 + 6)
    assert BIG in core.starvation.reservations
    return core, smalls, big


def show_fences(core: GangCore, now: float) -> None:
    """The watch delivers every node with the fences the core asked for."""
    asked = {e.node: e for e in fences(core.drain_effects())}
    for name, node in list(core.snapshot.nodes.items()):
        change = asked.get(name)
        if change is None:
            continue
        kept = tuple(t for t in node.taints if t.key != FENCE_TAINT_KEY)
        added = (
            (Taint(FENCE_TAINT_KEY, change.value, "NoSchedule"),)
            if isinstance(change, FenceNode)
            else ()
        )
        core.apply_node(
            NodeInfo(
                name, dict(node.allocatable), dict(node.labels), kept + added, node.unschedulable
            )
        )
    core.expire(now)


def test_a_reservation_of_tolerating_members_fences_its_nodes_and_says_so() -> None:
    core, _, _ = starving_core()
    assert fences(core.drain_effects()) == [FenceNode(BIG, "n1", "default.big")]
    message = core.groups[BIG].message
    assert "reserving n1" in message
    assert message.endswith(
        "; the nodes are tainted gang-extender.io/reserved:NoSchedule, so no other "
        "scheduler places a pod there meanwhile"
    )


def test_members_without_the_toleration_are_not_fenced_out_and_are_told_why() -> None:
    core, _, _ = starving_core(tolerate=False)
    assert fences(core.drain_effects()) == []
    assert "not fenced: a pending member lacks the gang-extender.io/reserved toleration" in (
        core.groups[BIG].message
    )


def test_one_pending_member_without_the_toleration_keeps_the_fence_down() -> None:
    core = core_with([make_node("n1").gpus(4).obj()])
    for i in range(4):
        bound_small(core, f"s{i}", "n1")
    big = add_tolerating_gang(core, "big", 4)
    untolerating = PodInfo.from_api(
        make_pod("big-3").group("big").gpus(1).created(CREATED_AT_T0).obj()
    )
    core.observe_pod(untolerating, T0)  # replaces big-3: same name and uid, no toleration
    core.filter(big[0], ["n1"], T0)
    core.expire(T0 + 6)
    assert BIG in core.starvation.reservations
    assert fences(core.drain_effects()) == []
    assert "not fenced" in core.groups[BIG].message


def test_bound_members_need_not_tolerate_the_fence_only_pending_ones() -> None:
    core = core_with([make_node("n1").gpus(4).obj(), make_node("n0").gpus(1).obj()])
    for i in range(4):
        bound_small(core, f"s{i}", "n1")
    bound_small(core, "s-n0", "n0")
    add_tolerating_gang(core, "big", 4)
    # One member, without the toleration, is bound already (a gang re-planned for a
    # lost member): only the three pending ones are placed on the fenced node.
    bound_member = PodInfo.from_api(
        make_pod("big-3").group("big").gpus(1).node("n0").created(CREATED_AT_T0).obj()
    )
    core.observe_pod(bound_member, T0)
    assert core.starvation.fence_tolerated(BIG)
    assert not core.starvation.fence_tolerated(GroupKey("default", "nobody"))  # no pending member


def test_switched_off_no_fence_and_the_message_does_not_mention_one() -> None:
    core = core_with([make_node("n1").gpus(4).obj()])
    core.fences = False
    for i in range(4):
        bound_small(core, f"s{i}", "n1")
    big = add_tolerating_gang(core, "big", 4)
    core.filter(big[0], ["n1"], T0)
    core.expire(T0 + 6)
    assert BIG in core.starvation.reservations
    assert fences(core.drain_effects()) == []
    assert "taint" not in core.groups[BIG].message and "fenced" not in core.groups[BIG].message


def test_a_fence_is_asked_for_once_until_the_watch_shows_it_or_the_retry_is_due() -> None:
    core, _, _ = starving_core()
    core.drain_effects()
    core.expire(T0 + 7)
    assert fences(core.drain_effects()) == []
    core.expire(T0 + 6 + PLACEHOLDER_RETRY_SECONDS)
    assert fences(core.drain_effects()) == [FenceNode(BIG, "n1", "default.big")]


def test_a_fence_the_watch_shows_is_not_asked_for_again() -> None:
    core, _, _ = starving_core()
    show_fences(core, T0 + 7)
    assert core.snapshot.fences == {"n1": "default.big"}
    core.expire(T0 + 7 + 2 * PLACEHOLDER_RETRY_SECONDS)
    assert fences(core.drain_effects()) == []


def test_the_fence_stays_while_the_gang_planned_on_it_binds_and_goes_once_it_is_bound() -> None:
    core, smalls, big = starving_core()
    show_fences(core, T0 + 7)
    for i, small in enumerate(smalls):
        finish(core, small, T0 + 8 + i)
        core.expire(T0 + 8 + i)
    effects = core.drain_effects()
    assert [e.plan.group for e in effects if isinstance(e, PlanCreated)] == [BIG]
    assert fences(effects) == []  # planned: another scheduler must not take a GPU now
    for member in big:
        core.barrier.offered[member.uid] = frozenset({"n1"})
        core.arrive(member.uid, "n1", T0 + 12)
    for member in big[:-1]:
        core.binding_succeeded(member.uid, "n1", T0 + 12)
    core.expire(T0 + 12)
    assert fences(core.drain_effects()) == []  # 3 of 4 bound: still binding
    core.binding_succeeded(big[-1].uid, "n1", T0 + 13)
    core.expire(T0 + 13)
    assert fences(core.drain_effects()) == [UnfenceNode("n1", "default.big")]


def test_a_dropped_plan_takes_its_fence_down_with_it() -> None:
    core, smalls, _ = starving_core()
    show_fences(core, T0 + 7)
    for small in smalls:
        finish(core, small, T0 + 8)
    core.expire(T0 + 8)
    assert BIG in core.starvation.fenced_plans
    plan = core.ledger.plans[BIG]
    core.shared.drop(plan, "test: the plan is dropped", T0 + 9)
    core.expire(T0 + 9)
    assert BIG not in core.starvation.fenced_plans and BIG not in core.starvation.reservations
    assert fences(core.drain_effects()) == [UnfenceNode("n1", "default.big")]


def test_a_fence_nobody_wants_is_taken_down() -> None:
    core = core_with([make_node("n1").gpus(4).taint(FENCE_TAINT_KEY, "default.gone").obj()])
    assert core.snapshot.fences == {"n1": "default.gone"}
    core.expire(T0)
    assert fences(core.drain_effects()) == [UnfenceNode("n1", "default.gone")]
    core.forget_node("n1")
    assert core.snapshot.fences == {}


def test_a_reservation_that_gives_up_moves_its_fence_to_the_nodes_it_chooses_next() -> None:
    core, _, _ = starving_core()
    core.apply_node(NodeInfo.from_api(make_node("n3").gpus(4).obj()))
    for i in range(4):
        bound_small(core, f"t{i}", "n3")
    show_fences(core, T0 + 7)
    assert core.snapshot.fences == {"n1": "default.big"}
    core.expire(T0 + 6 + 31)  # past reservation_max_seconds (30 in core_with)
    assert core.starvation.reservations[BIG].nodes == ("n3",)
    assert fences(core.drain_effects()) == [
        UnfenceNode("n1", "default.big"),
        FenceNode(BIG, "n3", "default.big"),
    ]


def test_a_fenced_node_is_closed_to_pods_that_do_not_tolerate_it() -> None:
    core, _, _ = starving_core()
    show_fences(core, T0 + 7)
    pair = add_tolerating_gang(core, "pair", 1, tolerate=False)
    decision = core.filter(pair[0], ["n1", "n2"], T0 + 8)
    assert decision.nodes == ["n2"]


def test_a_tolerating_gang_planned_without_a_reservation_puts_up_no_fence() -> None:
    core = core_with([make_node("n1").gpus(4).obj()])
    big = add_tolerating_gang(core, "big", 4)
    assert core.filter(big[0], ["n1"], T0).verdict is Verdict.PLANNED
    assert fences(core.drain_effects()) == []
    assert BIG not in core.starvation.fenced_plans


def test_a_reservation_ended_by_its_plan_has_the_gangs_status_written_again() -> None:
    core, smalls, _ = starving_core()
    core.drain_touched()
    for small in smalls:
        finish(core, small, T0 + 8)
    core.expire(T0 + 8)
    assert BIG in core.ledger.plans and BIG not in core.starvation.reservations
    assert BIG in core.drain_touched()
