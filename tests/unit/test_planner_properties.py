"""Planner and ledger invariants, for any cluster and any gangs (hypothesis)."""

from __future__ import annotations

from collections import defaultdict

from hypothesis import given, settings
from hypothesis import strategies as st

from extender.domain.decisions import Verdict
from extender.domain.gang import GangCore, Timeouts
from extender.domain.model import NodeInfo, PodInfo
from extender.domain.planner import Placement, Shortfall, plan_gang
from extender.domain.policy import Policy, Strategy, Topology
from tests.builders import make_node, make_pod

GPU = "nvidia.com/gpu"

node_gpus = st.lists(st.integers(min_value=0, max_value=8), min_size=1, max_size=8)
member_gpus = st.lists(st.integers(min_value=0, max_value=8), min_size=1, max_size=10)
policies = st.sampled_from(
    [
        Policy(),
        Policy(name="spread", strategy=Strategy.SPREAD),
        Policy(name="zone", topology=Topology(key="zone")),
    ]
)


def build_nodes(gpus: list[int]) -> dict[str, NodeInfo]:
    return {
        f"n{i}": NodeInfo.from_api(make_node(f"n{i}").gpus(g).label("zone", f"z{i % 2}").obj())
        for i, g in enumerate(gpus)
    }


def build_members(gpus: list[int], group: str = "g") -> list[PodInfo]:
    return [
        PodInfo.from_api(make_pod(f"{group}-{i}").group(group).gpus(g).obj())
        for i, g in enumerate(gpus)
    ]


@given(node_gpus, member_gpus, policies)
@settings(max_examples=300, deadline=None)
def test_a_placement_never_overcommits_and_places_everyone(nodes_gpu, members_gpu, policy) -> None:
    nodes = build_nodes(nodes_gpu)
    members = build_members(members_gpu)
    free = {name: dict(n.allocatable) for name, n in nodes.items()}
    outcome = plan_gang(members, free, nodes, policy)
    if isinstance(outcome, Placement):
        # All-or-nothing: every member has a node.
        assert set(outcome.nodes) == {m.uid for m in members}
        used: dict[str, int] = defaultdict(int)
        for m in members:
            used[outcome.nodes[m.uid]] += m.requests.get(GPU, 0)
        for name, gpus in used.items():
            assert gpus <= free[name].get(GPU, 0)
    else:
        assert isinstance(outcome, Shortfall)
        assert outcome.placeable < outcome.total
        # A shortfall is only claimed when the GPUs do not obviously fit one per node.
        assert outcome.message


@given(node_gpus, member_gpus, policies)
@settings(max_examples=100, deadline=None)
def test_planning_is_deterministic(nodes_gpu, members_gpu, policy) -> None:
    nodes = build_nodes(nodes_gpu)
    members = build_members(members_gpu)
    free = {name: dict(n.allocatable) for name, n in nodes.items()}
    assert plan_gang(members, free, nodes, policy) == plan_gang(
        list(members), dict(free), nodes, policy
    )


@given(node_gpus, member_gpus)
@settings(max_examples=200, deadline=None)
def test_a_gang_that_fits_one_member_per_gpu_node_is_always_planned(nodes_gpu, members_gpu) -> None:
    # If the biggest members each have a node of their own that holds them, best-fit
    # decreasing must find a placement: a sanity floor for the heuristic.
    nodes = build_nodes(nodes_gpu)
    members = build_members(members_gpu)
    free = {name: dict(n.allocatable) for name, n in nodes.items()}
    wants = sorted((m.requests.get(GPU, 0) for m in members), reverse=True)
    haves = sorted(nodes_gpu, reverse=True)
    if len(wants) <= len(haves) and all(w <= h for w, h in zip(wants, haves, strict=False)):
        assert isinstance(plan_gang(members, free, nodes, Policy()), Placement)


gangs = st.lists(
    st.tuples(st.integers(min_value=1, max_value=5), st.integers(min_value=0, max_value=4)),
    min_size=1,
    max_size=6,
)


@given(node_gpus, gangs, st.randoms(use_true_random=False))
@settings(max_examples=200, deadline=None)
def test_gangs_filtered_in_any_order_never_half_hold_or_overcommit(
    nodes_gpu, gang_shapes, rnd
) -> None:
    core = GangCore(policy=Policy(), timeouts=Timeouts(60, 30, 2))
    for node in build_nodes(nodes_gpu).values():
        core.snapshot.upsert_node(node)
    pods: list[PodInfo] = []
    for g, (size, gpus) in enumerate(gang_shapes):
        for i in range(size):
            pod = PodInfo.from_api(
                make_pod(f"g{g}-{i}").group(f"g{g}").min_available(size).gpus(gpus).obj()
            )
            core.observe_pod(pod, 0.0)
            pods.append(pod)
    order = pods * 2
    rnd.shuffle(order)
    candidates = list(core.snapshot.nodes)
    for pod in order:
        decision = core.filter(pod, candidates, 1.0)
        if decision.verdict is Verdict.PLANNED:
            assert len(decision.nodes) == 1
        else:
            assert decision.nodes == []
    # No over-commit: reservations fit in allocatable on every node.
    for name, node in core.snapshot.nodes.items():
        assert core.ledger.reserved(name).get(GPU, 0) <= node.allocatable.get(GPU, 0)
    # No half-holding: a gang either has every member planned or holds nothing.
    for key, plan in core.ledger.plans.items():
        members = core.snapshot.members(key)
        assert {m.uid for m in members} == set(plan.placements)


def reference_score(core: GangCore, node: str, spread: bool) -> int:
    """Prioritize's score from first principles: GPU fill after bound pods and reservations."""
    info = core.snapshot.nodes.get(node)
    total = info.allocatable.get(GPU, 0) if info else 0
    if total <= 0:
        return 0
    free = core.snapshot.free(node).get(GPU, 0) - core.ledger.reserved(node).get(GPU, 0)
    fill = (total - max(0, free)) / total
    return round((1 - fill if spread else fill) * 10)


operations = st.lists(
    st.tuples(
        st.sampled_from(["node", "drop-node", "bind", "unbind", "gang", "forget-gang"]),
        st.integers(min_value=0, max_value=5),
        st.integers(min_value=0, max_value=8),
    ),
    max_size=40,
)


@given(operations, st.sampled_from([Policy(), Policy(name="spread", strategy=Strategy.SPREAD)]))
@settings(max_examples=300, deadline=None)
def test_prioritize_scores_stay_current_through_any_sequence_of_changes(ops, policy) -> None:
    # The score board is updated incrementally; after every change it must equal
    # a fresh computation for every node, including removed and unknown ones.
    core = GangCore(policy=policy, timeouts=Timeouts(60, 30, 2))
    probe = PodInfo.from_api(make_pod("probe").gpus(1).obj())
    names = [f"n{i}" for i in range(6)] + ["unknown"]
    spread = policy.strategy is Strategy.SPREAD
    for step, (op, i, gpus) in enumerate(ops):
        node = f"n{i}"
        if op == "node":
            core.snapshot.upsert_node(NodeInfo.from_api(make_node(node).gpus(gpus).obj()))
        elif op == "drop-node":
            core.snapshot.delete_node(node)
        elif op == "bind":
            pod = make_pod(f"p{step}").gpus(gpus).node(node).obj()
            core.observe_pod(PodInfo.from_api(pod), float(step))
        elif op == "unbind":
            bound = sorted(uid for uid, p in core.snapshot.pods.items() if p.node_name)
            if bound:
                core.forget_pod(bound[i % len(bound)], float(step))
        elif op == "gang":
            for m in range(2):
                pod = make_pod(f"g{step}-{m}").group(f"g{step}").min_available(2).gpus(gpus)
                core.observe_pod(PodInfo.from_api(pod.obj()), float(step))
            member = PodInfo.from_api(
                make_pod(f"g{step}-0").group(f"g{step}").min_available(2).gpus(gpus).obj()
            )
            core.filter(member, list(core.snapshot.nodes), float(step))
        elif op == "forget-gang" and core.ledger.plans:
            plan = sorted(core.ledger.plans.values(), key=lambda p: p.plan_id)[0]
            core.forget_pod(next(iter(sorted(plan.placements))), float(step))
        got = core.prioritize(probe, names)
        assert got == {n: reference_score(core, n, spread) for n in names}, (step, op)
