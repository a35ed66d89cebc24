"""Task minimums (minTaskMember) hold for any members, sizes and cluster (hypothesis).

Whatever members exist (bound or not, of any task, in any creation order), a plan
the core makes meets every task minimum and minMember counting bound members, and
never over-commits a node's GPUs; a group it does not plan is held for a reason
that is true.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from extender.domain.objects.membership import GroupKey
from extender.domain.objects.model import GroupSpec, NodeInfo, PodInfo
from extender.domain.objects.policy import Policy, Strategy
from extender.domain.planning.selection import MemberSets, MembersMissing, choose_members
from extender.domain.state.decisions import Verdict
from tests.builders import make_node, make_pod, make_podgroup
from tests.core_builder import make_core

GPU = "nvidia.com/gpu"
TASKS = ("master", "worker", "ps")
KEY = GroupKey("default", "g")

# (task, GPUs, whether it is bound already), in creation order.
members_st = st.lists(
    st.tuples(st.sampled_from(TASKS), st.integers(min_value=0, max_value=4), st.booleans()),
    min_size=0,
    max_size=9,
)
minimums_st = st.dictionaries(
    st.sampled_from(TASKS), st.integers(min_value=1, max_value=3), max_size=3
)
node_gpus_st = st.lists(st.integers(min_value=0, max_value=8), min_size=1, max_size=5)


def build(
    shapes: list[tuple[str, int, bool]], node_gpus: list[int]
) -> tuple[dict[str, NodeInfo], list[PodInfo]]:
    """Nodes, and members; a member meant to be bound is bound where it fits, else not."""
    nodes = {
        f"n{i}": NodeInfo.from_api(make_node(f"n{i}").gpus(g).obj())
        for i, g in enumerate(node_gpus)
    }
    left = {name: node.allocatable.get(GPU, 0) for name, node in nodes.items()}
    pods = []
    for i, (task, gpus, bind) in enumerate(shapes):
        pod = (
            make_pod(f"m{i}")
            .group("g")
            .task(task)
            .gpus(gpus)
            .created(f"2026-11-22T10:{i // 60:02d}:{i % 60:02d}Z")
        )
        home = next((n for n, free in left.items() if free >= gpus), None) if bind else None
        if home is not None:
            left[home] -= gpus
            pod = pod.node(home)
        pods.append(PodInfo.from_api(pod.obj()))
    return nodes, pods


@given(members_st, minimums_st, st.integers(min_value=1, max_value=9))
@settings(max_examples=400, deadline=None)
def test_every_member_set_tried_meets_every_minimum_and_the_fewest_is_smallest(
    shapes, minimums, min_member
) -> None:
    _, members = build(shapes, [64])
    choice = choose_members(members, min_member=min_member, task_minimums=minimums)
    exist = Counter(m.task for m in members)
    short = {t for t, n in minimums.items() if exist[t] < n}
    if isinstance(choice, MembersMissing):
        # Held only when something really is missing, and everything missing is said.
        assert len(members) < min_member or short
        assert {s.task for s in choice.tasks} == short
        return
    assert isinstance(choice, MemberSets)
    assert not short and len(members) >= min_member
    bound = [m for m in members if m.is_bound]
    unbound = [m for m in members if not m.is_bound]
    assert [m.uid for m in choice.attempts[0]] == [m.uid for m in unbound]
    for attempt in choice.attempts:
        assert {m.uid for m in attempt} <= {m.uid for m in unbound}
        planned = Counter(m.task for m in [*bound, *attempt])
        for task, minimum in minimums.items():
            assert planned[task] >= minimum
        assert len(bound) + len(attempt) >= min_member
    if not unbound:
        assert choice.attempts == ((),)
        return
    # The fewest: each task's missing members, or minMember's (at least one), whichever
    # is more; tried second only when smaller than every unbound member.
    bound_by_task = Counter(m.task for m in bound)
    needed_by_tasks = sum(max(0, n - bound_by_task[t]) for t, n in minimums.items())
    fewest = max(needed_by_tasks, 1, min_member - len(bound))
    assert [len(a) for a in choice.attempts] == sorted({len(unbound), fewest}, reverse=True)


@given(
    members_st,
    minimums_st,
    st.integers(min_value=1, max_value=9),
    node_gpus_st,
    st.sampled_from([Policy(), Policy(name="spread", strategy=Strategy.SPREAD)]),
)
@settings(max_examples=400, deadline=None)
def test_a_plan_meets_every_task_minimum_and_minmember_and_never_overcommits(
    shapes, minimums, min_member, node_gpus, policy
) -> None:
    if sum(minimums.values()) > min_member:
        min_member = sum(minimums.values())  # else the spec is refused (unit-tested)
    nodes, members = build(shapes, node_gpus)
    core = make_core(policy=policy)
    for node in nodes.values():
        core.apply_node(node)
    for pod in members:
        core.observe_pod(pod, 0.0)
    core.apply_group_spec(
        GroupSpec.from_podgroup(
            make_podgroup("g", min_member, minTaskMember=minimums), source="PodGroup"
        )
    )
    unbound = [m for m in members if not m.is_bound]
    for pod in unbound:
        decision = core.filter(pod, list(nodes), 1.0)
        assert decision.verdict in (Verdict.PLANNED, Verdict.WAIT)
    plan = core.ledger.plans.get(KEY)
    if plan is None:
        message = core.groups[KEY].message if KEY in core.groups else ""
        exist = Counter(m.task for m in members)
        if any(exist[t] < n for t, n in minimums.items()) or len(members) < min_member:
            assert "members exist" in message or not unbound
        return
    planned = [core.snapshot.pods[uid] for uid in plan.placements]
    assert not any(m.is_bound for m in planned)
    with_bound = Counter(m.task for m in members if m.is_bound) + Counter(m.task for m in planned)
    for task, minimum in minimums.items():
        assert with_bound[task] >= minimum, (task, with_bound)
    assert sum(1 for m in members if m.is_bound) + len(planned) >= min_member
    # Never over-commit: bound pods plus reservations within allocatable on every node.
    for name, node in nodes.items():
        used = core.snapshot.used(name).get(GPU, 0)
        assert used + core.ledger.reserved(name).get(GPU, 0) <= node.allocatable.get(GPU, 0)
