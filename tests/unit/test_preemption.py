"""Gang preemption: victim choice (pure), the core's hold, kube-scheduler's victims made
whole-gang, and a preempted member not counted as a lifecycle failure."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from extender.domain.cluster.snapshot import fits
from extender.domain.gang.gang import GangCore, Timeouts
from extender.domain.lifecycle.lifecycle import Member, _failure_of
from extender.domain.objects.membership import GroupKey
from extender.domain.objects.model import GroupSpec, NodeInfo, PodInfo
from extender.domain.planning.node_fit import NodeRestriction
from extender.domain.preemption.preemption import (
    PREEMPTED_BY_ANNOTATION,
    SCHEDULER_PREEMPTION_REASON,
    EvictionRefusal,
    NodeVictims,
    VictimUnit,
    candidates,
    choose_victims,
    free_without,
    gang_aware_victims,
    rest_of_preempted_gang,
    victim_units,
)
from extender.domain.state.decisions import EvictVictims, PlanCreated, PlanDropped, Verdict
from tests.builders import make_node, make_pod, make_podgroup
from tests.core_builder import make_core

T0 = 1_000_000.0
GPU = "nvidia.com/gpu"


def pod(
    name: str,
    *,
    gpus: int = 1,
    node: str | None = None,
    group: str | None = None,
    priority: int = 0,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    builder = make_pod(name).gpus(gpus).priority(priority)
    if node is not None:
        builder = builder.node(node).phase("Running")
    if group is not None:
        builder = builder.group(group)
    for k, v in (annotations or {}).items():
        builder = builder.annotation(k, v)
    obj = builder.obj()
    obj["metadata"]["uid"] = f"uid-{name}"
    return obj


def core_with(
    nodes: dict[str, int], pods: list[dict[str, Any]], groups: dict[str, dict[str, Any]]
) -> GangCore:
    podgroups = []
    for name, spec in groups.items():
        pg = make_podgroup(name, spec.pop("minMember"))
        pg["spec"].update(spec)
        podgroups.append(pg)
    core = make_core(
        [make_node(name).gpus(gpus).obj() for name, gpus in nodes.items()],
        pods,
        podgroups,
        timeouts=Timeouts(60, 30, 2, preemption_hold_seconds=120),
        preemption=True,
        now=T0,
    )
    core.drain_effects()
    return core


def low_gang_running(preemptible: bool = True) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    pods = [pod(f"low-{i}", node=f"n{i}", group="low", priority=10) for i in range(2)]
    spec: dict[str, Any] = {"minMember": 2}
    if not preemptible:
        spec["preemptible"] = False
    return pods, spec


def high_gang(size: int = 2, **kw: Any) -> list[dict[str, Any]]:
    return [pod(f"high-{i}", group="high", priority=1000, **kw) for i in range(size)]


def ask(core: GangCore, name: str) -> Verdict:
    member = next(p for p in core.snapshot.pods.values() if p.name == name)
    return core.filter(member, sorted(core.snapshot.nodes), T0).verdict


def high_gang_waiting_on_low_and_plain() -> GangCore:
    """The low gang runs on n0 and n1 (1 GPU each), a plain pod of priority 0 on n2
    (1 of its 2 GPUs); the high gang of two 1-GPU members waits."""
    low, low_spec = low_gang_running()
    return core_with(
        {"n0": 1, "n1": 1, "n2": 2},
        [*low, pod("plain", node="n2", priority=0), *high_gang()],
        {"low": low_spec, "high": {"minMember": 2}},
    )


def evicted_refs(core: GangCore) -> list[str]:
    """The pods the core's pending effects evict (drained), in order."""
    return [v.ref for e in core.drain_effects() if isinstance(e, EvictVictims) for v in e.victims]


def low_gang_with_low_0_preempted_by_kube_scheduler() -> tuple[GangCore, dict[str, Any]]:
    """The low gang runs on n0 and n1; kube-scheduler's preemption then marks low-0
    (its DisruptionTarget condition), as the watch delivers it. The core and low-0."""
    low, low_spec = low_gang_running()
    core = core_with({"n0": 1, "n1": 1}, low, {"low": low_spec})
    preempted = pod("low-0", node="n0", group="low", priority=10)
    preempted["status"]["conditions"] = [
        {"type": "DisruptionTarget", "status": "True", "reason": SCHEDULER_PREEMPTION_REASON}
    ]
    core.observe_pod(PodInfo.from_api(preempted), T0)
    return core, preempted


# ----------------------------------------------------------------- the core
def test_a_high_gang_that_fits_only_by_evicting_a_low_gang_evicts_it_whole_and_holds_the_room() -> (
    None
):
    low, low_spec = low_gang_running()
    core = core_with(
        {"n0": 1, "n1": 1}, [*low, *high_gang()], {"low": low_spec, "high": {"minMember": 2}}
    )
    assert ask(core, "high-0") is Verdict.PLANNED
    effects = core.drain_effects()
    evictions = [e for e in effects if isinstance(e, EvictVictims)]
    assert len(evictions) == 1
    assert sorted(v.ref for v in evictions[0].victims) == ["default/low-0", "default/low-1"]
    assert {v.unit for v in evictions[0].victims} == {"gang default/low"}
    assert evictions[0].preemptor == "gang default/high (priority 1000)"
    plan = next(e.plan for e in effects if isinstance(e, PlanCreated))
    assert plan.group == GroupKey("default", "high")
    assert plan.deadline == T0 + 120  # the hold's expiry
    assert "preempting gang default/low (priority 10)" in core.groups[plan.group].message
    # The hold: a plain pod of this scheduler may not take the freed GPU.
    plain = PodInfo.from_api(pod("plain", priority=5000))
    decision = core.filter(plain, ["n0", "n1"], T0)
    assert decision.nodes == []
    assert "reserved for gang default/high" in decision.failed["n0"]


def test_a_gang_that_opted_out_is_never_preempted() -> None:
    low, low_spec = low_gang_running(preemptible=False)
    core = core_with(
        {"n0": 1, "n1": 1}, [*low, *high_gang()], {"low": low_spec, "high": {"minMember": 2}}
    )
    assert ask(core, "high-0") is Verdict.WAIT
    assert not [e for e in core.drain_effects() if isinstance(e, EvictVictims)]


def test_the_annotation_form_opts_a_gang_out_too() -> None:
    low = [
        pod(
            f"low-{i}",
            node=f"n{i}",
            group="low",
            priority=10,
            annotations={"gang-extender.io/preemptible": "false"},
        )
        for i in range(2)
    ]
    core = core_with(
        {"n0": 1, "n1": 1},
        [*low, *high_gang()],
        {"low": {"minMember": 2}, "high": {"minMember": 2}},
    )
    assert not core.preemption.group_preemptible(GroupKey("default", "low"))
    assert ask(core, "high-0") is Verdict.WAIT


def test_preemption_policy_never_keeps_the_gang_waiting() -> None:
    low, low_spec = low_gang_running()
    high = high_gang()
    for p in high:
        p["spec"]["preemptionPolicy"] = "Never"
    core = core_with({"n0": 1, "n1": 1}, [*low, *high], {"low": low_spec, "high": {"minMember": 2}})
    assert ask(core, "high-0") is Verdict.WAIT
    assert not [e for e in core.drain_effects() if isinstance(e, EvictVictims)]


def test_an_equal_priority_gang_is_not_a_victim() -> None:
    low = [pod(f"low-{i}", node=f"n{i}", group="low", priority=1000) for i in range(2)]
    core = core_with(
        {"n0": 1, "n1": 1},
        [*low, *high_gang()],
        {"low": {"minMember": 2}, "high": {"minMember": 2}},
    )
    assert ask(core, "high-0") is Verdict.WAIT


def test_preemption_off_leaves_the_gang_waiting() -> None:
    low, low_spec = low_gang_running()
    core = core_with(
        {"n0": 1, "n1": 1}, [*low, *high_gang()], {"low": low_spec, "high": {"minMember": 2}}
    )
    core.preemption_enabled = False
    assert ask(core, "high-0") is Verdict.WAIT


def test_a_refused_eviction_leaves_that_unit_out_until_it_expires() -> None:
    core = high_gang_waiting_on_low_and_plain()
    # n2 has one GPU free: the plain pod (priority 0) is the lowest, fewest victim.
    core.eviction_refused("pod default/plain", T0, preemptor=None, **BUDGET)
    assert ask(core, "high-0") is Verdict.PLANNED
    evicted = evicted_refs(core)
    assert "default/plain" not in evicted
    assert sorted(evicted) == ["default/low-0", "default/low-1"]


def test_the_lowest_and_fewest_victims_are_chosen() -> None:
    core = high_gang_waiting_on_low_and_plain()
    assert ask(core, "high-0") is Verdict.PLANNED
    evicted = evicted_refs(core)
    assert evicted == ["default/plain"]


def test_kube_scheduler_preempting_a_member_evicts_the_rest_of_its_gang() -> None:
    core, preempted = low_gang_with_low_0_preempted_by_kube_scheduler()
    evictions = [e for e in core.drain_effects() if isinstance(e, EvictVictims)]
    assert [[v.ref for v in e.victims] for e in evictions] == [["default/low-1"]]
    # Seen again (another status update): not asked twice.
    core.observe_pod(PodInfo.from_api(preempted), T0 + 1)
    assert not [e for e in core.drain_effects() if isinstance(e, EvictVictims)]


# ----------------------------------------------------- the preempt verb's answer
def infos(*objs: dict[str, Any]) -> dict[str, PodInfo]:
    return {o["metadata"]["uid"]: PodInfo.from_api(o) for o in objs}


@pytest.mark.parametrize(
    ("situation", "proposed", "kept", "dropped"),
    [
        pytest.param(
            "a gang on one node is widened to its members there",
            {"n1": ["uid-a-0"]},
            {"n1": ("uid-a-0", "uid-a-1")},
            [],
            id="widened-on-node",
        ),
        pytest.param(
            "a node whose victims are plain pods is kept, a split gang's node dropped",
            {"n1": ["uid-a-0"], "n2": ["uid-p"], "n3": ["uid-b-0"]},
            {"n1": ("uid-a-0", "uid-a-1"), "n2": ("uid-p",)},
            ["n3"],
            id="prefer-whole",
        ),
        pytest.param(
            "only split gangs: kept, the controller evicts the rest",
            {"n3": ["uid-b-0"]},
            {"n3": ("uid-b-0",)},
            [],
            id="split-kept",
        ),
        pytest.param(
            "a gang that opted out drops its node",
            {"n1": ["uid-a-0"], "n5": ["uid-c-0"]},
            {"n1": ("uid-a-0", "uid-a-1")},
            ["n5"],
            id="opted-out",
        ),
        pytest.param(
            "a gang not of lower priority drops its node",
            {"n6": ["uid-d-0"]},
            {},
            ["n6"],
            id="not-lower",
        ),
    ],
)
def test_kube_schedulers_victims_are_made_whole_gang(
    situation: str,
    proposed: dict[str, list[str]],
    kept: dict[str, tuple[str, ...]],
    dropped: list[str],
) -> None:
    pods = infos(
        pod("a-0", node="n1", group="a"),
        pod("a-1", node="n1", group="a"),
        pod("p", node="n2"),
        pod("b-0", node="n3", group="b"),
        pod("b-1", node="n4", group="b"),
        pod("c-0", node="n5", group="c"),
        pod("d-0", node="n6", group="d", priority=500),
    )
    preemptor = PodInfo.from_api(pod("plain-high", priority=500))

    def members_of(key: GroupKey) -> list[PodInfo]:
        return [p for p in pods.values() if p.group == key]

    answer = gang_aware_victims(
        preemptor,
        {n: NodeVictims(tuple(u)) for n, u in proposed.items()},
        pods,
        members_of,
        lambda key: key.name != "c",
        disrupted_whole=lambda key: True,
    )
    assert {n: v.uids for n, v in answer.nodes.items()} == kept, situation
    assert sorted(answer.dropped) == dropped, situation


def test_a_gang_member_asking_kube_scheduler_to_preempt_gets_no_node() -> None:
    preemptor = PodInfo.from_api(pod("high-0", group="high", priority=1000))
    answer = gang_aware_victims(
        preemptor,
        {"n1": NodeVictims(("uid-x",))},
        {},
        lambda key: [],
        lambda key: True,
        disrupted_whole=lambda key: True,
    )
    assert answer.nodes == {}
    assert "gang-extender preempts for whole gangs itself" in answer.dropped["n1"]


def test_the_verb_passes_victims_through_when_preemption_is_off() -> None:
    core = core_with({"n0": 1}, [], {})
    core.preemption_enabled = False
    proposed = {"n0": NodeVictims(("uid-x",), 1)}
    answer = core.preempt(PodInfo.from_api(pod("x", priority=5)), proposed, T0)
    assert answer.nodes == proposed


def test_a_gang_member_asking_through_the_verb_gets_its_gang_tried_whole() -> None:
    low, low_spec = low_gang_running()
    core = core_with(
        {"n0": 1, "n1": 1}, [*low, *high_gang()], {"low": low_spec, "high": {"minMember": 2}}
    )
    member = next(p for p in core.snapshot.pods.values() if p.name == "high-0")
    answer = core.preempt(member, {"n0": NodeVictims(("uid-low-0",))}, T0)
    assert answer.nodes == {}
    evictions = [e for e in core.drain_effects() if isinstance(e, EvictVictims)]
    assert sorted(v.ref for e in evictions for v in e.victims) == ["default/low-0", "default/low-1"]


# ----------------------------------------------------------- pure pieces
def unit(name: str, priority: int, *gpus_on: str, group: bool = True) -> VictimUnit:
    pods = tuple(
        PodInfo.from_api(
            pod(f"{name}-{i}", node=node, group=name if group else None, priority=priority)
        )
        for i, node in enumerate(gpus_on)
    )
    return VictimUnit(pods, priority, group=GroupKey("default", name) if group else None)


def test_candidates_are_lower_priority_preemptible_and_not_refused_lowest_first() -> None:
    units = [
        unit("b", 5, "n1"),
        unit("a", 1, "n1", "n2"),
        unit("same", 10, "n1"),
        VictimUnit(
            unit("out", 0, "n1").pods, 0, group=GroupKey("default", "out"), preemptible=False
        ),
        unit("refused", 0, "n1"),
    ]
    chosen = candidates(units, priority=10, refused=["gang default/refused"])
    assert [u.key for u in chosen] == ["gang default/a", "gang default/b"]


def test_choose_victims_keeps_only_what_the_plan_needs() -> None:
    # Needs 2 GPUs on one node (n1). The low unit on n2 is tried first and is useless.
    units = [unit("useless", 0, "n2"), unit("needed", 1, "n1", "n1")]

    def fits_two_on_n1(free: Any) -> bool:
        return fits({GPU: 2}, free["n1"])

    found = choose_victims(fits_two_on_n1, {"n1": {GPU: 0}, "n2": {GPU: 0}}, units, priority=5)
    assert found is not None
    assert [u.key for u in found.victims] == ["gang default/needed"]
    assert found.freed["n1"][GPU] == 2


def test_choose_victims_is_none_when_nothing_evictable_makes_room() -> None:
    found = choose_victims(
        lambda free: fits({GPU: 4}, free["n1"]),
        {"n1": {GPU: 0}},
        [unit("small", 0, "n1")],
        priority=5,
    )
    assert found is None


def test_victim_units_group_a_gangs_bound_members_and_skip_deleting_and_unbound() -> None:
    objs = [
        pod("g-0", node="n1", group="g"),
        pod("g-1", node="n2", group="g"),
        pod("g-2", group="g"),
        pod("p", node="n1"),
    ]
    gone = pod("q", node="n1")
    gone["metadata"]["deletionTimestamp"] = "2026-11-22T10:00:00Z"
    units = victim_units(
        [PodInfo.from_api(o) for o in [*objs, gone]],
        preemptible=lambda k: True,
        disrupted_whole=lambda k: True,
    )
    assert sorted((u.key, len(u.pods)) for u in units) == [
        ("gang default/g", 2),
        ("pod default/p", 1),
    ]


def test_rest_of_a_preempted_gang_skips_what_is_already_going() -> None:
    members = [PodInfo.from_api(pod(f"g-{i}", node="n1", group="g")) for i in range(3)]
    rest = rest_of_preempted_gang(members, {"uid-g-0"})
    assert [m.name for m in rest] == ["g-1", "g-2"]


def test_podgroup_preemptible_must_be_a_boolean() -> None:
    pg = make_podgroup("x", 1)
    pg["spec"]["preemptible"] = "no"
    spec = GroupSpec.from_podgroup(pg, source="PodGroup")
    assert spec.error == "PodGroup spec.preemptible='no' must be true or false"


# ------------------------------------------------------------- lifecycle
def evicted_member(reason: str, annotations: dict[str, str] | None = None) -> Member:
    obj = pod("m", node="n1", group="g", annotations=annotations)
    obj["status"]["conditions"] = [{"type": "DisruptionTarget", "status": "True", "reason": reason}]
    return Member.from_api(obj)


@pytest.mark.parametrize(
    ("member", "failure"),
    [
        pytest.param(evicted_member(SCHEDULER_PREEMPTION_REASON), False, id="kube-scheduler"),
        pytest.param(
            evicted_member("EvictionByEvictionAPI", {PREEMPTED_BY_ANNOTATION: "gang default/high"}),
            False,
            id="gang-preemption",
        ),
        pytest.param(evicted_member("EvictionByEvictionAPI"), True, id="a-drain-still-is"),
    ],
)
def test_a_preempted_member_is_no_lifecycle_failure(member: Member, failure: bool) -> None:
    assert (_failure_of(member) is not None) is failure


def test_a_refused_eviction_drops_the_hold_and_the_gang_chooses_again_without_that_unit() -> None:
    core = high_gang_waiting_on_low_and_plain()
    assert ask(core, "high-0") is Verdict.PLANNED
    core.drain_effects()
    high = GroupKey("default", "high")
    core.eviction_refused("pod default/plain", T0, preemptor=high, **BUDGET)
    assert high not in core.ledger.plans
    assert "the eviction of pod default/plain was refused" in core.groups[high].message
    later = T0 + 3  # after the replan backoff
    member = next(p for p in core.snapshot.pods.values() if p.name == "high-0")
    assert core.filter(member, sorted(core.snapshot.nodes), later).verdict is Verdict.PLANNED
    evicted = sorted(evicted_refs(core))
    assert evicted == ["default/low-0", "default/low-1"]


# ------------------------------------- what the first mutation run left alive
def test_of_two_equal_units_the_newer_is_evicted() -> None:
    older = make_pod("older").gpus(1).node("n1").phase("Running").created("2026-11-22T09:00:00Z")
    newer = make_pod("newer").gpus(1).node("n2").phase("Running").created("2026-11-22T10:00:00Z")
    units = [
        VictimUnit((PodInfo.from_api(older.obj()),), 0),
        VictimUnit((PodInfo.from_api(newer.obj()),), 0),
    ]
    found = choose_victims(
        lambda free: free["n1"][GPU] + free["n2"][GPU] >= 1,
        {"n1": {GPU: 0}, "n2": {GPU: 0}},
        units,
        priority=5,
    )
    assert found is not None
    assert [u.key for u in found.victims] == ["pod default/newer"]


def test_a_gang_that_fits_already_needs_no_victims() -> None:
    free = {"n1": {GPU: 2}}
    found = choose_victims(
        lambda f: fits({GPU: 2}, f["n1"]), free, [unit("x", 0, "n1")], priority=5
    )
    assert found is not None
    assert found.victims == ()
    assert found.freed == free and found.freed is not free


def test_minimising_spares_the_highest_priority_victim_first() -> None:
    # Needs one GPU on n3 and one more anywhere: greedy takes u1, u2, u3; both {u1, u3}
    # and {u2, u3} would do, and the lower-priority u1 is the one kept.
    units = [unit("u1", 0, "n1"), unit("u2", 1, "n2"), unit("u3", 2, "n3")]

    def fits_it(free: Any) -> bool:
        return free["n3"][GPU] >= 1 and sum(r[GPU] for r in free.values()) >= 2

    nothing = {n: {GPU: 0} for n in ("n1", "n2", "n3")}
    found = choose_victims(fits_it, nothing, units, priority=5)
    assert found is not None
    assert [u.key for u in found.victims] == ["gang default/u1", "gang default/u3"]
    assert found.describe() == "gang default/u1 (priority 0), gang default/u3 (priority 2)"


def test_a_victim_on_a_node_that_is_gone_frees_nothing() -> None:
    after = free_without({"n1": {GPU: 0}}, [unit("g", 0, "n1", "gone")])
    assert after["n1"][GPU] == 1
    assert set(after) == {"n1"}


def test_a_pending_member_does_not_make_a_gang_run_elsewhere() -> None:
    pods = infos(
        pod("a-0", node="n1", group="a"),
        pod("a-1", group="a"),  # created, not bound yet
        pod("p", node="n2"),
    )

    def members_of(key: GroupKey) -> list[PodInfo]:
        return [p for p in pods.values() if p.group == key]

    answer = gang_aware_victims(
        PodInfo.from_api(pod("urgent", priority=500)),
        {"n1": NodeVictims(("uid-a-0",)), "n2": NodeVictims(("uid-p",))},
        pods,
        members_of,
        lambda key: True,
        disrupted_whole=lambda key: True,
    )
    assert sorted(answer.nodes) == ["n1", "n2"]


def test_dropped_nodes_say_why() -> None:
    pods = infos(
        pod("b-0", node="n3", group="b"),
        pod("b-1", node="n4", group="b"),
        pod("c-0", node="n5", group="c"),
        pod("p", node="n2"),
    )

    def members_of(key: GroupKey) -> list[PodInfo]:
        return [p for p in pods.values() if p.group == key]

    answer = gang_aware_victims(
        PodInfo.from_api(pod("urgent", priority=500)),
        {n: NodeVictims((u,)) for n, u in [("n2", "uid-p"), ("n3", "uid-b-0"), ("n5", "uid-c-0")]},
        pods,
        members_of,
        lambda key: key.name != "c",
        disrupted_whole=lambda key: True,
    )
    assert answer.dropped == {
        "n3": "its victims include part of a gang running on other nodes too",
        "n5": "gang default/c opted out of preemption (preemptible: false)",
    }


# ------------------------------------- what the mutation run left alive in the core
def test_the_hold_is_a_whole_plan_and_the_eviction_names_the_preemptor() -> None:
    low, low_spec = low_gang_running()
    core = core_with(
        {"n0": 1, "n1": 1}, [*low, *high_gang()], {"low": low_spec, "high": {"minMember": 2}}
    )
    assert ask(core, "high-0") is Verdict.PLANNED
    effects = core.drain_effects()
    plan = next(e.plan for e in effects if isinstance(e, PlanCreated))
    high = GroupKey("default", "high")
    assert plan.created_at == T0
    assert sorted(plan.names.values()) == ["default/high-0", "default/high-1"]
    assert plan.plan_id == core.ledger.plans[high].plan_id
    state = core.groups[high]
    assert state.waiting is False and state.shortfall_generation is None
    eviction = next(e for e in effects if isinstance(e, EvictVictims))
    assert eviction.group == high
    assert eviction.message == state.message
    assert core.preemption.evicting == {"uid-low-0", "uid-low-1"}


def test_a_refusal_ends_exactly_at_its_time() -> None:
    low, low_spec = low_gang_running()
    core = core_with(
        {"n0": 1, "n1": 1}, [*low, *high_gang()], {"low": low_spec, "high": {"minMember": 2}}
    )
    core.eviction_refused("gang default/low", T0 - 120, preemptor=None, **BUDGET)  # until T0
    assert ask(core, "high-0") is Verdict.PLANNED


def test_a_required_topology_is_kept_when_choosing_victims() -> None:
    # Zone a: n0 (low gang), n1 (plain p1); zone b: n2 (low gang), n3 (plain p2). The
    # two plain pods alone would free one GPU in each zone: not enough inside one.
    core = make_core()
    core.preemption_enabled = True
    for name, zone in (("n0", "a"), ("n1", "a"), ("n2", "b"), ("n3", "b")):
        node = make_node(name).gpus(1).label("zone", zone).obj()
        core.apply_node(NodeInfo.from_api(node))
    pg = make_podgroup("high", 2)
    pg["spec"]["topology"] = {"required": "zone"}
    core.apply_group_spec(GroupSpec.from_podgroup(pg, source="PodGroup"))
    core.apply_group_spec(GroupSpec.from_podgroup(make_podgroup("low", 2), source="PodGroup"))
    running = [
        pod("low-0", node="n0", group="low", priority=10),
        pod("low-1", node="n2", group="low", priority=10),
        pod("p1", node="n1"),
        pod("p2", node="n3"),
    ]
    for obj in [*running, *high_gang()]:
        core.observe_pod(PodInfo.from_api(obj), T0)
    core.drain_effects()
    assert ask(core, "high-0") is Verdict.PLANNED
    effects = core.drain_effects()
    plan = next(e.plan for e in effects if isinstance(e, PlanCreated))
    zones = {core.snapshot.nodes[n].labels["zone"] for n in plan.placements.values()}
    assert len(zones) == 1
    evicted = {v.ref for e in effects if isinstance(e, EvictVictims) for v in e.victims}
    assert {"default/low-0", "default/low-1"} <= evicted


def test_the_verb_asks_about_the_cached_pod_and_a_plain_one_joins_no_queue() -> None:
    low, low_spec = low_gang_running()
    core = core_with(
        {"n0": 1, "n1": 1}, [*low, *high_gang()], {"low": low_spec, "high": {"minMember": 2}}
    )
    stripped = PodInfo.from_api(pod("high-0", priority=1000))  # the request without its labels
    answer = core.preempt(stripped, {"n0": NodeVictims(("uid-low-0",))}, T0)
    assert answer.nodes == {}, "the watch's copy says it is a gang member"
    plain = PodInfo.from_api(pod("plain", priority=5000))
    core.observe_pod(plain, T0)
    before = set(core.groups)
    answer = core.preempt(plain, {}, T0)
    assert set(core.groups) == before
    assert answer.dropped == {}
    core.preemption_enabled = False
    assert core.preempt(plain, {}, T0).dropped == {}


def test_kube_schedulers_preemption_completion_says_who_and_which_gang() -> None:
    core, _ = low_gang_with_low_0_preempted_by_kube_scheduler()
    (eviction,) = [e for e in core.drain_effects() if isinstance(e, EvictVictims)]
    assert eviction.group == GroupKey("default", "low")
    assert eviction.preemptor == "kube-scheduler's preemption of default/low-0"
    assert [v.unit for v in eviction.victims] == ["gang default/low"]
    assert [(v.uid, v.ref) for v in eviction.victims] == [("uid-low-1", "default/low-1")]
    assert eviction.message == ""


# ---- where the preemptor may go: kube-scheduler's word and the gang's bound members ----

ZONE = "topology.kubernetes.io/zone"


def labelled_core(nodes: dict[str, tuple[int, str]], pods: list[dict[str, Any]]) -> GangCore:
    """`nodes`: name -> (GPUs, zone)."""
    core = core_with({}, [], {})
    for name, (gpus, zone) in nodes.items():
        core.apply_node(NodeInfo.from_api(make_node(name).gpus(gpus).label(ZONE, zone).obj()))
    for p in pods:
        core.observe_pod(PodInfo.from_api(p), T0)
    core.drain_effects()
    return core


def planned_nodes(core: GangCore) -> dict[str, str]:
    plan = core.ledger.plans[GroupKey("default", "high")]
    return {plan.names[uid]: node for uid, node in plan.placements.items()}


def test_a_preemptor_evicts_only_on_the_nodes_kube_scheduler_allows_and_is_planned_there() -> None:
    # n0's pod is the cheapest victim and n2 has a free GPU (binpack's choice once n1
    # is freed), but kube-scheduler's own filters left only n1 for high-0 (say, its
    # nodeSelector): the victim is n1's, and so is the plan.
    core = labelled_core(
        {"n0": (1, "a"), "n1": (2, "a"), "n2": (2, "a")},
        [
            pod("cheap", node="n0", priority=1),
            pod("dear", gpus=2, node="n1", priority=5),
            pod("keeper", node="n2", priority=5000),
            pod("high-0", group="high", priority=1000),
        ],
    )
    core.apply_group_spec(GroupSpec.from_podgroup(make_podgroup("high", 1), source="PodGroup"))
    member = core.snapshot.pods["uid-high-0"]
    assert core.filter(member, ["n1"], T0).verdict is Verdict.PLANNED
    assert evicted_refs(core) == ["default/dear"]
    assert planned_nodes(core) == {"default/high-0": "n1"}


def test_a_preemptor_with_a_bound_member_evicts_and_is_planned_in_that_members_zone() -> None:
    # high-0 is bound in zone a; the gang must stay in one zone. Zone b has the
    # cheapest victim and a free GPU (binpack's choice once a1 is freed), so only zone
    # a's victim (on a1) makes it fit, and the plan is there.
    core = labelled_core(
        {"a0": (1, "a"), "a1": (2, "a"), "b0": (1, "b"), "b1": (2, "b")},
        [
            pod("high-0", group="high", node="a0", priority=1000),
            pod("in-a", gpus=2, node="a1", priority=5),
            pod("in-b", node="b0", priority=1),
            pod("keeper", node="b1", priority=5000),
            pod("high-1", group="high", priority=1000),
        ],
    )
    pg = make_podgroup("high", 2)
    pg["spec"]["topology"] = {"required": ZONE}
    core.apply_group_spec(GroupSpec.from_podgroup(pg, source="PodGroup"))
    member = core.snapshot.pods["uid-high-1"]
    assert core.filter(member, sorted(core.snapshot.nodes), T0).verdict is Verdict.PLANNED
    assert evicted_refs(core) == ["default/in-a"]
    assert planned_nodes(core) == {"default/high-1": "a1"}


def test_when_evicting_cannot_fit_every_member_the_fewest_that_meet_min_member_preempt() -> None:
    # minMember 1 of 2 members: no eviction makes room for both, evicting low makes
    # room for one, so the plan takes one member.
    core = core_with(
        {"n0": 1},
        [pod("low", node="n0", priority=1), *high_gang(2)],
        {"high": {"minMember": 1}},
    )
    assert ask(core, "high-0") is Verdict.PLANNED
    assert evicted_refs(core) == ["default/low"]
    assert list(planned_nodes(core).values()) == ["n0"]


def test_a_starving_gang_that_then_preempts_ends_its_reservation() -> None:
    # Nothing lower ran while high starved, so it reserved n0; then a node joins with a
    # low pod on it, which high evicts: the hold replaces the reservation.
    core = core_with(
        {"n0": 2},
        [pod("busy", gpus=2, node="n0", priority=1000), *high_gang()],
        {"high": {"minMember": 2, "starvationSeconds": 5}},
    )
    high = GroupKey("default", "high")
    assert ask(core, "high-0") is Verdict.WAIT
    core.expire(T0 + 6)
    assert core.starvation.reservations[high].nodes == ("n0",)
    core.apply_node(NodeInfo.from_api(make_node("n1").gpus(2).obj()))
    core.observe_pod(PodInfo.from_api(pod("low", gpus=2, node="n1", priority=1)), T0 + 7)
    member = core.snapshot.pods["uid-high-1"]
    assert core.filter(member, ["n0", "n1"], T0 + 7).verdict is Verdict.PLANNED
    assert evicted_refs(core) == ["default/low"]
    assert high not in core.starvation.reservations


def test_victims_once_gone_are_not_remembered_as_being_evicted() -> None:
    # `evicting` grows with every eviction; a victim the watch saw deleted leaves it,
    # so a long-running service does not keep every uid it ever evicted.
    low, low_spec = low_gang_running()
    core = core_with(
        {"n0": 1, "n1": 1}, [*low, *high_gang()], {"low": low_spec, "high": {"minMember": 2}}
    )
    assert ask(core, "high-0") is Verdict.PLANNED
    assert core.preemption.evicting == {"uid-low-0", "uid-low-1"}
    for uid in ("uid-low-0", "uid-low-1"):
        core.forget_pod(uid, T0 + 1)
    assert core.preemption.evicting == set()


BUDGET: dict[str, Any] = {"refusal": EvictionRefusal.BUDGET, "why": "a PodDisruptionBudget"}


def test_a_forbidden_eviction_leaves_the_unit_out_longer_than_a_budget_refusal() -> None:
    """Issue 30, finding 4: a victim the service may not mark or evict (403, no
    RoleBinding in its namespace) is not chosen again after every hold expiry."""
    low, low_spec = low_gang_running()
    core = core_with(
        {"n0": 1, "n1": 1}, [*low, *high_gang()], {"low": low_spec, "high": {"minMember": 2}}
    )
    assert ask(core, "high-0") is Verdict.PLANNED
    core.drain_effects()
    high = GroupKey("default", "high")
    core.eviction_refused(
        "gang default/low",
        T0,
        preemptor=high,
        refusal=EvictionRefusal.FORBIDDEN,
        why="status 403 Forbidden",
    )
    assert high not in core.ledger.plans, "the hold on the victims' nodes is dropped at once"
    assert "status 403 Forbidden" in core.groups[high].message
    member = next(p for p in core.snapshot.pods.values() if p.name == "high-0")
    nodes = sorted(core.snapshot.nodes)
    # Past the hold a budget refusal would last: still left out, the gang waits.
    after_hold = T0 + core.timeouts.preemption_hold_seconds + 1
    assert core.filter(member, nodes, after_hold).verdict is Verdict.WAIT
    assert not [e for e in core.drain_effects() if isinstance(e, EvictVictims)]
    assert high not in core.ledger.plans, "no node is held for a victim that cannot go"
    # Once the forbidden time is over it is tried again (the RoleBinding may exist now).
    later = T0 + core.timeouts.preemption_forbidden_seconds + 1
    assert core.filter(member, nodes, later).verdict is Verdict.PLANNED


def test_only_units_refused_lately_are_remembered() -> None:
    core = high_gang_waiting_on_low_and_plain()
    core.eviction_refused("pod default/plain", T0, preemptor=None, **BUDGET)
    later = T0 + core.timeouts.preemption_hold_seconds + 1
    core.eviction_refused("gang default/low", later, preemptor=None, **BUDGET)
    assert list(core.preemption.refused_evictions) == ["gang default/low"]


# ---- disruptionMode: a gang whose members may be disrupted one at a time ----


def single_mode_low_gang(nodes: dict[str, int], extra: list[dict[str, Any]]) -> GangCore:
    """The low gang (upstream disruptionMode Single: `disrupted_whole` false) runs on n0
    and n1, 1 GPU each, beside `extra` pods."""
    low, _ = low_gang_running()
    core = core_with(nodes, [*low, *extra], {})
    core.apply_group_spec(
        GroupSpec(
            key=GroupKey("default", "low"), min_member=2, source="PodGroup", disrupted_whole=False
        )
    )
    core.drain_effects()
    return core


def test_victim_units_split_a_gang_disrupted_one_member_at_a_time() -> None:
    members = [PodInfo.from_api(pod(f"g-{i}", node="n1", group="g")) for i in range(2)]
    units = victim_units(members, preemptible=lambda k: True, disrupted_whole=lambda k: False)
    assert sorted(u.key for u in units) == ["pod default/g-0", "pod default/g-1"]
    assert {u.group for u in units} == {GroupKey("default", "g")}  # still the gang's
    whole = victim_units(members, preemptible=lambda k: True, disrupted_whole=lambda k: True)
    assert [u.key for u in whole] == ["gang default/g"]


def test_a_high_gang_needing_one_gpu_evicts_one_member_of_a_single_mode_gang() -> None:
    core = single_mode_low_gang({"n0": 1, "n1": 1}, high_gang(1))
    core.apply_group_spec(
        GroupSpec(key=GroupKey("default", "high"), min_member=1, source="PodGroup")
    )
    assert ask(core, "high-0") is Verdict.PLANNED
    evicted = [
        v.ref for e in core.drain_effects() if isinstance(e, EvictVictims) for v in e.victims
    ]
    assert len(evicted) == 1 and evicted[0] in {"default/low-0", "default/low-1"}


def test_kube_schedulers_preemption_of_a_single_mode_member_leaves_the_rest_running() -> None:
    core = single_mode_low_gang({"n0": 1, "n1": 1}, [])
    preempted = pod("low-0", node="n0", group="low", priority=10)
    preempted["status"]["conditions"] = [
        {"type": "DisruptionTarget", "status": "True", "reason": SCHEDULER_PREEMPTION_REASON}
    ]
    core.observe_pod(PodInfo.from_api(preempted), T0)
    assert [e for e in core.drain_effects() if isinstance(e, EvictVictims)] == []


def test_kube_schedulers_victims_in_a_single_mode_gang_are_not_made_whole() -> None:
    pods = infos(pod("a-0", node="n1", group="a"), pod("a-1", node="n2", group="a"))
    preemptor = PodInfo.from_api(pod("plain-high", priority=500))
    answer = gang_aware_victims(
        preemptor,
        {"n1": NodeVictims(("uid-a-0",))},
        pods,
        lambda key: [p for p in pods.values() if p.group == key],
        lambda key: True,
        lambda key: False,
    )
    assert {n: v.uids for n, v in answer.nodes.items()} == {"n1": ("uid-a-0",)}
    assert answer.dropped == {}


def test_a_member_whose_last_filter_named_only_full_nodes_preempts_on_the_nodes_proposed() -> None:
    # high-0 was filtered while n0 alone had room (the fillers hold n1-n3), so its
    # word is "n0 only"; n0 is then taken by a pod nobody may evict. With every node
    # full kube-scheduler filters it no more: only its preemption asks, proposing n1
    # and n2 (their fillers evicted). The gang is planned there, not held on n0 until
    # its starvation fence (the bench's 41 s preemption case).
    fillers = [pod(f"filler-{i}", node=f"n{i}", priority=10) for i in (1, 2, 3)]
    core = core_with(
        {"n0": 1, "n1": 1, "n2": 1, "n3": 1},
        [*fillers, pod("high-0", group="high", priority=1000)],
        {"high": {"minMember": 2}},
    )
    high_0 = core.snapshot.pods["uid-high-0"]
    assert core.filter(high_0, ["n0"], T0).verdict is not Verdict.PLANNED  # one member
    core.observe_pod(PodInfo.from_api(pod("keeper", node="n0", priority=5000)), T0)
    core.observe_pod(PodInfo.from_api(pod("high-1", group="high", priority=1000)), T0)
    assert GroupKey("default", "high") not in core.ledger.plans, "n0 only: nothing to evict"
    core.drain_effects()

    proposed = {n: NodeVictims((f"uid-filler-{n[1]}",)) for n in ("n1", "n2")}
    answer = core.preempt(high_0, proposed, T0 + 1)

    assert answer.nodes == {}, "the gang preempts whole, itself"
    assert sorted(planned_nodes(core).values()) == ["n1", "n2"]
    assert sorted(evicted_refs(core)) == ["default/filler-1", "default/filler-2"]


def full_nodes_and_waiting_gangs(nodes: int, gangs: int) -> GangCore:
    """`nodes` 1-GPU nodes each held by a plain filler of priority 10; `gangs` gangs of
    one 1-GPU member at priority 1000 waiting (every node full: each must preempt)."""
    fillers = [pod(f"filler-{i:02d}", node=f"n{i:02d}", priority=10) for i in range(nodes)]
    waiting = [pod(f"g{g:02d}-0", group=f"g{g:02d}", priority=1000) for g in range(gangs)]
    return core_with(
        {f"n{i:02d}": 1 for i in range(nodes)},
        [*fillers, *waiting],
        {f"g{g:02d}": {"minMember": 1} for g in range(gangs)},
    )


def test_a_pod_another_gangs_preemption_is_evicting_is_not_chosen_again() -> None:
    core = full_nodes_and_waiting_gangs(2, 2)
    core.preempt(core.snapshot.pods["uid-g00-0"], {}, T0)
    assert evicted_refs(core) == ["default/filler-00"]
    core.preempt(core.snapshot.pods["uid-g01-0"], {}, T0)
    assert evicted_refs(core) == ["default/filler-01"], "filler-00's room is g00's"


def test_each_gangs_preemption_tries_a_few_plans_however_many_are_already_evicting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 30 gangs preempting one after another on 30 full nodes: the last one's victim
    # search does not walk the 29 fillers already going (each a plan tried: at 1,000
    # nodes that walk blocked the service for 100 s in the bench).
    from extender.domain.preemption import gang_preemption

    core = full_nodes_and_waiting_gangs(30, 30)
    tried: list[int] = []
    real = gang_preemption.plan_gang

    def counted(*args: Any, **kw: Any) -> Any:
        tried[-1] += 1
        return real(*args, **kw)

    monkeypatch.setattr(gang_preemption, "plan_gang", counted)
    for g in range(30):
        tried.append(0)
        core.preempt(core.snapshot.pods[f"uid-g{g:02d}-0"], {}, T0)
    assert len(core.ledger.plans) == 30
    # fits now, with every candidate gone, with one victim, minimal, the plan
    assert max(tried) <= 5, tried


def test_units_on_no_node_the_preemptor_may_use_are_not_tried() -> None:
    asked: list[dict[str, dict[str, int]]] = []

    def fits(capacity: Any) -> bool:
        asked.append({n: dict(r) for n, r in capacity.items()})
        return capacity["n2"].get(GPU, 0) >= 1

    free = {n: {GPU: 0} for n in ("n0", "n1", "n2")}
    units = [unit(f"p{i}", 10, f"n{i}", group=False) for i in range(3)]

    def only_n2(node: str) -> frozenset[int]:
        return frozenset({0}) if node == "n2" else frozenset()

    found = choose_victims(fits, free, units, priority=100, admitted=only_n2)
    assert found is not None and [u.key for u in found.victims] == ["pod default/p2-0"]
    assert len(asked) == 4, "now, with every candidate gone, with p2 gone, and minimality"
    assert choose_victims(fits, free, units[:2], priority=100, admitted=only_n2) is None


def test_a_gang_that_cannot_fit_even_with_every_candidate_gone_costs_two_plans() -> None:
    asked: list[dict[str, dict[str, int]]] = []

    def fits(capacity: Any) -> bool:
        asked.append(dict(capacity))
        return sum(r.get(GPU, 0) for r in capacity.values()) >= 100

    free = {f"n{i}": {GPU: 0} for i in range(20)}
    units = [unit(f"p{i}", 10, f"n{i}", group=False) for i in range(20)]
    assert choose_victims(fits, free, units, priority=100) is None
    assert len(asked) == 2, "now, and with all 20 gone: not one plan per unit"


def test_members_admitted_on_different_nodes_free_the_node_they_share() -> None:
    # Each member's word (its last filter, widened by its preemption's proposal) names
    # its own node and n3, whose filler is the oldest: in eviction order alone (newest
    # first) the search would free n0, n1 and n2, one node per member.
    fillers = [pod(f"filler-{i}", node=f"n{i}", gpus=4, priority=10) for i in (3, 0, 1, 2)]
    core = core_with(
        {f"n{i}": 4 for i in range(4)},
        [*fillers, *high_gang(3)],
        {"high": {"minMember": 3}},
    )
    for i, created in enumerate((T0 - 30, T0 - 20, T0 - 10), start=0):
        core.snapshot.pods[f"uid-filler-{i}"].created = created
    core.snapshot.pods["uid-filler-3"].created = T0 - 40
    members = [core.snapshot.pods[f"uid-high-{i}"] for i in range(3)]
    for i, member in enumerate(members):
        core.restrictions[member.uid] = NodeRestriction(allowed=frozenset({f"n{i}", "n3"}))

    core.preempt(members[0], {}, T0 + 1)

    assert evicted_refs(core) == ["default/filler-3"]
    assert set(planned_nodes(core).values()) == {"n3"}


def test_a_gang_whose_members_are_each_admitted_on_one_node_tries_a_plan_per_member(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 40 full nodes; each of 4 members may go on 10 nodes of its own (as
    # kube-scheduler's preemption proposes a window of the nodes). The search frees one
    # node per member reached, the newest filler in each window: it does not try a plan
    # per filler in eviction order (at 1,000 nodes, 800 plans and 26 s for each gang
    # in the bench's preemption case).
    from extender.domain.preemption import gang_preemption

    fillers = [pod(f"filler-{i:02d}", node=f"n{i:02d}", priority=10) for i in range(40)]
    core = core_with(
        {f"n{i:02d}": 1 for i in range(40)}, [*fillers, *high_gang(4)], {"high": {"minMember": 4}}
    )
    for i in range(40):
        core.snapshot.pods[f"uid-filler-{i:02d}"].created = T0 - 100 + i
    for i in range(4):
        window = frozenset(f"n{n:02d}" for n in range(i * 10, i * 10 + 10))
        core.restrictions[f"uid-high-{i}"] = NodeRestriction(allowed=window)
    tried = [0]
    real = gang_preemption.plan_gang

    def counted(*args: Any, **kw: Any) -> Any:
        tried[0] += 1
        return real(*args, **kw)

    monkeypatch.setattr(gang_preemption, "plan_gang", counted)
    core.preempt(core.snapshot.pods["uid-high-0"], {}, T0)

    assert sorted(evicted_refs(core)) == [f"default/filler-{i * 10 + 9:02d}" for i in range(4)]
    # now, every candidate gone, one per member reached, one per victim kept, the plan
    assert tried[0] <= 2 + 4 + 4 + 1, tried


@pytest.mark.parametrize(
    ("words", "admitted"),
    [
        # node -> indexes of the members (a, b) admitted there
        ({"a": ["n0"], "b": ["n1", "n2"]}, {"n0": {0}, "n1": {1}, "n2": {1}, "n9": set()}),
        ({"a": ["n0"], "b": None}, {"n0": {0, 1}, "n1": {1}, "n9": set()}),  # b: all but n9
        ({"a": ["n0"]}, {"n0": {0, 1}, "n1": {1}, "n9": {1}}),  # b has no word kept at all
        ({}, None),  # no word: every member, any node
    ],
)
def test_which_members_a_node_admits_is_their_kept_words(
    words: dict[str, list[str] | None], admitted: dict[str, set[int]] | None
) -> None:
    from extender.domain.preemption.gang_preemption import members_admitting

    members = [PodInfo.from_api(pod(name, group="g")) for name in ("a", "b")]
    allowed = {
        f"uid-{name}": NodeRestriction(denied=frozenset({"n9"}))
        if nodes is None
        else NodeRestriction(allowed=frozenset(nodes))
        for name, nodes in words.items()
    }
    found = members_admitting(members, allowed)
    if admitted is None:
        assert found is None
        return
    assert found is not None
    assert {node: set(found(node)) for node in admitted} == admitted
    assert found("n0") is found("n0"), "worked out once per node"


def test_a_widened_word_is_news_to_the_queue_views_that_read_it() -> None:
    # The held-queue answers (who a gang waits behind) are kept per restrictions
    # version: a word widened by the preempt verb must move it on.
    fillers = [pod(f"filler-{i}", node=f"n{i}", priority=10) for i in (0, 1)]
    core = core_with({"n0": 1, "n1": 1}, [*fillers, *high_gang()], {"high": {"minMember": 2}})
    high_0 = core.snapshot.pods["uid-high-0"]
    core.filter(high_0, ["n0"], T0)
    before = core.restrictions_version
    core.preempt(high_0, {"n1": NodeVictims(("uid-filler-1",))}, T0 + 1)
    assert core.restrictions_version == before + 1


AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
            ]
        }
    }
}


def _with_spec(**changes: Any) -> Callable[[dict[str, Any]], None]:
    return lambda obj: obj["spec"].update(changes)


def _with_container(**changes: Any) -> Callable[[dict[str, Any]], None]:
    return lambda obj: obj["spec"]["containers"][0].update(changes)


@pytest.mark.parametrize(
    ("change", "same"),
    [
        # What the webhook and the Job controller set per member: not read by filters.
        (_with_spec(hostname="g-worker-1", subdomain="g"), True),
        (_with_container(env=[{"name": "VC_TASK_INDEX", "value": "1"}], command=["sshd"]), True),
        (lambda obj: obj["metadata"]["labels"].update({"index": "1"}), True),
        # What kube-scheduler's filters read.
        (_with_spec(affinity=AFFINITY), False),
        (_with_spec(volumes=[{"name": "d", "persistentVolumeClaim": {"claimName": "d-1"}}]), False),
        (_with_container(ports=[{"containerPort": 22, "hostPort": 2222}]), False),
        (_with_spec(topologySpreadConstraints=[{"maxSkew": 1, "topologyKey": "zone"}]), False),
        (_with_spec(nodeSelector={"gpu": "a100"}), False),
        (_with_container(resources={"requests": {GPU: "2"}, "limits": {GPU: "2"}}), False),
        (_with_spec(initContainers=[{"name": "i", "ports": [{"hostPort": 2222}]}]), False),
    ],
)
def test_members_share_a_filter_spec_unless_what_filters_read_differs(
    change: Callable[[dict[str, Any]], None], same: bool
) -> None:
    base = pod("m", group="g")
    other = pod("m", group="g")
    other["metadata"].setdefault("labels", {})
    change(other)
    assert other != base, "the change is made"
    assert (PodInfo.from_api(other).filter_spec == PodInfo.from_api(base).filter_spec) is same


def test_one_members_preemption_proposal_admits_its_same_spec_siblings_on_those_nodes() -> None:
    # Every member was last offered n0 only (a node another gang's plan holds), so
    # each word is "n0". kube-scheduler's preemption for high-0 proposes n2: high-1,
    # of the same spec, passes the same filters there, and the gang is planned on n2
    # at once, evicting one filler (waiting for high-1's own proposal, a window
    # elsewhere, spread the gang over two nodes, a filler evicted for each).
    fillers = [pod(f"filler-{i}", node=f"n{i}", gpus=2, priority=10) for i in (1, 2)]
    keeper = pod("keeper", node="n0", gpus=2, priority=5000)
    core = core_with(
        {"n0": 2, "n1": 2, "n2": 2}, [*fillers, keeper, *high_gang(2)], {"high": {"minMember": 2}}
    )
    for i in range(2):
        core.restrictions[f"uid-high-{i}"] = NodeRestriction(allowed=frozenset({"n0"}))

    core.preempt(core.snapshot.pods["uid-high-0"], {"n2": NodeVictims(("uid-filler-2",))}, T0)

    assert evicted_refs(core) == ["default/filler-2"]
    assert set(planned_nodes(core).values()) == {"n2"}


def test_a_sibling_of_another_spec_is_not_admitted_by_the_proposal() -> None:
    fillers = [pod(f"filler-{i}", node=f"n{i}", gpus=2, priority=10) for i in (1, 2)]
    other = pod("high-1", group="high", priority=1000)
    other["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
                ]
            }
        }
    }
    core = core_with(
        {"n0": 2, "n1": 2, "n2": 2}, [*fillers, *high_gang(1), other], {"high": {"minMember": 2}}
    )
    for i in range(2):
        core.restrictions[f"uid-high-{i}"] = NodeRestriction(allowed=frozenset({"n0"}))

    core.preempt(core.snapshot.pods["uid-high-0"], {"n2": NodeVictims(("uid-filler-2",))}, T0)

    assert core.restrictions["uid-high-1"].allowed == frozenset({"n0"})
    assert core.restrictions["uid-high-0"].allowed == frozenset({"n0", "n2"})


def test_a_preemption_plan_is_kept_while_its_victims_fill_a_node_no_filter_named_since_it_changed() -> (
    None
):
    # n0 changes while its filler terminates (kwok's nodes flapped NotReady on a busy
    # machine): news kube-scheduler has to see. Full of the filler in kube-scheduler's
    # count, n0 passes no pod's filters, so no filter names it within the grace: that
    # silence refuses nothing, and the plan waiting for the victim is kept (at 1,000
    # nodes, 116 of these plans were dropped).
    core = core_with(
        {"n0": 2, "cpu": 0},
        [pod("filler-0", node="n0", gpus=2, priority=10), *high_gang(2)],
        {"high": {"minMember": 2}},
    )
    core.expire(T0)  # the first look: the nodes there are seen
    core.preempt(core.snapshot.pods["uid-high-0"], {}, T0)
    key = GroupKey("default", "high")
    plan = core.ledger.plans[key]
    assert evicted_refs(core) == ["default/filler-0"]
    tainted = make_node("n0").gpus(2).taint("node.kubernetes.io/unreachable", "", "NoSchedule")
    core.apply_node(NodeInfo.from_api(tainted.obj()))
    core.apply_node(NodeInfo.from_api(make_node("n0").gpus(2).obj()))
    core.expire(T0 + 1)
    # A filter that scanned the nodes leaves n0 out past the grace.
    core.filter(
        core.snapshot.pods["uid-high-1"], ["cpu"], T0 + 1 + core.unseen_nodes.grace_seconds + 0.5
    )
    assert core.ledger.plans.get(key) is plan
    assert not [e for e in core.drain_effects() if isinstance(e, PlanDropped)]


def test_a_plan_waiting_on_a_changed_node_without_its_victims_is_dropped_after_the_grace() -> None:
    # The gang needs n0 (its filler evicted) and n1 (free). n1 changes and no filter
    # names it within the grace: n1 had room, so that silence is kube-scheduler's
    # refusal, whatever the victim on n0 still does.
    core = core_with(
        {"n0": 2, "n1": 2},
        [pod("filler-0", node="n0", gpus=2, priority=10), *high_gang(2, gpus=2)],
        {"high": {"minMember": 2}},
    )
    core.expire(T0)
    core.preempt(core.snapshot.pods["uid-high-0"], {}, T0)
    key = GroupKey("default", "high")
    assert sorted(planned_nodes(core).values()) == ["n0", "n1"]
    assert evicted_refs(core) == ["default/filler-0"]
    core.apply_node(NodeInfo.from_api(make_node("n1").gpus(2).label("rack", "b").obj()))
    core.expire(T0 + 1)
    # A filter that scanned the nodes leaves n1 out past the grace.
    core.filter(
        core.snapshot.pods["uid-high-1"], ["n0"], T0 + 1 + core.unseen_nodes.grace_seconds + 0.5
    )
    assert key not in core.ledger.plans
    (dropped,) = [e for e in core.drain_effects() if isinstance(e, PlanDropped)]
    assert "offered node n1 to no pod within" in dropped.reason


# ---- the victim search's trial plans share one node order ----


@settings(max_examples=60, deadline=None)
@given(
    gpus=st.lists(st.integers(1, 8), min_size=2, max_size=7),
    fill=st.data(),
    size=st.integers(1, 4),
    need=st.integers(1, 4),
)
def test_trial_plans_on_the_kept_node_order_choose_as_plans_sorted_afresh(
    gpus: list[int], fill: st.DataObject, size: int, need: int
) -> None:
    # Each trial plan of a victim search moves only the victims' nodes in one order of
    # the free room (a bisection each) instead of sorting every node: the victims and
    # the plan must be those of trial plans that sort afresh.
    from extender.domain.preemption import gang_preemption

    fillers = []
    for i, capacity in enumerate(gpus):
        free = capacity
        for j, held in enumerate(fill.draw(st.lists(st.integers(1, capacity), max_size=2))):
            if held <= free:
                free -= held
                priority = fill.draw(st.sampled_from([5, 10, 20]))
                fillers.append(pod(f"f{i}-{j}", node=f"n{i}", gpus=held, priority=priority))
    gang = [pod(f"high-{m}", group="high", priority=1000, gpus=need) for m in range(size)]

    def outcome(moves_per_sort: int) -> tuple[dict[str, str] | None, list[str]]:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(gang_preemption, "MOVES_PER_SORT", moves_per_sort)
            core = core_with(
                {f"n{i}": g for i, g in enumerate(gpus)},
                [*fillers, *gang],
                {"high": {"minMember": size}},
            )
            core.preempt(core.snapshot.pods["uid-high-0"], {}, T0)
            plan = core.ledger.plans.get(GroupKey("default", "high"))
            return (dict(plan.placements) if plan else None), sorted(evicted_refs(core))

    kept, sorted_afresh = outcome(0), outcome(10**9)
    assert kept == sorted_afresh


def test_a_victim_on_a_node_the_snapshot_lost_does_not_stop_the_search() -> None:
    # A filler still bound to a node that is gone from the cluster (its deletion not
    # seen yet) is a candidate, but no free room is kept for its node.
    core = core_with(
        {"n0": 1},
        [
            pod("filler-0", node="n0", priority=10),
            pod("filler-gone", node="gone", priority=10),
            *high_gang(1),
        ],
        {"high": {"minMember": 1}},
    )
    core.preempt(core.snapshot.pods["uid-high-0"], {}, T0)
    assert planned_nodes(core) == {"default/high-0": "n0"}
    assert evicted_refs(core) == ["default/filler-0"]
