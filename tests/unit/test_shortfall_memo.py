"""Held gangs are memoised per gang: a cluster change re-plans only the gangs it could help.

domain/planning/shortfalls.py: a gang that did not fit stays held, without being planned
again, until one of its own members or its PodGroup changes, or a node changes
where one of its pending members fits the room before or after the change (and,
for a gang with a topology, a node's free GPUs or labels change). The property:
whenever the memo says "still does not fit", planning afresh says the same.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import extender.domain.gang.gang_planning as gang_planning_module
import extender.domain.preemption.gang_preemption as gang_preemption_module
import extender.domain.queue.gang_queue as gang_queue_module
import extender.domain.starvation.gang_starvation as gang_starvation_module
from extender.domain.gang.gang import GangCore, Timeouts
from extender.domain.objects.membership import GroupKey
from extender.domain.objects.model import GroupSpec, NodeInfo, PodInfo
from extender.domain.objects.policy import KUEUE_PREFERRED_TOPOLOGY
from extender.domain.planning.shortfalls import MemberShape, NodeChange, ShortfallMemo
from tests.builders import make_node, make_pod, make_podgroup
from tests.core_builder import make_core

RACK = "example.com/rack"
# The modules of the core that call the planner (GangCore's parts: the queue asks it
# whom a held gang waits behind).
PLANNING_MODULES = (
    gang_planning_module,
    gang_queue_module,
    gang_starvation_module,
    gang_preemption_module,
)


@contextmanager
def counting_plans() -> Iterator[list[str]]:
    """The gangs the core asks the planner to place, one entry a call."""
    calls: list[str] = []
    real = gang_planning_module.plan_gang

    def counted(members: Any, *args: Any, **kwargs: Any) -> Any:
        calls.extend({str(m.group) for m in members})
        return real(members, *args, **kwargs)

    for module in PLANNING_MODULES:
        module.plan_gang = counted
    try:
        yield calls
    finally:
        for module in PLANNING_MODULES:
            module.plan_gang = real


def node(name: str, gpus: int, rack: str = "r0", **extra: Any) -> NodeInfo:
    built = make_node(name).gpus(gpus).label(RACK, rack)
    if extra.get("tainted"):
        built = built.taint("dedicated", "x")
    return NodeInfo.from_api(built.obj())


def pod(name: str, **spec: Any) -> PodInfo:
    built = make_pod(name)
    if "group" in spec:
        built = built.group(spec["group"]).min_available(spec.get("size", 2))
    if spec.get("gpus"):
        built = built.gpus(spec["gpus"])
    if spec.get("cpu"):
        built = built.cpu(spec["cpu"])
    if spec.get("node"):
        built = built.node(spec["node"])
    if spec.get("priority"):
        built = built.priority(spec["priority"])
    if spec.get("phase"):
        built = built.phase(spec["phase"])
    if spec.get("rack_topology"):
        built = built.annotation(KUEUE_PREFERRED_TOPOLOGY, RACK)
    return PodInfo.from_api(built.obj())


def held_cluster(gangs: int, *, preemption: bool = False) -> GangCore:
    """Four 8-GPU nodes full but one GPU, and `gangs` gangs of two 1-GPU members: each
    member alone fits the free GPU, no gang does. Every gang asked about once."""
    core = make_core()
    core.preemption_enabled = preemption
    for i in range(4):
        core.apply_node(node(f"n{i}", 8))
        used = 7 if i == 0 else 8
        core.observe_pod(pod(f"busy{i}", gpus=used, node=f"n{i}"), 0.0)
    for g in range(gangs):
        for m in range(2):
            core.observe_pod(pod(f"g{g}-{m}", group=f"g{g}", gpus=1), 0.0)
        asked = core.snapshot.pods[pod(f"g{g}-0", group=f"g{g}").uid]
        assert core.filter(asked, list(core.snapshot.nodes), 1.0).nodes == []
    return core


def ask(core: GangCore, gang: int, now: float) -> list[str]:
    asked = core.snapshot.pods[pod(f"g{gang}-1", group=f"g{gang}").uid]
    return core.filter(asked, list(core.snapshot.nodes), now).nodes


def test_a_node_change_no_held_member_can_use_re_plans_no_gang() -> None:
    core = held_cluster(30)
    assert len(core.shared.shortfalls) == 30
    with counting_plans() as calls:
        # A label change, then an allocatable-cpu change, on a node whose GPUs are all taken.
        relabelled = NodeInfo.from_api(
            make_node("n2").gpus(8).label(RACK, "r0").label("team", "b").obj()
        )
        core.apply_node(relabelled)
        assert ask(core, 17, 2.0) == []
        core.apply_node(
            NodeInfo.from_api(make_node("n3").gpus(8).label(RACK, "r0").cpu("64").obj())
        )
        assert ask(core, 3, 3.0) == []
    assert calls == []
    assert len(core.shared.shortfalls) == 30


def test_room_that_fits_a_member_wakes_the_gangs_it_fits_and_the_first_is_planned() -> None:
    core = held_cluster(5)
    core.observe_pod(pod("busy1", gpus=8, node="n1", phase="Succeeded"), 2.0)
    with counting_plans() as calls:
        placed = ask(core, 4, 3.0)
    # The oldest gang goes first (queue order); the one asking waits behind it.
    assert "default/g0" in calls
    assert GroupKey("default", "g0") in core.ledger.plans
    assert placed == [] or GroupKey("default", "g4") in core.ledger.plans


def test_a_gang_whose_own_member_changes_is_planned_again_and_only_it() -> None:
    core = held_cluster(3)
    with counting_plans() as calls:
        # A third member is a change of its group: the watch's event re-plans g1 (still
        # short: three 1-GPU members, one GPU free), and no other held gang.
        core.observe_pod(pod("g1-2", group="g1", gpus=1), 2.0)
    assert set(calls) == {"default/g1"}
    assert GroupKey("default", "g1") in core.shared.shortfalls
    assert "1/2 members placeable" in core.groups[GroupKey("default", "g1")].message


def two_racks(*, used: int) -> GangCore:
    """Node a in rack r0 and b in r1, 4 GPUs each, `used` of them taken on each."""
    core = make_core()
    for name, rack in (("a", "r0"), ("b", "r1")):
        core.apply_node(node(name, 4, rack))
        core.observe_pod(pod(f"busy-{name}", gpus=used, node=name), 0.0)
    return core


def test_a_topology_gang_is_woken_by_free_gpus_moving_between_racks() -> None:
    core = two_racks(used=3)
    for m in range(2):
        core.observe_pod(pod(f"t-{m}", group="t", gpus=2, rack_topology=True), 0.0)
    key = GroupKey("default", "t")
    assert core.filter(core.snapshot.pods[pod("t-0", group="t").uid], ["a", "b"], 1.0).nodes == []
    assert key in core.shared.shortfalls
    # b's one free GPU is taken: no 2-GPU member fits there before or after, but the
    # planner sums a rack's free GPUs over all its nodes, so the gang is tried again.
    core.observe_pod(pod("one-b", gpus=1, node="b"), 2.0)
    core.room.absorb_changes()
    assert key not in core.shared.shortfalls


def test_a_plain_gang_ignores_free_gpus_no_member_can_use() -> None:
    core = make_core()
    core.apply_node(node("a", 4))
    core.observe_pod(pod("busy-a", gpus=4, node="a"), 0.0)
    for m in range(2):
        core.observe_pod(pod(f"p-{m}", group="p", gpus=2), 0.0)
    key = GroupKey("default", "p")
    assert core.filter(core.snapshot.pods[pod("p-0", group="p").uid], ["a"], 1.0).nodes == []
    core.observe_pod(pod("busy-a", gpus=4, node="a", phase="Succeeded"), 2.0)
    core.observe_pod(pod("busy-a2", gpus=3, node="a"), 2.0)
    core.room.absorb_changes()
    assert key in core.shared.shortfalls  # one GPU free: no 2-GPU member fits, nor did before


def test_with_preemption_a_lower_priority_pod_gives_a_memoised_gang_something_to_evict() -> None:
    core = make_core()
    core.preemption_enabled = True
    core.apply_node(node("a", 4))
    core.observe_pod(pod("busy-a", gpus=4, node="a", priority=100), 0.0)
    for m in range(2):
        core.observe_pod(pod(f"h-{m}", group="h", gpus=2, priority=50), 0.0)
    key = GroupKey("default", "h")
    assert core.filter(core.snapshot.pods[pod("h-0", group="h").uid], ["a"], 1.0).nodes == []
    assert key in core.shared.shortfalls
    core.apply_node(node("b", 1))
    core.observe_pod(pod("low", cpu="100m", node="b"), 2.0)  # priority 0 < 50, cpu only
    core.room.absorb_changes()
    assert key not in core.shared.shortfalls


def test_a_gang_that_could_preempt_is_not_memoised_per_gang() -> None:
    core = make_core()
    core.preemption_enabled = True
    core.apply_node(node("a", 4))
    core.observe_pod(pod("low", gpus=1, node="a"), 0.0)
    core.observe_pod(pod("busy", gpus=3, node="a", priority=100), 0.0)
    for m in range(2):
        core.observe_pod(pod(f"h-{m}", group="h", gpus=2, priority=50), 0.0)
    assert core.filter(core.snapshot.pods[pod("h-0", group="h").uid], ["a"], 1.0).nodes == []
    assert GroupKey("default", "h") not in core.shared.shortfalls


def test_a_starving_gang_is_not_memoised_per_gang() -> None:
    core = held_cluster(1)
    key = GroupKey("default", "g0")
    core.timeouts.starvation_seconds = 0.0
    core.starvation.update_reservations(10.0)
    assert key in core.starvation.reservations
    assert key not in core.shared.shortfalls


@pytest.mark.parametrize(
    ("before", "after", "relabelled", "moves"),
    [
        ({"nvidia.com/gpu": 0}, {"nvidia.com/gpu": 0}, False, False),
        ({"nvidia.com/gpu": 0, "cpu": 1}, {"nvidia.com/gpu": 0, "cpu": 9}, False, False),
        ({"nvidia.com/gpu": 1}, {"nvidia.com/gpu": 0}, False, True),
        ({"nvidia.com/gpu": 0}, {"nvidia.com/gpu": 0}, True, True),
        (None, {"nvidia.com/gpu": 0}, False, True),
        ({"nvidia.com/gpu": 0}, None, False, True),
    ],
)
def test_which_node_changes_move_topology_domains(before, after, relabelled, moves) -> None:
    change = NodeChange("n", before, after, None, relabelled)
    assert change.moves_domains is moves


def room(gpus: int) -> dict[str, int]:
    """A node's free room with `gpus` GPUs free (and plenty of the rest)."""
    return {"cpu": 32000, "memory": 2**38, "pods": 100, "nvidia.com/gpu": gpus}


def test_the_memo_forgets_only_the_gangs_a_change_fits() -> None:
    memo = ShortfallMemo()
    small, big = GroupKey("ns", "small"), GroupKey("ns", "big")
    memo.remember(small, [pod("s", gpus=1)], topology=False, priority=0)
    memo.remember(big, [pod("b", gpus=4)], topology=False, priority=0)
    freed = NodeChange("n", room(0), room(2), node("n", 8))
    assert memo.absorb([freed]) == {small}
    assert big in memo and small not in memo
    taken = NodeChange("m", room(4), room(0), node("m", 8))
    assert memo.absorb([taken]) == {big}  # room it could use before: the planner is greedy
    assert len(memo) == 0


def test_a_node_a_member_may_not_use_does_not_wake_it() -> None:
    memo = ShortfallMemo()
    key = GroupKey("ns", "g")
    memo.remember(key, [pod("s", gpus=1)], topology=False, priority=0)
    tainted = NodeChange("t", room(0), room(8), node("t", 8, tainted=True))
    assert memo.absorb([tainted]) == set()
    untainted = NodeChange("t", room(8), room(8), node("t", 8))
    assert memo.absorb([untainted]) == {key}


def test_shapes_of_members_with_the_same_template_are_one() -> None:
    assert MemberShape.of(pod("a", gpus=1, cpu="1")) == MemberShape.of(pod("b", gpus=1, cpu="1"))
    assert MemberShape.of(pod("a", gpus=1)) != MemberShape.of(pod("b", gpus=2))


def test_lower_priority_capacity_forgets_only_higher_gangs() -> None:
    memo = ShortfallMemo()
    high, low = GroupKey("ns", "high"), GroupKey("ns", "low")
    memo.remember(high, [pod("h", gpus=9)], topology=False, priority=10)
    memo.remember(low, [pod("l", gpus=9)], topology=False, priority=0)
    assert memo.absorb([], lowest_priority=5) == {high}
    assert low in memo
    memo.remember(high, [pod("h", gpus=9)], topology=False, priority=5)
    assert memo.absorb([], lowest_priority=5) == set()  # nothing below it to evict


# ------------------------------------------------------------------ property
OPS = [
    "heartbeat",
    "resize",
    "relabel",
    "taint",
    "cordon",
    "add-node",
    "delete-node",
    "bind-plain",
    "finish-plain",
    "member",
    "cpu-member",
    "delete-member",
    "filter",
    "expire",
]
steps = st.lists(
    st.tuples(
        st.sampled_from(OPS),
        st.integers(min_value=0, max_value=3),
        st.integers(min_value=0, max_value=6),
    ),
    max_size=30,
)
# Gang 0 plain, gang 1 of higher priority, gang 2 prefers one rack.
GANG_SPECS: list[dict[str, Any]] = [{}, {"priority": 10}, {"rack_topology": True}]


def _node_object(name: str, gpus: int, rack: str, tainted: bool, cordoned: bool) -> NodeInfo:
    built = make_node(name).gpus(gpus).label(RACK, rack)
    if tainted:
        built = built.taint("dedicated", "x")
    obj = built.obj()
    if cordoned:
        obj["spec"]["unschedulable"] = True
    return NodeInfo.from_api(obj)


gang_sizes = st.lists(st.integers(min_value=1, max_value=3), min_size=2, max_size=3)


@given(st.tuples(gang_sizes, gang_sizes, gang_sizes), steps, st.booleans())
@settings(max_examples=400, deadline=None)
def test_a_gang_the_memo_holds_is_one_a_fresh_attempt_would_not_plan(
    gangs, ops, preemption
) -> None:
    core = make_core(timeouts=Timeouts(5, 30, 0))
    core.preemption_enabled = preemption
    nodes: dict[str, list[Any]] = {
        f"n{i}": [gpus, f"r{i % 2}", False, False] for i, gpus in enumerate([4, 4, 2, 8])
    }
    for name, (gpus, rack, tainted, cordoned) in nodes.items():
        core.apply_node(_node_object(name, gpus, rack, tainted, cordoned))
    plain: list[PodInfo] = []
    for i, gpus in enumerate([3, 2, 1, 6]):  # most of the cluster taken: gangs are held
        plain.append(pod(f"busy{i}", gpus=gpus, node=f"n{i}", priority=5 * (i % 2)))
        core.observe_pod(plain[-1], 0.0)
    members: dict[int, list[PodInfo]] = {g: [] for g in range(3)}
    for gang, sizes in enumerate(gangs):
        for index, gpus in enumerate(sizes):
            new = pod(
                f"g{gang}-m{index}",
                group=f"g{gang}",
                size=len(sizes),
                gpus=gpus,
                **GANG_SPECS[gang],
            )
            members[gang].append(new)
            core.observe_pod(new, 0.0)
        core.filter(core.snapshot.pods[members[gang][0].uid], list(core.snapshot.nodes), 0.5)
    now = 1.0
    checked = 0
    for step, (op, i, n) in enumerate(ops):
        now += 1.0
        name = f"n{i}"
        gang = i % 3
        if op in ("heartbeat", "resize", "relabel", "taint", "cordon") and name in nodes:
            state = nodes[name]
            if op == "resize":
                state[0] = n + 1
            elif op == "relabel":
                state[1] = "r1" if state[1] == "r0" else "r0"
            elif op == "taint":
                state[2] = not state[2]
            elif op == "cordon":
                state[3] = not state[3]
            core.apply_node(_node_object(name, *state))
        elif op == "add-node" and name not in nodes:
            nodes[name] = [n + 1, "r0", False, False]
            core.apply_node(_node_object(name, *nodes[name]))
        elif op == "delete-node" and name in nodes:
            del nodes[name]
            core.forget_node(name)
        elif op == "bind-plain" and name in nodes:
            bound = pod(f"p{step}", gpus=n % 4 + 1, node=name, priority=5 * (n % 2))
            plain.append(bound)
            core.observe_pod(bound, now)
        elif op == "finish-plain" and plain:
            done = plain.pop(n % len(plain))
            core.forget_pod(done.uid, now)
        elif op in ("member", "cpu-member"):
            spec = GANG_SPECS[gang]
            size = len(gangs[gang])
            if op == "member":
                new = pod(f"g{gang}-{step}", group=f"g{gang}", size=size, gpus=n % 3 + 1, **spec)
            else:
                new = pod(f"g{gang}-{step}", group=f"g{gang}", size=size, cpu="500m", **spec)
            members[gang].append(new)
            core.observe_pod(new, now)
        elif op == "delete-member" and members[gang]:
            gone = members[gang].pop(n % len(members[gang]))
            core.forget_pod(gone.uid, now)
        elif op == "filter" and members[gang]:
            asked = core.snapshot.pods.get(members[gang][0].uid)
            if asked is not None and not asked.is_bound:
                core.filter(asked, list(core.snapshot.nodes), now)
        elif op == "expire":
            now += 10.0
            core.expire(now)
        core.room.absorb_changes()
        for key, group_state in list(core.groups.items()):
            if key not in core.shared.shortfalls:
                continue
            assert group_state.waiting and key not in core.ledger.plans
            # The memo holds: a fresh attempt must not plan the gang either.
            fresh = copy.deepcopy(core)
            fresh.shared.shortfalls.forget(key)
            fresh.groups[key].shortfall_generation = None
            fresh.groups[key].retry_after = 0.0
            spec = fresh.snapshot.group_spec(key)
            assert spec is not None
            fresh.planning.try_plan(
                key, fresh.groups[key], spec, now, asking=None, candidates=None, queue=False
            )
            assert key not in fresh.ledger.plans, (step, op, group_state.message)
            checked += 1


def test_a_node_outside_a_members_node_selector_does_not_wake_it() -> None:
    memo = ShortfallMemo()
    key = GroupKey("ns", "pinned")
    obj = make_pod("p").gpus(1).obj()
    obj["spec"]["nodeSelector"] = {RACK: "r1"}
    pinned = PodInfo.from_api(obj)
    memo.remember(key, [pinned], topology=False, priority=0)
    elsewhere = NodeChange("n", room(0), room(8), node("n", 8, "r0"))
    assert memo.absorb([elsewhere]) == set()
    inside = NodeChange("m", room(0), room(8), node("m", 8, "r1"))
    assert memo.absorb([inside]) == {key}


def test_a_priority_drop_and_a_room_change_in_one_look_forget_both_gangs() -> None:
    memo = ShortfallMemo()
    high, small = GroupKey("ns", "high"), GroupKey("ns", "small")
    memo.remember(high, [pod("h", gpus=9)], topology=False, priority=10)
    memo.remember(small, [pod("s", gpus=1)], topology=False, priority=0)
    freed = NodeChange("n", room(0), room(1), node("n", 8))
    assert memo.absorb([freed], lowest_priority=5) == {high, small}
    assert len(memo) == 0


def test_remembering_a_gang_again_replaces_its_shapes() -> None:
    memo = ShortfallMemo()
    key = GroupKey("ns", "g")
    memo.remember(key, [pod("s", gpus=1)], topology=False, priority=0)
    memo.remember(key, [pod("b", gpus=4)], topology=False, priority=0)  # its members changed
    two_free = NodeChange("n", room(0), room(2), node("n", 8))
    assert memo.absorb([two_free]) == set()  # fits the old 1-GPU shape only
    assert key in memo


def test_forgetting_a_gang_says_whether_it_was_memoised() -> None:
    memo = ShortfallMemo()
    key = GroupKey("ns", "g")
    assert memo.forget(key) is False
    memo.remember(key, [pod("s", gpus=1)], topology=False, priority=0)
    assert memo.forget(key) is True and key not in memo


def test_a_forgotten_topology_gang_is_not_forgotten_again() -> None:
    memo = ShortfallMemo()
    key = GroupKey("ns", "racked")
    memo.remember(key, [pod("r", gpus=9)], topology=True, priority=0)
    memo.forget(key)
    moved = NodeChange("n", room(1), room(0), node("n", 8))
    assert memo.absorb([moved]) == set()


# ---- how the core reads what changed: a relist, an overflowed journal, two changes ----


def test_after_a_relist_every_memoised_gang_is_tried_again() -> None:
    core = held_cluster(3)
    snapshot = core.snapshot
    snapshot.replace_all(list(snapshot.nodes.values()), list(snapshot.pods.values()), [])
    core.room.absorb_changes()
    assert len(core.shared.shortfalls) == 0
    assert all(
        core.groups[GroupKey("default", f"g{g}")].shortfall_generation is None for g in range(3)
    )


def test_after_the_room_journal_overflowed_every_memoised_gang_is_tried_again() -> None:
    core = held_cluster(3)
    core.room.score_board.rooms_overflowed = True
    core.room.absorb_changes()
    assert len(core.shared.shortfalls) == 0


def test_a_node_whose_room_changed_twice_since_the_last_look_wakes_by_its_first_and_last() -> None:
    # n1 goes from 0 free GPUs to 2 and back to 1 between two looks: 0 -> 1 fits a
    # 1-GPU member, so its gangs are tried; read as 2 -> 1 (the later change alone) it
    # would look like room going away.
    core = held_cluster(2)
    core.observe_pod(pod("busy1", gpus=8, node="n1", phase="Succeeded"), 2.0)
    core.room.score_board.refresh(core.snapshot, core.ledger, core.policy)  # first change: 0 -> 8
    core.observe_pod(pod("back", gpus=7, node="n1"), 2.0)  # second: 8 -> 1
    core.room.absorb_changes()
    assert len(core.shared.shortfalls) == 0


def test_a_node_relabelled_into_a_rack_wakes_a_gang_that_needs_one_rack() -> None:
    # Each rack has 2 free GPUs; the gang needs 4 in one rack. b moves to rack r0.
    core = two_racks(used=2)
    pg = make_podgroup("t", 2)
    pg["spec"]["topology"] = {"required": RACK}
    core.apply_group_spec(GroupSpec.from_podgroup(pg, source="PodGroup"))
    for m in range(2):
        core.observe_pod(pod(f"t-{m}", group="t", gpus=2), 0.0)
    key = GroupKey("default", "t")
    assert core.filter(core.snapshot.pods[pod("t-0", group="t").uid], ["a", "b"], 1.0).nodes == []
    assert key in core.shared.shortfalls
    core.apply_node(node("b", 4, "r0"))
    core.room.absorb_changes()
    assert key not in core.shared.shortfalls
