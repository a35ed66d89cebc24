"""Planner and ledger invariants, for any cluster and any gangs (hypothesis).

Locality properties keep the planner before locality (`old_best_fit_decreasing`)
as the reference the new one must never do worse than.
"""

from __future__ import annotations

from collections import defaultdict

from hypothesis import given, settings
from hypothesis import strategies as st

from extender.domain.gang.gang import GangCore
from extender.domain.objects.model import NodeInfo, PodInfo
from extender.domain.objects.policy import GroupTopology, Policy, Strategy, Topology
from extender.domain.planning.planner import Placement, Shortfall, node_accepts, plan_gang
from extender.domain.state.decisions import Verdict
from tests.builders import make_node, make_pod
from tests.core_builder import make_core
from tests.strategies import NODE_NAMES, apply_change, snapshot_changes

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
    core = make_core()
    for node in build_nodes(nodes_gpu).values():
        core.apply_node(node)
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


operations = snapshot_changes(max_size=40)


@given(operations, st.sampled_from([Policy(), Policy(name="spread", strategy=Strategy.SPREAD)]))
@settings(max_examples=300, deadline=None)
def test_prioritize_scores_stay_current_through_any_sequence_of_changes(ops, policy) -> None:
    # The score board is updated incrementally; after every change it must equal
    # a fresh computation for every node, including removed and unknown ones.
    core = make_core(policy=policy)
    probe = PodInfo.from_api(make_pod("probe").gpus(1).obj())
    names = [*NODE_NAMES, "unknown"]
    spread = policy.strategy is Strategy.SPREAD
    for step, (op, i, gpus) in enumerate(ops):
        apply_change(core, op, i, gpus, step)
        got = core.prioritize(probe, names)
        assert got == {n: reference_score(core, n, spread) for n in names}, (step, op)


# ---------------------------------------------------------------- locality (issue 13 item 4)
def old_best_fit_decreasing(
    members: list[PodInfo], free: dict[str, dict[str, int]], nodes: dict[str, NodeInfo]
) -> dict[str, str] | None:
    """The planner before locality, kept as the reference: binpack best-fit decreasing.

    Each member, largest first, onto the node whose free GPUs (then cpu) it leaves
    the fewest of; None when one does not fit.
    """
    remaining = {n: dict(r) for n, r in free.items()}
    placed: dict[str, str] = {}
    order = sorted(
        members,
        key=lambda p: (
            -p.requests.get(GPU, 0),
            -p.requests.get("cpu", 0),
            -p.requests.get("memory", 0),
            p.name,
        ),
    )
    for pod in order:
        best = None
        for name, room in remaining.items():
            if not node_accepts(nodes[name], pod):
                continue
            if any(room.get(k, 0) < v for k, v in pod.requests.items() if v > 0):
                continue
            rank = (
                room.get(GPU, 0) - pod.requests.get(GPU, 0),
                room.get("cpu", 0) - pod.requests.get("cpu", 0),
                name,
            )
            if best is None or rank < best[0]:
                best = (rank, name)
        if best is None:
            return None
        placed[pod.uid] = best[1]
        for k, v in pod.requests.items():
            remaining[best[1]][k] = remaining[best[1]].get(k, 0) - v
    return placed


ZONE_KEY, RACK_KEY = "zone", "rack"
locality_nodes = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=8),  # GPUs
        st.integers(min_value=1, max_value=16),  # cpus
        st.integers(min_value=0, max_value=2),  # zone
        st.integers(min_value=0, max_value=3),  # rack (within the zone)
        st.booleans(),  # tainted
    ),
    min_size=1,
    max_size=10,
)
locality_members = st.lists(
    st.tuples(st.integers(min_value=0, max_value=8), st.integers(min_value=0, max_value=8)),
    min_size=1,
    max_size=8,
)
topologies = st.sampled_from(
    [
        None,
        GroupTopology(required=ZONE_KEY),
        GroupTopology(preferred=(RACK_KEY,)),
        GroupTopology(preferred=(ZONE_KEY, RACK_KEY)),
        GroupTopology(required=ZONE_KEY, preferred=(RACK_KEY,)),
    ]
)


def locality_cluster(specs: list[tuple[int, int, int, int, bool]]) -> dict[str, NodeInfo]:
    nodes = {}
    for i, (gpus, cpus, zone, rack, tainted) in enumerate(specs):
        builder = make_node(f"n{i}").gpus(gpus).cpu(str(cpus)).label(ZONE_KEY, f"z{zone}")
        builder = builder.label(RACK_KEY, f"z{zone}-r{rack}")
        if tainted:
            builder = builder.taint("dedicated", "other")
        nodes[f"n{i}"] = NodeInfo.from_api(builder.obj())
    return nodes


def locality_gang(specs: list[tuple[int, int]]) -> list[PodInfo]:
    return [
        PodInfo.from_api(make_pod(f"m{i}").group("g").gpus(gpus).cpu(str(cpus)).obj())
        for i, (gpus, cpus) in enumerate(specs)
    ]


@given(locality_nodes, locality_members, topologies, policies)
@settings(max_examples=400, deadline=None)
def test_locality_never_overcommits_and_never_spans_a_required_domain(
    node_specs, member_specs, topology, policy
) -> None:
    nodes = locality_cluster(node_specs)
    members = locality_gang(member_specs)
    free = {name: dict(n.allocatable) for name, n in nodes.items()}
    outcome = plan_gang(members, free, nodes, policy, topology=topology)
    if not isinstance(outcome, Placement):
        assert outcome.message
        return
    assert set(outcome.nodes) == {m.uid for m in members}
    used: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for m in members:
        node = outcome.nodes[m.uid]
        assert node_accepts(nodes[node], m)
        for resource, amount in m.requests.items():
            used[node][resource] += amount
    for node, amounts in used.items():
        for resource, amount in amounts.items():
            assert amount <= free[node].get(resource, 0), (node, resource)
    required = topology.required if topology is not None else None
    if required is not None:
        values = {nodes[n].labels.get(required) for n in outcome.nodes.values()}
        assert len(values) == 1 and None not in values


@given(locality_nodes, locality_members)
@settings(max_examples=400, deadline=None)
def test_the_planner_spans_no_more_nodes_than_best_fit_decreasing_did(
    node_specs, member_specs
) -> None:
    nodes = locality_cluster(node_specs)
    members = locality_gang(member_specs)
    free = {name: dict(n.allocatable) for name, n in nodes.items()}
    old = old_best_fit_decreasing(members, free, nodes)
    new = plan_gang(members, free, nodes, Policy())
    if old is None:
        return
    # Whatever the old planner placed, the new one places, on no more nodes.
    assert isinstance(new, Placement)
    assert len(set(new.nodes.values())) <= len(set(old.values()))


@given(
    st.lists(st.integers(min_value=0, max_value=8), min_size=1, max_size=10),
    st.integers(min_value=1, max_value=4),
    st.integers(min_value=1, max_value=10),
)
@settings(max_examples=400, deadline=None)
def test_equal_members_use_the_fewest_nodes_that_exist(nodes_gpu, size, count) -> None:
    # Equal GPU members, any node accepts any: the minimum is taking the nodes that
    # hold most members first; the planner must reach it (its own heuristic or BFD).
    nodes = build_nodes(nodes_gpu)
    members = [
        PodInfo.from_api(make_pod(f"m{i}").group("g").gpus(size).obj()) for i in range(count)
    ]
    free = {name: dict(n.allocatable) for name, n in nodes.items()}
    slots = sorted((g // size for g in nodes_gpu), reverse=True)
    if sum(slots) < count:
        assert isinstance(plan_gang(members, free, nodes, Policy()), Shortfall)
        return
    fewest, held = 0, 0
    for s in slots:
        if held >= count:
            break
        held += s
        fewest += 1
    outcome = plan_gang(members, free, nodes, Policy())
    assert isinstance(outcome, Placement)
    assert len(set(outcome.nodes.values())) == fewest


@given(node_gpus, member_gpus)
@settings(max_examples=300, deadline=None)
def test_a_gang_one_node_holds_is_placed_on_one_node(nodes_gpu, members_gpu) -> None:
    nodes = build_nodes(nodes_gpu)
    members = build_members(members_gpu)
    free = {name: dict(n.allocatable) for name, n in nodes.items()}
    if max(nodes_gpu) < sum(members_gpu):
        return
    outcome = plan_gang(members, free, nodes, Policy())
    assert isinstance(outcome, Placement)
    holds_all = [n for n, g in zip(nodes, nodes_gpu, strict=True) if g >= sum(members_gpu)]
    (only,) = set(outcome.nodes.values())
    # ...and on the tightest such node (binpack keeps bigger ones whole).
    tightest = min(holds_all, key=lambda n: (free[n][GPU], n))
    assert free[only][GPU] == free[tightest][GPU]
