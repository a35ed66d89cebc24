"""Claim template requests whose devices depend on the node (docs/dra.md):
`firstAvailable` (the first subrequest that fits on the node) and `allocationMode:
All` (every device of the class on the node, all free, at least one).

What a template asks, how one member's choices resolve on a node (cases and a
property against a straightforward reading of the rules), and gangs planned,
reserved and held with them through the service's cluster state.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from extender.domain.devices.choices import requests_on
from extender.domain.devices.objects import ClaimTemplate, class_resource
from extender.domain.objects.device_choice import DeviceAlternative, DeviceChoice
from extender.domain.objects.model import NodeInfo, PodInfo
from extender.domain.objects.policy import Policy
from extender.domain.planning.planner import Placement, plan_gang
from tests.builders import make_cluster_state, make_node
from tests.unit.test_dra_claims import exactly, member_with_claims, template_obj
from tests.unit.test_dra_devices import DRIVER, claim_obj, class_obj, dra_node, slice_obj

BIG, SMALL = class_resource("big"), class_resource("small")


def first_available(*subrequests: tuple[str, int | None]) -> dict[str, Any]:
    subs: list[dict[str, Any]] = []
    for i, (device_class, count) in enumerate(subrequests):
        sub: dict[str, Any] = {"name": f"s{i}", "deviceClassName": device_class}
        if count is None:
            sub["allocationMode"] = "All"
        else:
            sub["count"] = count
        subs.append(sub)
    return {"name": "r", "firstAvailable": subs}


def test_a_first_available_template_asks_its_subrequests_in_order() -> None:
    template = ClaimTemplate.from_api(template_obj("t", first_available(("big", 2), ("small", 1))))
    assert template.unsupported is None and dict(template.needs) == {}
    assert template.choices == (
        (
            "r",
            (DeviceAlternative(BIG, 2, "r/s0"), DeviceAlternative(SMALL, 1, "r/s1")),
        ),
    )


def test_an_all_request_makes_every_request_of_its_template_a_choice() -> None:
    template = ClaimTemplate.from_api(
        template_obj("t", exactly("small", 1), {**exactly("big", mode="All"), "name": "b"})
    )
    assert dict(template.needs) == {}
    assert template.choices == (
        ("r", (DeviceAlternative(SMALL, 1, "r"),)),
        ("b", (DeviceAlternative(BIG, None, "b"),)),
    )


def pod_with(
    *choices: tuple[tuple[str, int | None], ...], fixed: dict[str, int] | None = None
) -> PodInfo:
    return PodInfo(
        uid="p",
        namespace="default",
        name="p",
        requests=dict(fixed or {}),
        device_choices=tuple(
            DeviceChoice(
                "c",
                "ResourceClaimTemplate t",
                f"r{i}",
                tuple(DeviceAlternative(r, n, f"r{i}/{j}") for j, (r, n) in enumerate(alts)),
            )
            for i, alts in enumerate(choices)
        ),
    )


@pytest.mark.parametrize(
    ("pod", "room", "totals", "expected"),
    [
        pytest.param(
            pod_with(((BIG, 2), (SMALL, 1))), {BIG: 2, SMALL: 4}, {}, {BIG: 2}, id="first fits"
        ),
        pytest.param(
            pod_with(((BIG, 2), (SMALL, 1))),
            {BIG: 1, SMALL: 4},
            {},
            {SMALL: 1},
            id="first short: the next",
        ),
        pytest.param(pod_with(((BIG, 2), (SMALL, 1))), {BIG: 1}, {}, None, id="none fits"),
        pytest.param(
            pod_with(((BIG, None),)), {BIG: 3}, {BIG: 3}, {BIG: 3}, id="all: every device, all free"
        ),
        pytest.param(pod_with(((BIG, None),)), {BIG: 2}, {BIG: 3}, None, id="all: one is taken"),
        pytest.param(pod_with(((BIG, None),)), {}, {}, None, id="all: the node has none"),
        pytest.param(
            pod_with(((BIG, None), (SMALL, 2))),
            {BIG: 1, SMALL: 2},
            {BIG: 2},
            {SMALL: 2},
            id="all short: the next subrequest",
        ),
        pytest.param(
            pod_with(((BIG, 2), (SMALL, 1)), fixed={BIG: 1}),
            {BIG: 2, SMALL: 1},
            {},
            {BIG: 1, SMALL: 1},
            id="fixed requests are counted first",
        ),
        pytest.param(
            pod_with(((BIG, 1),), ((BIG, 1), (SMALL, 1))),
            {BIG: 1, SMALL: 1},
            {},
            {BIG: 1, SMALL: 1},
            id="a later choice sees what the first took",
        ),
        pytest.param(
            pod_with(((BIG, 1),), fixed={"cpu": 2}), {BIG: 1, "cpu": 1}, {}, None, id="cpu short"
        ),
        pytest.param(
            pod_with(((BIG, 1),), fixed={"cpu": 1}), {BIG: 1, "cpu": 0}, {}, None, id="cpu 1 short"
        ),
        pytest.param(
            pod_with(((BIG, 1),), fixed={"example.com/npu": 1}),
            {BIG: 1},
            {},
            None,
            id="a fixed resource the node lacks",
        ),
        pytest.param(
            pod_with(((SMALL, 1),)), {BIG: 1}, {BIG: 1}, None, id="a class the node lacks"
        ),
        pytest.param(
            pod_with(((SMALL, 1), (BIG, 1))),
            {BIG: 1},
            {BIG: 1},
            {BIG: 1},
            id="first of a class the node lacks: the next",
        ),
        pytest.param(
            pod_with(((BIG, 1),), fixed={BIG: 1}),
            {BIG: 2},
            {},
            {BIG: 2},
            id="a choice of a fixed request's class adds to it",
        ),
        pytest.param(
            pod_with(((BIG, None),)), {BIG: 1}, {BIG: 1}, {BIG: 1}, id="all: the node's one device"
        ),
        pytest.param(
            pod_with(((BIG, None),)),
            {BIG: 2},
            {},
            None,
            id="all: none of the node's devices in its slices (a device plugin's)",
        ),
        pytest.param(
            pod_with(((BIG, 1),), fixed={"nvidia.com/gpu": 0}),
            {BIG: 1, "nvidia.com/gpu": -1},
            {},
            {BIG: 1, "nvidia.com/gpu": 0},
            id="a zero request fits an over-committed node",
        ),
    ],
)
def test_choices_resolved_on_a_node(
    pod: PodInfo, room: dict[str, int], totals: dict[str, int], expected: dict[str, int] | None
) -> None:
    assert requests_on(pod, room, totals) == expected


ALTERNATIVE = st.tuples(st.sampled_from([BIG, SMALL]), st.one_of(st.none(), st.integers(1, 4)))


@settings(max_examples=300, deadline=None)
@given(
    choices=st.lists(st.lists(ALTERNATIVE, min_size=1, max_size=3).map(tuple), max_size=3),
    free_big=st.integers(0, 6),
    free_small=st.integers(0, 6),
    taken_big=st.integers(0, 3),
    taken_small=st.integers(0, 3),
)
def test_choices_take_the_first_alternative_that_fits_and_never_more_than_is_free(
    choices: list[tuple[tuple[str, int | None], ...]],
    free_big: int,
    free_small: int,
    taken_big: int,
    taken_small: int,
) -> None:
    """Read straight from the API's words: each request in order takes the first
    subrequest whose devices are free beside what the ones before took; All is
    every device of the node (free + taken) and only when none is taken."""
    pod = pod_with(*choices)
    room = {BIG: free_big, SMALL: free_small}
    totals = {BIG: free_big + taken_big, SMALL: free_small + taken_small}
    expected: dict[str, int] | None = {}
    for alternatives in choices:
        assert expected is not None
        for resource, count in alternatives:
            amount = totals[resource] if count is None else count
            if amount >= 1 and expected.get(resource, 0) + amount <= room[resource]:
                expected[resource] = expected.get(resource, 0) + amount
                break
        else:
            expected = None
            break
    got = requests_on(pod, room, totals)
    assert got == expected
    if got is not None:
        assert all(got.get(r, 0) <= room[r] for r in room)
    if choices and all(alts == ((BIG, None),) for alts in choices) and taken_big:
        assert got is None  # All never takes a node where one of its devices is taken


# ---- gangs through the service's cluster state ----


def choice_state(big: dict[str, int], small: dict[str, int], template: dict[str, Any]) -> Any:
    """Nodes with `big`/`small` devices each (two classes told apart by driver), the
    template, and a gang of members asking one claim from it."""
    state = make_cluster_state()
    nodes = sorted(set(big) | set(small))
    state.on_page("nodes", [dra_node(n) for n in nodes], True, True)
    state.on_page(
        "deviceclasses",
        [
            class_obj("big", f'device.driver == "{DRIVER}"', extended=None),
            class_obj("small", 'device.driver == "small.example.com"', extended=None),
        ],
        True,
        True,
    )
    slices = [slice_obj(f"b-{n}", n, c) for n, c in big.items() if c] + [
        slice_obj(f"s-{n}", n, c, driver="small.example.com", pool=f"small-{n}")
        for n, c in small.items()
        if c
    ]
    state.on_page("resourceslices", slices, True, True)
    state.on_page("resourceclaimtemplates", [template], True, True)
    return state


def add_members(state: Any, count: int) -> list[PodInfo]:
    for i in range(count):
        pod = member_with_claims(f"m{i}", {"name": "dev", "resourceClaimTemplateName": "t"})
        pod["metadata"]["annotations"]["gang-extender.io/min-available"] = str(count)
        state.on_event("pods", "ADDED", pod)
    return [state.core.snapshot.pods[f"m{i}"] for i in range(count)]


def devices(requests: dict[str, int]) -> dict[str, int]:
    return {k: v for k, v in requests.items() if k in (BIG, SMALL)}


def plan(state: Any, members: list[PodInfo]) -> Placement | Any:
    snapshot = state.core.snapshot
    free = {n: snapshot.free(n) for n in snapshot.nodes}
    return plan_gang(members, free, snapshot.nodes, Policy())


def test_first_available_members_take_the_big_devices_where_they_fit_and_small_ones_elsewhere() -> (
    None
):
    state = choice_state(
        {"n1": 4, "n2": 0},
        {"n1": 0, "n2": 2},
        template_obj("t", first_available(("big", 2), ("small", 1))),
    )
    members = add_members(state, 4)
    assert members[0].group_error is None and members[0].device_choices
    outcome = plan(state, members)
    assert isinstance(outcome, Placement), outcome
    assert sorted(outcome.nodes.values()) == ["n1", "n1", "n2", "n2"]
    for uid, node in outcome.nodes.items():
        assert devices(outcome.requests[uid]) == ({BIG: 2} if node == "n1" else {SMALL: 1})


def test_first_available_gang_held_naming_the_classes_then_planned_and_reserved() -> None:
    state = choice_state(
        {"n1": 2}, {"n1": 1}, template_obj("t", first_available(("big", 2), ("small", 1)))
    )
    members = add_members(state, 3)
    outcome = plan(state, members)
    assert not isinstance(outcome, Placement)
    assert "2/3 members placeable" in outcome.message
    assert (
        "ResourceClaimTemplate t request r: 2 devices of class big or 1 device of class small"
        in outcome.message
    )
    assert "as 3 members of the gang do" in outcome.message
    assert "most free devices on one node: big 2, small 1" in outcome.message
    state.on_event(
        "resourceslices", "ADDED", slice_obj("s2", "n1", 1, driver="small.example.com", pool="more")
    )
    core = state.core
    decision = core.filter(members[0], ["n1"], 1_000_000.0)
    assert decision.nodes == ["n1"], decision
    reserved = core.ledger.plans[members[0].group].requests
    assert sorted(tuple(sorted(devices(r).items())) for r in reserved.values()) == [
        ((BIG, 2),),
        ((SMALL, 1),),
        ((SMALL, 1),),
    ]
    assert core.free_after_reservations("n1")[BIG] == 0
    assert core.free_after_reservations("n1")[SMALL] == 0


def test_all_members_go_one_per_node_where_no_device_is_taken() -> None:
    state = choice_state(
        {"n1": 2, "n2": 3, "n3": 2},
        {},
        template_obj("t", {**exactly("big", mode="All"), "name": "all"}),
    )
    state.on_event("resourceclaims", "ADDED", claim_obj("stray", [("n3", "b-n3-0")]))
    members = add_members(state, 3)
    outcome = plan(state, members)
    assert not isinstance(outcome, Placement)
    assert "all devices of class big on a node" in outcome.message
    state.on_event("resourceclaims", "DELETED", claim_obj("stray", [("n3", "b-n3-0")]))
    outcome = plan(state, members)
    assert isinstance(outcome, Placement), outcome
    assert sorted(outcome.nodes.values()) == ["n1", "n2", "n3"]
    for uid, node in outcome.nodes.items():
        assert devices(outcome.requests[uid]) == {BIG: {"n1": 2, "n2": 3, "n3": 2}[node]}


def test_a_planned_members_chosen_claim_is_its_reservation_then_its_request() -> None:
    """kube-scheduler allocates the member's claim before bind: the plan reserves the
    devices already (not counted twice), and the member now asks what was allocated
    (the subrequest kube-scheduler chose), so once bound its request holds them."""
    state = choice_state(
        {"n1": 2}, {}, template_obj("t", {**exactly("big", mode="All"), "name": "all"})
    )
    members = add_members(state, 1)
    core = state.core
    assert core.filter(members[0], ["n1"], 1_000_000.0).nodes == ["n1"]
    claim = claim_obj("m0-dev", [("n1", "b-n1-0"), ("n1", "b-n1-1")], owner="m0")
    for result in claim["status"]["allocation"]["devices"]["results"]:
        result["request"] = "all"
    claim["metadata"]["annotations"] = {"resource.kubernetes.io/pod-claim-name": "dev"}
    claim["status"]["reservedFor"] = [{"resource": "pods", "name": "m0", "uid": "m0"}]
    state.on_event("resourceclaims", "ADDED", claim)
    member = core.snapshot.pods["m0"]
    assert member.device_choices == () and member.requests[BIG] == 2
    assert member.device_claims == ("dev",)
    assert core.snapshot.nodes["n1"].allocatable[BIG] == 2
    assert core.free_after_reservations("n1")[BIG] == 0
    pod = member_with_claims("m0", {"name": "dev", "resourceClaimTemplateName": "t"})
    pod["metadata"]["annotations"]["gang-extender.io/min-available"] = "1"
    pod["spec"]["nodeName"] = "n1"
    pod["status"]["phase"] = "Running"
    state.on_event("pods", "MODIFIED", pod)
    assert core.snapshot.free("n1")[BIG] == 0
    assert core.snapshot.nodes["n1"].allocatable[BIG] == 2  # the bound member's request


def test_a_claim_allocated_with_more_devices_than_the_plan_reserved_is_taken() -> None:
    """The plan chose `firstAvailable`'s second subrequest (1 device) for a member, and
    kube-scheduler's allocator, seeing another order, gave it the first (2): the
    devices beyond the reservation must not look free (the claim counts as taken)."""
    state = choice_state({"n1": 3}, {}, template_obj("t", first_available(("big", 2), ("big", 1))))
    members = add_members(state, 2)
    core = state.core
    assert core.filter(members[0], ["n1"], 1_000_000.0).nodes == ["n1"]
    plan = core.ledger.plans[members[0].group]
    small = next(uid for uid, r in plan.requests.items() if r.get(BIG) == 1)
    claim = claim_obj(f"{small}-dev", [("n1", "b-n1-0"), ("n1", "b-n1-1")], owner=small)
    for result in claim["status"]["allocation"]["devices"]["results"]:
        result["request"] = "r/s0"
    claim["metadata"]["annotations"] = {"resource.kubernetes.io/pod-claim-name": "dev"}
    claim["status"]["reservedFor"] = [{"resource": "pods", "name": small, "uid": small}]
    state.on_event("resourceclaims", "ADDED", claim)
    assert core.snapshot.pods[small].requests[BIG] == 2
    # 3 devices: 2 allocated (taken), the other member's 2 reserved: short, never over.
    assert core.free_after_reservations("n1")[BIG] <= 3 - 2 - 1


@pytest.mark.parametrize(
    ("nodes", "largest"),
    [
        pytest.param({"n1": {BIG: 1}}, "big 1, small 0", id="no node has the small class"),
        pytest.param({}, "big 0, small 0", id="no node at all"),
    ],
)
def test_a_member_whose_choices_fit_nowhere_is_held_naming_each_request(
    nodes: dict[str, dict[str, int]], largest: str
) -> None:
    infos = {name: NodeInfo.from_api(make_node(name).obj()) for name in nodes}
    outcome = plan_gang([pod_with(((BIG, 2), (SMALL, 1)), ((BIG, 1),))], nodes, infos, Policy())
    assert not isinstance(outcome, Placement)
    assert outcome.message == (
        "0/1 members placeable: p needs ResourceClaimTemplate t request r0: 2 devices of "
        "class big or 1 device of class small (firstAvailable, the first that fits); "
        "ResourceClaimTemplate t request r1: 1 device of class big, as 1 member of the "
        f"gang do; no node left has that free (most free devices on one node: {largest})"
    )


def chooser(name: str, amd: int, *alternatives: tuple[str, int]) -> PodInfo:
    return replace(
        pod_with(alternatives, fixed={"amd.com/gpu": amd} if amd else {}), uid=name, name=name
    )


def test_choices_are_resolved_in_the_fills_order_of_the_gangs_accelerator() -> None:
    """The gang is keyed on amd.com/gpu: the fill places b (2) before a (1), b takes
    the 2 big devices it can only take, a the 1 left. The plan reserves just that, not
    a's first subrequest too (4 devices on a node of 3)."""
    node = NodeInfo.from_api(make_node("n1").gpus(4, "amd.com/gpu").gpus(3, BIG).obj())
    gang = [chooser("a", 1, (BIG, 2), (BIG, 1)), chooser("b", 2, (BIG, 2))]
    outcome = plan_gang(gang, {"n1": dict(node.allocatable)}, {"n1": node}, Policy())
    assert isinstance(outcome, Placement), outcome
    assert {uid: devices(r) for uid, r in outcome.requests.items()} == {
        "a": {BIG: 1},
        "b": {BIG: 2},
    }


@settings(max_examples=200, deadline=None)
@given(
    gang=st.lists(
        st.tuples(
            st.integers(0, 3),
            st.lists(
                st.tuples(st.sampled_from([BIG, SMALL]), st.integers(1, 3)), min_size=1, max_size=3
            ),
        ),
        min_size=1,
        max_size=5,
    ),
    capacity=st.lists(
        st.tuples(st.integers(0, 6), st.integers(0, 6), st.integers(0, 4)), min_size=1, max_size=3
    ),
)
def test_a_plans_requests_never_take_more_than_a_node_has_free(
    gang: list[tuple[int, list[tuple[str, int]]]], capacity: list[tuple[int, int, int]]
) -> None:
    nodes = {
        f"n{i}": NodeInfo.from_api(
            make_node(f"n{i}").gpus(amd, "amd.com/gpu").gpus(big, BIG).gpus(small, SMALL).obj()
        )
        for i, (big, small, amd) in enumerate(capacity)
    }
    free = {name: dict(info.allocatable) for name, info in nodes.items()}
    members = [chooser(f"m{i}", amd, *alts) for i, (amd, alts) in enumerate(gang)]
    outcome = plan_gang(members, free, nodes, Policy())
    if not isinstance(outcome, Placement):
        return
    for name, room in free.items():
        for resource in (BIG, SMALL, "amd.com/gpu"):
            taken = sum(
                outcome.requests[m.uid].get(resource, 0)
                for m in members
                if outcome.nodes[m.uid] == name
            )
            assert taken <= room[resource], (name, resource, outcome)


def test_the_fixed_requests_on_a_node_are_counted_before_the_choices() -> None:
    """f asks 2 big devices outright, c the first of 2 or 1: on a node of 3, c's plan
    is the 1 left beside f (only members with choices are in the plan's requests)."""
    node = NodeInfo.from_api(make_node("n1").gpus(3, BIG).obj())
    fixed = replace(pod_with(fixed={BIG: 2}), uid="f", name="f")
    gang = [fixed, chooser("c", 0, (BIG, 2), (BIG, 1))]
    outcome = plan_gang(gang, {"n1": dict(node.allocatable)}, {"n1": node}, Policy())
    assert isinstance(outcome, Placement), outcome
    assert outcome.nodes == {"f": "n1", "c": "n1"}
    assert {uid: devices(r) for uid, r in outcome.requests.items()} == {"c": {BIG: 1}}
