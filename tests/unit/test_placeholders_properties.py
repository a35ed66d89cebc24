"""Placeholder pods hold for any nodes, pods, gangs and churn (hypothesis).

Placeholders never over-commit a node; a reserving gang has placeholders only on
its reserved nodes and never for more GPUs than its reservation holds there; once
its reservation ends (planned, given up, gang gone) each is asked to be deleted.
Effects are carried out at once: a create becomes a pod the watch delivers, a
delete a pod gone, as the controller and the API server would do.
"""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from extender.domain.gang.gang import GangCore, Timeouts
from extender.domain.objects.model import GroupSpec, NodeInfo, PodInfo
from extender.domain.objects.quantity import GPU
from extender.domain.state.decisions import PlaceholderCreate, PlaceholderDelete
from tests.builders import make_node, make_pod, make_podgroup, placeholder_pod_info
from tests.core_builder import make_core

T0 = 1_000_000.0
CREATED_AT_T0 = "1970-01-12T13:46:40Z"

# One step of churn: (kind, node index, amount).
steps_st = st.lists(
    st.tuples(
        st.sampled_from(["finish", "start", "bind", "tick"]), st.integers(0, 2), st.integers(1, 3)
    ),
    max_size=40,
)


def carry_out(core: GangCore, now: float) -> None:
    for effect in core.drain_effects():
        if isinstance(effect, PlaceholderCreate):
            existing = {p.name for p in core.snapshot.placeholders.values()}
            if effect.name in existing:
                continue  # a 409: it is there already
            uid = f"ph-{effect.group.name}-{effect.name}"
            core.observe_pod(placeholder_pod_info(effect, uid), now)
        elif isinstance(effect, PlaceholderDelete):
            for uid, p in list(core.snapshot.placeholders.items()):
                if p.name == effect.name and p.placeholder_for == effect.group:
                    core.forget_pod(uid, now)


def check(core: GangCore) -> None:
    for name, node in core.snapshot.nodes.items():
        assert core.snapshot.used(name).get(GPU, 0) <= node.allocatable.get(GPU, 0), name
    for key, reservation in core.starvation.reservations.items():
        held = core.starvation.held(key)
        mine = [p for p in core.snapshot.placeholders.values() if p.placeholder_for == key]
        for p in mine:
            assert p.node_name in reservation.nodes
        for node in {p.node_name for p in mine}:
            assert node is not None
            assert core.snapshot.placeholder_gpus(key, node) <= held.get(node, 0)
    for p in core.snapshot.placeholders.values():
        assert p.placeholder_for is not None
        if p.placeholder_for not in core.starvation.reservations:
            # Unwanted: its delete is on its way (asked, and not seen done yet).
            assert ("delete", p.name) in core.starvation.placeholder_requests


@settings(max_examples=150, deadline=None)
# A 4-GPU gang starving on a full 4-GPU node: placeholders grow as GPUs free, the
# default scheduler finds no room there, the gang is planned, binds once they are gone.
@example(
    capacities=[4],
    gangs=[(2, 2)],
    steps=[("tick", 0, 1)] * 3
    + [("finish", 0, 1), ("start", 0, 1), ("finish", 0, 1), ("start", 0, 2), ("tick", 0, 1)]
    + [("finish", 0, 2), ("start", 0, 1), ("bind", 0, 1), ("bind", 0, 1), ("start", 0, 1)],
)
@given(
    capacities=st.lists(st.integers(1, 4), min_size=1, max_size=3),
    gangs=st.lists(st.tuples(st.integers(1, 3), st.integers(1, 2)), min_size=1, max_size=2),
    steps=steps_st,
)
def test_placeholders_never_overcommit_and_follow_the_holds(
    capacities: list[int], gangs: list[tuple[int, int]], steps: list[tuple[str, int, int]]
) -> None:
    core = make_core(timeouts=Timeouts(60, 30, 2, starvation_seconds=2, reservation_max_seconds=15))
    names = [f"n{i}" for i in range(len(capacities))]
    for name, gpus in zip(names, capacities, strict=True):
        core.apply_node(NodeInfo.from_api(make_node(name).gpus(gpus).obj()))
    smalls: list[PodInfo] = []
    for name, gpus in zip(names, capacities, strict=True):
        for i in range(gpus):  # every GPU taken by another scheduler's pods
            pod = make_pod(f"s-{name}-{i}").gpus(1).node(name).scheduler("default-scheduler")
            smalls.append(PodInfo.from_api(pod.obj()))
            core.observe_pod(smalls[-1], T0)
    for g, (size, gpus) in enumerate(gangs):
        group = f"g{g}"
        core.apply_group_spec(
            GroupSpec.from_podgroup(make_podgroup(group, size), source="PodGroup")
        )
        for i in range(size):
            member = make_pod(f"{group}-{i}").group(group).gpus(gpus).created(CREATED_AT_T0)
            core.observe_pod(PodInfo.from_api(member.obj()), T0)
    now = T0
    counter = 0
    for kind, index, amount in steps:
        now += 1.0
        node = names[index % len(names)]
        if kind == "finish":
            running = [p for p in smalls if p.node_name == node and p.uid in core.snapshot.pods]
            for pod in running[:amount]:
                core.forget_pod(pod.uid, now)
        elif kind == "start":
            # The default scheduler binds where every pod's request (placeholders too) fits.
            for _ in range(amount):
                if core.snapshot.free(node).get(GPU, 0) < 1:
                    break
                counter += 1
                pod = make_pod(f"r{counter}").gpus(1).node(node).scheduler("default-scheduler")
                smalls.append(PodInfo.from_api(pod.obj()))
                core.observe_pod(smalls[-1], now)
        elif kind == "bind":
            # Every planned member reaches bind; the barrier says whether they bind
            # (it waits for the placeholders, and re-checks what the default scheduler
            # bound meanwhile).
            for plan in list(core.ledger.plans.values()):
                for uid, at in sorted(plan.placements.items()):
                    core.barrier.offered[uid] = frozenset({at})
                    core.arrive(uid, at, now)
                if plan.released:
                    for uid, at in plan.placements.items():
                        core.binding_succeeded(uid, at, now)
        core.expire(now)
        carry_out(core, now)
        check(core)
