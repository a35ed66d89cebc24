"""Queue order of held gangs holds for any gangs, priorities and event order (hypothesis).

Held gangs are planned highest priority first, then oldest; a lower gang plans only
on what the gangs ahead cannot use now (backfill), and never on room a gang ahead
could have taken; order never costs throughput: once every gang was asked about,
no held gang fits on what is left.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from extender.domain.gang.gang import GangCore
from extender.domain.objects.membership import GroupKey
from extender.domain.objects.model import GroupSpec, NodeInfo, PodInfo, Resources
from extender.domain.planning.planner import Placement, plan_gang
from extender.domain.planning.queue import rank_of
from extender.domain.state.decisions import PlanCreated, Verdict
from tests.builders import make_node, make_pod, make_podgroup
from tests.core_builder import make_core

T0 = 1_000_000.0

# Per gang: (priority, members, GPUs per member); gang i is created i seconds after 0.
gangs_st = st.lists(
    st.tuples(
        st.sampled_from([0, 10, 1000]),
        st.integers(min_value=1, max_value=3),
        st.integers(min_value=1, max_value=4),
    ),
    min_size=1,
    max_size=5,
)
node_gpus_st = st.lists(st.integers(min_value=0, max_value=8), min_size=1, max_size=3)


def build(gangs: list[tuple[int, int, int]], node_gpus: list[int]) -> GangCore:
    core = make_core()
    for i, gpus in enumerate(node_gpus):
        core.apply_node(NodeInfo.from_api(make_node(f"n{i}").gpus(gpus).obj()))
    for g, (priority, size, gpus) in enumerate(gangs):
        name = f"g{g}"
        core.apply_group_spec(GroupSpec.from_podgroup(make_podgroup(name, size), source="PodGroup"))
        for m in range(size):
            pod = (
                make_pod(f"{name}-{m}")
                .group(name)
                .gpus(gpus)
                .priority(priority)
                .created(f"2026-11-22T10:00:{g:02d}Z")
                .obj()
            )
            core.observe_pod(PodInfo.from_api(pod), T0)
    return core


def fits_now(core: GangCore, key: GroupKey, free: dict[str, Resources]) -> bool:
    members = [m for m in core.snapshot.members(key) if not m.is_bound]
    return isinstance(plan_gang(members, free, core.snapshot.nodes, core.policy), Placement)


def take(free: dict[str, Resources], created: PlanCreated) -> None:
    plan = created.plan
    for uid, node in plan.placements.items():
        for name, value in plan.requests[uid].items():
            free[node][name] = free[node].get(name, 0) - value


@settings(max_examples=150, deadline=None)
@given(gangs=gangs_st, node_gpus=node_gpus_st, data=st.data())
def test_no_gang_is_planned_on_room_a_gang_ahead_could_take(
    gangs: list[tuple[int, int, int]], node_gpus: list[int], data: st.DataObject
) -> None:
    core = build(gangs, node_gpus)
    keys = [GroupKey("default", f"g{g}") for g in range(len(gangs))]
    rank = {k: rank_of(k, core.snapshot.members(k)) for k in keys}
    order = data.draw(st.permutations(keys), label="the order kube-scheduler asks")
    nodes = sorted(core.snapshot.nodes)
    for now, asked in enumerate(order):
        free = core.free_for_planning()
        pod = core.snapshot.members(asked)[0]
        core.filter(pod, nodes, T0 + now)
        for effect in core.drain_effects():
            if not isinstance(effect, PlanCreated):
                continue
            planned = effect.plan.group
            for other in keys:
                if other in core.ledger.plans or not rank[other].is_ahead_of(rank[planned]):
                    continue
                # A gang ahead left held could not have been planned on that room.
                assert not fits_now(core, other, free), (planned, other)
            take(free, effect)
        for node in nodes:
            assert core.free_after_reservations(node).get("nvidia.com/gpu", 0) >= 0
    # Order never costs throughput: what is left fits none of the held gangs.
    left = core.free_for_planning()
    for key in keys:
        if key not in core.ledger.plans:
            assert not fits_now(core, key, left), key


@settings(max_examples=100, deadline=None)
@given(
    priorities=st.tuples(st.sampled_from([0, 5, 1000]), st.sampled_from([0, 5, 1000])),
    first_asked=st.integers(min_value=0, max_value=1),
    gpus=st.integers(min_value=1, max_value=8),
)
def test_of_two_gangs_that_fit_one_at_a_time_the_one_ahead_goes_first(
    priorities: tuple[int, int], first_asked: int, gpus: int
) -> None:
    # Each gang needs the whole node: whichever is asked about first, the one ahead
    # (higher priority, or equal and created first: g0) is planned, the other waits
    # behind it by name.
    core = build([(priorities[0], 1, gpus), (priorities[1], 1, gpus)], [gpus])
    keys = [GroupKey("default", "g0"), GroupKey("default", "g1")]
    ahead = keys[1] if priorities[1] > priorities[0] else keys[0]
    behind = keys[1 - keys.index(ahead)]
    first = core.snapshot.members(keys[first_asked])[0]
    second = core.snapshot.members(keys[1 - first_asked])[0]
    core.filter(first, ["n0"], T0)
    core.filter(second, ["n0"], T0 + 1)
    planned = [e.plan.group for e in core.drain_effects() if isinstance(e, PlanCreated)]
    assert planned == [ahead]
    decision = core.filter(core.snapshot.members(behind)[0], ["n0"], T0 + 2)
    assert decision.verdict is Verdict.WAIT
    assert f"waiting behind {ahead} (priority {max(priorities)})" in decision.message
