"""Starvation reservations hold for any nodes, pods, gangs and times (hypothesis).

Never over-committed (what a reservation holds is free, and never more than the
gang needs); a held GPU is never planned for another gang nor offered to a plain
pod; a reservation ends by its bound.
"""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from extender.domain.cluster.ledger import Plan
from extender.domain.gang.gang import Timeouts
from extender.domain.objects.membership import GroupKey
from extender.domain.objects.model import GroupSpec, NodeInfo, PodInfo
from extender.domain.objects.quantity import GPU
from extender.domain.starvation.reservations import NodeGpus, Reservation, choose_nodes, hold
from extender.domain.state.gang_state import StarvingHold
from tests.builders import make_node, make_pod, make_podgroup
from tests.core_builder import make_core

T0 = 1_000_000.0
CREATED_AT_T0 = "1970-01-12T13:46:40Z"
BIG = GroupKey("default", "big")

names_st = st.lists(st.sampled_from("abcdef"), min_size=1, max_size=6, unique=True)


@given(
    nodes=names_st,
    need=st.integers(min_value=0, max_value=20),
    free=st.dictionaries(st.sampled_from("abcdefg"), st.integers(-4, 8)),
)
def test_a_reservation_holds_only_free_gpus_and_never_more_than_it_needs(
    nodes: list[str], need: int, free: dict[str, int]
) -> None:
    held = hold(Reservation(BIG, tuple(nodes), need, T0, T0 + 1), free)
    assert set(held) <= set(nodes)
    assert all(0 < gpus <= free.get(node, 0) for node, gpus in held.items())
    assert sum(held.values()) <= need
    # Nothing free is left unheld while the need is not met.
    if sum(held.values()) < need:
        assert all(held.get(n, 0) == max(free.get(n, 0), 0) for n in nodes)


@given(
    gpus=st.dictionaries(
        st.sampled_from("abcdef"),
        st.tuples(st.integers(0, 8), st.integers(0, 8)),
        min_size=1,
    ),
    need=st.integers(min_value=1, max_value=30),
    avoid=st.sets(st.sampled_from("abcdef")),
)
def test_the_chosen_nodes_hold_the_gang_and_are_as_few_as_any_choice(
    gpus: dict[str, tuple[int, int]], need: int, avoid: set[str]
) -> None:
    nodes = {n: NodeGpus(capacity=c, free=min(f, c)) for n, (c, f) in gpus.items()}
    chosen = choose_nodes(need, nodes, avoid=avoid)
    capacities = sorted((g.capacity for g in nodes.values()), reverse=True)
    if sum(capacities) < need:
        assert chosen is None
        return
    assert chosen is not None
    assert len(set(chosen)) == len(chosen) and set(chosen) <= set(nodes)
    assert sum(nodes[n].capacity for n in chosen) >= need
    fewest = next(k for k in range(1, len(capacities) + 1) if sum(capacities[:k]) >= need)
    fresh = sorted((g.capacity for n, g in nodes.items() if n not in avoid), reverse=True)
    if sum(fresh) >= need:
        assert set(chosen).isdisjoint(avoid)
        assert len(chosen) == next(k for k in range(1, len(fresh) + 1) if sum(fresh[:k]) >= need)
    else:
        assert len(chosen) == fewest


# Steps after the reservation started: a bound 1-GPU pod finishes, another gang's
# member asks, a plain 1-GPU pod asks, or time passes.
step_st = st.one_of(
    st.tuples(st.just("finish"), st.integers(0, 30)),
    st.tuples(st.just("gang"), st.integers(0, 2)),
    st.tuples(st.just("plain"), st.integers(0, 30)),
    st.tuples(st.just("wait"), st.integers(1, 20)),
)


@settings(max_examples=60, deadline=None)
@example(  # a full node, GPUs freeing one by one under a reservation, then its bound
    node_gpus=[4],
    fill=[4, 0, 0],
    big=(2, 2),
    others=[(2, 1)],
    steps=[("finish", 0), ("gang", 0), ("plain", 0), ("finish", 0), ("wait", 60)],
    max_seconds=30,
)
@example(  # a GPU frees under a reservation and a small gang asks for it
    node_gpus=[8],
    fill=[8, 0, 0],
    big=(2, 4),
    others=[(1, 1)],
    steps=[("finish", 0), ("gang", 0), ("plain", 0)],
    max_seconds=30,
)
@given(
    node_gpus=st.lists(st.integers(1, 8), min_size=1, max_size=3),
    fill=st.lists(st.integers(0, 8), min_size=3, max_size=3),
    big=st.tuples(st.integers(1, 4), st.integers(1, 4)),
    others=st.lists(st.tuples(st.integers(1, 3), st.integers(1, 2)), min_size=1, max_size=3),
    steps=st.lists(step_st, max_size=25),
    max_seconds=st.integers(5, 60),
)
def test_a_held_gpu_is_never_planned_for_another_gang_nor_offered_and_reservations_end_by_their_bound(
    node_gpus: list[int],
    fill: list[int],
    big: tuple[int, int],
    others: list[tuple[int, int]],
    steps: list[tuple[str, int]],
    max_seconds: int,
) -> None:
    core = make_core(
        timeouts=Timeouts(60, 30, 0, starvation_seconds=5, reservation_max_seconds=max_seconds)
    )
    nodes = [f"n{i}" for i in range(len(node_gpus))]
    smalls: list[PodInfo] = []
    for name, gpus, used in zip(nodes, node_gpus, fill, strict=False):
        core.apply_node(NodeInfo.from_api(make_node(name).gpus(gpus).obj()))
        for j in range(min(used, gpus)):
            pod = PodInfo.from_api(make_pod(f"s-{name}-{j}").gpus(1).node(name).obj())
            core.observe_pod(pod, T0)
            smalls.append(pod)

    def gang(name: str, size: int, gpus: int, created: str | None) -> list[PodInfo]:
        spec = make_podgroup(name, size)
        core.apply_group_spec(GroupSpec.from_podgroup(spec, source="PodGroup"))
        pods = []
        for i in range(size):
            builder = make_pod(f"{name}-{i}").group(name).gpus(gpus)
            pod = PodInfo.from_api((builder.created(created) if created else builder).obj())
            core.observe_pod(pod, T0)
            pods.append(pod)
        return pods

    gang("big", big[0], big[1], CREATED_AT_T0)
    waiting = [gang(f"o{i}", size, gpus, None) for i, (size, gpus) in enumerate(others)]

    def free(node: str) -> int:
        return core.free_after_reservations(node).get(GPU, 0)

    # Every plan, at the moment it is reserved, uses no GPU another gang holds.
    reserve = core.ledger.reserve

    def checked_reserve(plan: Plan) -> None:
        for n in {node for node in plan.placements.values()}:
            gpus = sum(
                plan.requests[uid].get(GPU, 0) for uid, at in plan.placements.items() if at == n
            )
            owner, held, _ = core.starving_holds().get(n, (plan.group, 0, GPU))
            others = held if owner != plan.group else 0
            assert gpus <= free(n) - others, f"planned a GPU {owner} holds on {n}"
        reserve(plan)

    core.ledger.reserve = checked_reserve  # type: ignore[method-assign]
    core.expire(T0)  # every gang seen held from T0
    now = T0 + 6
    core.expire(now)
    core.drain_effects()
    plain_index = 0

    def holds() -> dict[str, StarvingHold]:
        return core.starving_holds()  # any starving gang's, not only big's

    for kind, arg in steps:
        held = {n: each.gpus for n, each in holds().items()}
        free_before = {n: free(n) for n in nodes}
        # Never over-committed: held GPUs are free ones.
        assert all(0 < held[n] <= free_before[n] for n in held)
        reservation = core.starvation.reservations.get(BIG)
        if kind == "finish" and smalls:
            core.forget_pod(smalls.pop(arg % len(smalls)).uid, now)
        elif kind == "gang":
            members = waiting[arg % len(waiting)]
            core.filter(members[0], nodes, now)
        elif kind == "plain":
            pod = PodInfo.from_api(make_pod(f"p{plain_index}").gpus(1).obj())
            plain_index += 1
            decision = core.filter(pod, nodes, now)
            # (Plain pods' own fit is kube-scheduler's business: only held GPUs count.)
            for n in decision.nodes:
                assert n not in held or free_before[n] - held[n] >= 1, f"offered held GPU on {n}"
        else:
            now += arg
            core.expire(now)
            if reservation is not None and reservation.expired(now):
                assert core.starvation.reservations.get(BIG) != reservation
        core.drain_effects()
        current = core.starvation.reservations.get(BIG)
        if current is not None:
            assert current.deadline == current.started + max_seconds
            assert now < current.deadline
