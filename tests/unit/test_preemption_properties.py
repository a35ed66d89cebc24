"""Gang preemption invariants, for any cluster of running gangs and plain pods (hypothesis).

Through the core (`GangCore`, preemption on): whatever a high gang evicts, no victim
gang is left in part, no victim has its priority or more or opted out, no victim
could be spared, and the held plan never over-commits the room left once the
victims are gone; while the victims terminate (kube-scheduler still counts them and does
not offer their nodes), the preemptor's plan is kept and a rival gang takes none of its
room. kube-scheduler's victims made whole-gang: never part of a gang
on a kept node, never a gang that may not go.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from extender.domain.gang.gang import GangCore
from extender.domain.objects.membership import GroupKey
from extender.domain.objects.model import GroupSpec, NodeInfo, PodInfo
from extender.domain.planning.planner import Placement, plan_gang
from extender.domain.preemption.preemption import NodeVictims, free_without, gang_aware_victims
from extender.domain.state.decisions import EvictVictims, PlanCreated
from tests.builders import make_node, make_pod, make_podgroup
from tests.core_builder import make_core

GPU = "nvidia.com/gpu"
T0 = 1_000_000.0

# A running unit: (gang size or 0 for a plain pod, GPUs per pod, priority, preemptible).
units_st = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=3),
        st.integers(min_value=1, max_value=4),
        st.sampled_from([0, 10, 100, 1000]),
        st.booleans(),
    ),
    min_size=1,
    max_size=8,
)
nodes_st = st.lists(st.integers(min_value=1, max_value=8), min_size=1, max_size=5)
preemptor_st = st.tuples(
    st.integers(min_value=1, max_value=4),  # members
    st.integers(min_value=1, max_value=4),  # GPUs each
    st.sampled_from([10, 100, 1000, 5000]),  # priority
)


def build(
    node_gpus: list[int], units: list[tuple[int, int, int, bool]], preemptor: tuple[int, int, int]
) -> GangCore:
    core = make_core()
    core.preemption_enabled = True
    free = {f"n{i}": g for i, g in enumerate(node_gpus)}
    for name, gpus in free.items():
        core.apply_node(NodeInfo.from_api(make_node(name).gpus(gpus).obj()))
    serial = 0
    for u, (size, gpus, priority, preemptible) in enumerate(units):
        placed: list[dict[str, Any]] = []
        for i in range(max(size, 1)):
            node = next((n for n, f in free.items() if f >= gpus), None)
            if node is None:
                break
            free[node] -= gpus
            serial += 1
            builder = make_pod(f"u{u}-{i}").gpus(gpus).priority(priority).node(node)
            if size:
                builder = builder.group(f"u{u}")
            obj = builder.phase("Running").obj()
            obj["metadata"]["uid"] = f"uid-{serial}"
            placed.append(obj)
        if size and placed:
            pg = make_podgroup(f"u{u}", len(placed))
            pg["spec"]["preemptible"] = preemptible
            core.apply_group_spec(GroupSpec.from_podgroup(pg, source="PodGroup"))
        for obj in placed:
            core.observe_pod(PodInfo.from_api(obj), T0)
    members, gpus, priority = preemptor
    core.apply_group_spec(
        GroupSpec.from_podgroup(make_podgroup("high", members), source="PodGroup")
    )
    for i in range(members):
        obj = make_pod(f"high-{i}").group("high").gpus(gpus).priority(priority).obj()
        obj["metadata"]["uid"] = f"uid-high-{i}"
        core.observe_pod(PodInfo.from_api(obj), T0)
    core.drain_effects()
    return core


@given(nodes_st, units_st, preemptor_st)
@settings(max_examples=300, deadline=None)
def test_gang_preemption_invariants(node_gpus, units, preemptor) -> None:
    core = build(node_gpus, units, preemptor)
    priority = preemptor[2]
    high = [p for p in core.snapshot.pods.values() if p.group == GroupKey("default", "high")]
    free_before = core.free_for_planning()
    core.filter(high[0], sorted(core.snapshot.nodes), T0)
    effects = core.drain_effects()
    evictions = [e for e in effects if isinstance(e, EvictVictims)]
    victims = {v.uid for e in evictions for v in e.victims}
    if not evictions:
        return
    by_uid = core.snapshot.pods
    # Never part of a gang: every bound member of a victim's gang is a victim too.
    for uid in victims:
        pod = by_uid[uid]
        assert pod.priority < priority
        if pod.group is not None:
            assert core.preemption.group_preemptible(pod.group)
            whole = {m.uid for m in core.snapshot.members(pod.group) if m.holds_capacity}
            assert whole <= victims, f"partial victim gang {pod.group}"
    # The hold never over-commits the room the victims leave.
    plan = next(e.plan for e in effects if isinstance(e, PlanCreated))
    units_by_key: dict[str, list[PodInfo]] = defaultdict(list)
    for e in evictions:
        for v in e.victims:
            units_by_key[v.unit].append(by_uid[v.uid])
    from extender.domain.preemption.preemption import VictimUnit

    chosen = [VictimUnit(tuple(ps), 0) for ps in units_by_key.values()]
    after = free_without(free_before, chosen)
    used: dict[str, int] = defaultdict(int)
    for uid, node in plan.placements.items():
        used[node] += plan.requests[uid].get(GPU, 0)
    for node, gpus in used.items():
        assert gpus <= after[node].get(GPU, 0), f"over-commit on {node}"

    # Minimal: no victim unit can be spared while the gang still fits.
    def fits(capacity: Any) -> bool:
        return isinstance(plan_gang(high, capacity, core.snapshot.nodes, core.policy), Placement)

    for key in units_by_key:
        rest = [u for k, u in zip(units_by_key, chosen, strict=True) if k != key]
        assert not fits(free_without(free_before, rest)), f"{key} was not needed"


@given(units_st, st.sampled_from([10, 100, 1000, 5000]), st.data())
@settings(max_examples=200, deadline=None)
def test_kube_schedulers_victims_never_leave_part_of_a_gang_on_a_kept_node(
    units, priority, data
) -> None:
    core = build([8, 8, 8, 8, 8], units, (1, 1, 0))
    pods = {uid: p for uid, p in core.snapshot.pods.items() if p.is_bound}
    by_node: dict[str, list[str]] = defaultdict(list)
    for uid, p in pods.items():
        assert p.node_name is not None
        by_node[p.node_name].append(uid)
    proposed = {
        node: NodeVictims(
            tuple(data.draw(st.lists(st.sampled_from(uids), min_size=1, unique=True)))
        )
        for node, uids in by_node.items()
    }
    preemptor = PodInfo.from_api(make_pod("plain-high").gpus(1).priority(priority).obj())
    answer = gang_aware_victims(
        preemptor,
        proposed,
        core.snapshot.pods,
        core.preemption.group_pods,
        core.preemption.group_preemptible,
        core.preemption.group_disrupted_whole,
    )
    for node, victims in answer.nodes.items():
        assert set(proposed[node].uids) <= set(victims.uids)
        for uid in victims.uids:
            pod = pods[uid]
            if pod.group is None:
                continue
            assert pod.priority < priority and core.preemption.group_preemptible(pod.group)
            on_node = {m.uid for m in core.snapshot.members(pod.group) if m.node_name == node}
            assert on_node <= set(victims.uids), f"part of {pod.group} left on {node}"


def offered_by_kube_scheduler(core: GangCore, pod: PodInfo) -> list[str]:
    """The nodes kube-scheduler's own filters offer `pod`: it counts every bound pod until
    its deletion reaches it, victims being evicted included."""
    used: dict[str, int] = defaultdict(int)
    for other in core.snapshot.pods.values():
        if other.holds_capacity and other.node_name is not None:
            used[other.node_name] += other.requests.get(GPU, 0)
    need = pod.requests.get(GPU, 0)
    return sorted(
        name
        for name, node in core.snapshot.nodes.items()
        if node.allocatable.get(GPU, 0) - used[name] >= need
    )


def committed_within_capacity(core: GangCore) -> None:
    """No over-commit: pods staying (not asked to go) plus every plan's unbound
    reservations fit each node."""
    committed: dict[str, int] = defaultdict(int)
    for pod in core.snapshot.pods.values():
        if pod.holds_capacity and pod.node_name and pod.uid not in core.preemption.evicting:
            committed[pod.node_name] += pod.requests.get(GPU, 0)
    for plan in core.ledger.plans.values():
        for uid in plan.unbound:
            if not core.snapshot.pods.get(uid) or not core.snapshot.pods[uid].is_bound:
                committed[plan.placements[uid]] += plan.requests[uid].get(GPU, 0)
    for name, gpus in committed.items():
        assert gpus <= core.snapshot.nodes[name].allocatable.get(GPU, 0), f"over-commit on {name}"


@given(nodes_st, units_st, preemptor_st, st.integers(min_value=1, max_value=4), st.data())
@settings(max_examples=200, deadline=None)
def test_a_preemptors_plan_survives_its_victims_termination_and_nobody_takes_their_room(
    node_gpus, units, preemptor, rival_gpus, data
) -> None:
    # The window between the evictions and the watch seeing the victims gone: members
    # asking then are not offered the nodes the victims still hold, and a rival gang of
    # the highest priority asks too. The plan is kept, nothing is over-committed, and
    # once the victims are gone every member of the plan gets its planned node.
    core = build(node_gpus, units, preemptor)
    high_key = GroupKey("default", "high")
    high = sorted(
        (p for p in core.snapshot.pods.values() if p.group == high_key), key=lambda p: p.name
    )
    core.filter(high[0], sorted(core.snapshot.nodes), T0)  # as the other properties ask
    effects = core.drain_effects()
    victims = sorted({v.uid for e in effects if isinstance(e, EvictVictims) for v in e.victims})
    plan = core.ledger.plans.get(high_key)
    if not victims or plan is None:
        return
    core.apply_group_spec(GroupSpec.from_podgroup(make_podgroup("rival", 1), source="PodGroup"))
    rival_obj = make_pod("rival-0").group("rival").gpus(rival_gpus).priority(9000).obj()
    rival_obj["metadata"]["uid"] = "uid-rival-0"
    core.observe_pod(PodInfo.from_api(rival_obj), T0)
    rival = core.snapshot.pods["uid-rival-0"]
    going = list(victims)
    now = T0
    for _ in range(data.draw(st.integers(min_value=0, max_value=30), label="asks") + len(going)):
        # Well inside the hold's deadline (preemption_hold_seconds), which ends the wait.
        now += 0.05
        step = data.draw(st.sampled_from(["member", "rival", "gone"]), label="step")
        if step == "gone" and going:
            core.forget_pod(going.pop(data.draw(st.integers(0, len(going) - 1))), now)
        elif step == "rival":
            core.filter(rival, offered_by_kube_scheduler(core, rival), now)
        else:
            pod = data.draw(st.sampled_from(high), label="member")
            core.filter(pod, offered_by_kube_scheduler(core, pod), now)
        core.drain_effects()
        assert core.ledger.plans.get(high_key) is plan, "the preemptor's plan was dropped"
        committed_within_capacity(core)
    for uid in going:  # the rest of the victims go
        core.forget_pod(uid, now)
    for pod in high:
        node = plan.placements.get(pod.uid)
        if node is None:
            continue
        decision = core.filter(pod, offered_by_kube_scheduler(core, pod), now + 0.1)
        assert decision.nodes == [node], decision.message
