"""A ResourceClaim named directly by a gang's members (`resourceClaimName`), not
allocated yet (docs/dra.md): a need of the gang counted once, its members placed
together on one node where its devices are free; once kube-scheduler allocates it,
its devices are the plan's reservation until the member carrying them binds, then
taken by the allocation.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from extender.domain.objects.accelerators import Accelerators
from extender.domain.objects.device_choice import DeviceAlternative, DeviceChoice
from extender.domain.objects.model import NodeInfo, PodInfo, Toleration
from extender.domain.objects.policy import Policy
from extender.domain.planning.node_fit import NodeRestriction
from extender.domain.planning.planner import Placement, plan_gang
from extender.domain.planning.sharers import NO_NODE, STAND_IN_PREFIX, units_of
from tests.builders import NodeBuilder, make_node
from tests.unit.test_dra_choices import BIG, choice_state, devices, first_available
from tests.unit.test_dra_claims import exactly, member_with_claims, template_obj
from tests.unit.test_dra_devices import claim_obj


def shared_claim(name: str, *requests: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": {"requests": list(requests)}},
        "status": {},
    }


def add_sharers(state: Any, count: int, claim: str = "shared") -> list[PodInfo]:
    for i in range(count):
        pod = member_with_claims(f"m{i}", {"name": "dev", "resourceClaimName": claim})
        pod["metadata"]["annotations"]["gang-extender.io/min-available"] = str(count)
        state.on_event("pods", "ADDED", pod)
    return [state.core.snapshot.pods[f"m{i}"] for i in range(count)]


def free_plan(state: Any, members: list[PodInfo]) -> Placement | Any:
    snapshot = state.core.snapshot
    free = {n: snapshot.free(n) for n in snapshot.nodes}
    return plan_gang(members, free, snapshot.nodes, Policy())


def two_nodes() -> Any:
    # n1 has 1 device of class big, n2 has 2; the template is not used here.
    return choice_state({"n1": 1, "n2": 2}, {}, template_obj("t", exactly("big")))


def test_the_gang_waits_for_a_claim_it_names_that_does_not_exist() -> None:
    state = two_nodes()
    members = add_sharers(state, 2)
    assert "ResourceClaim shared not found" in (members[0].group_error or "")


def test_members_sharing_a_claim_go_to_the_one_node_where_its_devices_are_free() -> None:
    state = two_nodes()
    state.on_event("resourceclaims", "ADDED", shared_claim("shared", exactly("big", 2)))
    members = add_sharers(state, 3)
    assert members[0].group_error is None and members[0].shared_claims
    outcome = free_plan(state, members)
    assert isinstance(outcome, Placement), outcome
    assert set(outcome.nodes.values()) == {"n2"} and len(outcome.nodes) == 3
    # Counted once, on the first member by name.
    assert [devices(outcome.requests[f"m{i}"]) for i in range(3)] == [{BIG: 2}, {}, {}]


def test_a_shared_claim_no_node_can_serve_holds_the_gang_naming_it() -> None:
    state = two_nodes()
    state.on_event("resourceclaims", "ADDED", shared_claim("shared", exactly("big", 3)))
    members = add_sharers(state, 2)
    outcome = free_plan(state, members)
    assert not isinstance(outcome, Placement)
    assert outcome.placeable == 0 and outcome.total == 2
    assert sorted(outcome.unplaced) == ["m0", "m1"]
    assert outcome.message.startswith("0/2 members placeable: needs 3 devices of class big")
    assert "sharing ResourceClaim shared (one node)" in outcome.message
    assert "largest free node has 2" in outcome.message


def test_a_shared_claims_first_available_is_resolved_on_the_units_node() -> None:
    state = two_nodes()
    state.on_event(
        "resourceclaims", "ADDED", shared_claim("shared", first_available(("big", 2), ("big", 1)))
    )
    members = add_sharers(state, 2)
    outcome = free_plan(state, members)
    assert isinstance(outcome, Placement), outcome
    node = outcome.nodes["m0"]
    assert outcome.nodes["m1"] == node
    assert devices(outcome.requests["m0"]) == {BIG: 2 if node == "n2" else 1}


def test_the_allocated_claim_is_the_plans_reservation_until_its_carrier_binds() -> None:
    state = two_nodes()
    claim = shared_claim("shared", exactly("big", 2))
    state.on_event("resourceclaims", "ADDED", claim)
    members = add_sharers(state, 2)
    core = state.core
    assert core.filter(members[1], ["n1", "n2"], 1_000_000.0).nodes == ["n2"]
    assert core.free_after_reservations("n2")[BIG] == 0
    # kube-scheduler allocates the claim for m1 (PreBind), before calling our bind.
    claim["status"] = {
        "allocation": {
            "devices": {
                "results": [
                    {"driver": "gpu.example.com", "pool": "n2", "device": f"b-n2-{i}"}
                    for i in range(2)
                ]
            }
        },
        "reservedFor": [{"resource": "pods", "name": "m1", "uid": "m1"}],
    }
    state.on_event("resourceclaims", "MODIFIED", claim)
    snapshot = core.snapshot
    assert snapshot.pods["m0"].shared_claims == ()  # allocated: no more a need
    assert snapshot.nodes["n2"].allocatable[BIG] == 2  # not counted twice
    assert core.free_after_reservations("n2")[BIG] == 0
    for i in range(2):
        pod = member_with_claims(f"m{i}", {"name": "dev", "resourceClaimName": "shared"})
        pod["metadata"]["annotations"]["gang-extender.io/min-available"] = "2"
        pod["spec"]["nodeName"] = "n2"
        pod["status"]["phase"] = "Running"
        state.on_event("pods", "MODIFIED", pod)
    assert snapshot.nodes["n2"].allocatable[BIG] == 0  # bound: the allocation takes them
    assert snapshot.free("n2")[BIG] == 0


def test_a_stray_allocated_claim_takes_its_devices() -> None:
    state = two_nodes()
    state.on_event("resourceclaims", "ADDED", claim_obj("stray", [("n2", "b-n2-0")]))
    assert state.core.snapshot.nodes["n2"].allocatable[BIG] == 1


def member(name: str, *claims: str, **fields: Any) -> PodInfo:
    from extender.domain.objects.device_choice import SharedClaim

    return PodInfo(
        uid=name,
        namespace="default",
        name=name,
        requests={"cpu": 1},
        shared_claims=tuple(SharedClaim(f"default/{c}", ((BIG, 1),), ()) for c in claims),
        **fields,
    )


def test_units_join_members_linked_through_any_claim_and_meet_their_constraints() -> None:
    members = [
        member("a", "x", node_selector={"zone": "1"}),
        member("b", "x", "y"),
        member("c", "y", node_selector={"zone": "2"}),
        member("d"),
    ]
    allowed = {
        "a": NodeRestriction(allowed=frozenset({"n1", "n2"})),
        "c": NodeRestriction(denied=frozenset({"n2"})),
    }
    units = units_of(members, allowed)
    assert units is not None
    ((stand_in_uid, unit),) = units.units.items()
    assert [m.name for m in unit] == ["a", "b", "c"]
    stand_in = next(m for m in units.members if m.uid == stand_in_uid)
    assert stand_in.requests == {"cpu": 3, BIG: 2}  # x and y once each
    assert stand_in.node_selector == {"zone": NO_NODE}
    assert units.allowed[stand_in_uid] == NodeRestriction(allowed=frozenset({"n1"}))
    assert [m.name for m in units.members if not m.uid.startswith("shared")] == ["d"]
    assert units_of([member("d")], {}) is None


@pytest.mark.parametrize(
    ("claims", "units"),
    [
        pytest.param(
            {"a": ("x",), "b": ("y",)}, [["a"], ["b"]], id="two unrelated claims: two units"
        ),
        pytest.param(
            {"a": ("x",), "b": ("x",), "c": ()}, [["a", "b"]], id="one claim named twice: one unit"
        ),
        pytest.param(
            {"a": ("x",), "b": ("y",), "c": ("x", "y")},
            [["a", "b", "c"]],
            id="a member naming two claims joins their units",
        ),
        pytest.param(
            {"a": ("x", "y"), "b": ("z",), "c": ("y",), "d": ("z", "w"), "e": ("w",)},
            [["a", "c"], ["b", "d", "e"]],
            id="two chains: two units",
        ),
    ],
)
def test_members_are_made_units_by_the_claims_they_share(
    claims: dict[str, tuple[str, ...]], units: list[list[str]]
) -> None:
    made = units_of([member(name, *named) for name, named in claims.items()], {})
    assert made is not None
    assert sorted([m.name for m in unit] for unit in made.units.values()) == units
    # A stand-in names no claim itself: the planner never makes it a unit again.
    assert all(m.shared_claims == () for m in made.members)


def only(*names: str) -> NodeRestriction:
    return NodeRestriction(allowed=frozenset(names))


def never(*names: str) -> NodeRestriction:
    return NodeRestriction(denied=frozenset(names))


@pytest.mark.parametrize(
    ("allowed", "meet"),
    [
        pytest.param({"a": only("n1", "n2"), "b": only("n2", "n3")}, only("n2"), id="both allow"),
        pytest.param(
            {"a": only("n1"), "b": only("n2", "n3")}, only(), id="allow-lists that do not meet"
        ),
        pytest.param({"a": only("n1", "n2"), "b": never("n1")}, only("n2"), id="allow, deny"),
        pytest.param({"a": never("n1"), "b": never("n2")}, never("n1", "n2"), id="both deny"),
        pytest.param({"b": only("n3")}, only("n3"), id="one member told"),
        pytest.param({}, None, id="none told"),
    ],
)
def test_a_units_nodes_are_those_every_member_may_use(
    allowed: dict[str, NodeRestriction], meet: NodeRestriction | None
) -> None:
    units = units_of([member("a", "x"), member("b", "x")], allowed)
    assert units is not None
    assert units.allowed.get(f"{STAND_IN_PREFIX}a") == meet


@pytest.mark.parametrize("alone_first", [True, False], ids=["alone first", "unit first"])
def test_each_member_goes_where_its_unit_went_the_carrier_with_the_claims_devices(
    alone_first: bool,
) -> None:
    gang = [member("d"), member("a", "x"), replace(member("b", "x"), requests={"cpu": 2})]
    units = units_of(gang, {})
    assert units is not None
    stand_in = f"{STAND_IN_PREFIX}a"
    assert units.members_of(stand_in) == ("a", "b") and units.members_of("d") == ("d",)
    nodes = {"d": "n1", stand_in: "n2"} if alone_first else {stand_in: "n2", "d": "n1"}
    requests = {"d": {"cpu": 1}, stand_in: {"cpu": 3, BIG: 1}}
    placed, chosen = units.spread(nodes, requests)
    assert placed == {"d": "n1", "a": "n2", "b": "n2"}
    assert chosen == {"d": {"cpu": 1}, "a": {"cpu": 1, BIG: 1}, "b": {"cpu": 2}}


def test_a_gang_with_a_shared_claim_is_held_in_the_configured_accelerators_words() -> None:
    """Members sharing a claim are planned as a unit under the setting's matcher too: a
    gang short of `example.com/npu` (GANG_ACCELERATOR_RESOURCES) is told so, as it is
    without the claim, not misread as a gang with no eligible node."""
    npu = Accelerators.from_setting("example.com/npu")
    nodes = {
        name: NodeInfo.from_api(make_node(name).gpus(count, "example.com/npu").obj())
        for name, count in (("a", 2), ("b", 8))
    }
    free = {name: {**info.allocatable, BIG: 1} for name, info in nodes.items()}

    def asking(name: str, npus: int, *claims: str) -> PodInfo:
        return replace(member(name, *claims), requests={"cpu": 1, "example.com/npu": npus})

    expected = "needs 15 example.com/npu in all (9 for z), 10 free, largest free node has 8"
    for gang in (
        [asking("x", 3, "shared"), asking("y", 3, "shared"), asking("z", 9)],
        [asking("x", 3), asking("y", 3), asking("z", 9)],
    ):
        outcome = plan_gang(gang, free, nodes, Policy(), accelerators=npu)
        assert not isinstance(outcome, Placement)
        assert outcome.message == f"2/3 members placeable: {expected}", outcome.message


# ---- a unit's node: what every member of it may use ----

DEDICATED = Toleration("dedicated", "Equal", "gang", "NoSchedule")


def cluster(*nodes: NodeBuilder) -> tuple[dict[str, NodeInfo], dict[str, dict[str, int]]]:
    infos = {info.name: info for info in (NodeInfo.from_api(n.obj()) for n in nodes)}
    return infos, {name: dict(info.allocatable) for name, info in infos.items()}


def placed(
    members: list[PodInfo],
    nodes: NodeBuilder,
    *more: NodeBuilder,
    allowed: dict[str, NodeRestriction] | None = None,
) -> Placement:
    infos, free = cluster(nodes, *more)
    outcome = plan_gang(members, free, infos, Policy(), allowed=allowed)
    assert isinstance(outcome, Placement), outcome
    return outcome


def test_a_unit_and_the_other_members_are_placed_each_reserving_what_it_takes() -> None:
    """The carrier (first by name) reserves its own requests and the claim's devices,
    each other member of the unit its own; a member outside it is placed as alone."""
    alone = replace(
        member("d"),
        device_choices=(
            DeviceChoice("dev", "ResourceClaimTemplate t", "r", (DeviceAlternative(BIG, 1, "r"),)),
        ),
    )
    gang = [member("a", "x"), replace(member("b", "x"), requests={"cpu": 2}), alone]
    outcome = placed(gang, make_node("n1").gpus(1, BIG), make_node("n2").gpus(1, BIG))
    assert outcome.nodes["a"] == outcome.nodes["b"] != outcome.nodes["d"]
    assert set(outcome.nodes.values()) == {"n1", "n2"}
    assert outcome.requests == {"a": {"cpu": 1, BIG: 1}, "b": {"cpu": 2}, "d": {"cpu": 1, BIG: 1}}


def test_a_unit_goes_where_its_members_node_selectors_agree() -> None:
    # Binpack alone would take n2 (its one device fits exactly).
    gang = [member(n, "x", node_selector={"zone": "1"}) for n in ("a", "b")]
    outcome = placed(
        gang,
        make_node("n1").gpus(2, BIG).label("zone", "1"),
        make_node("n2").gpus(1, BIG).label("zone", "2"),
    )
    assert outcome.nodes == {"a": "n1", "b": "n1"}


def test_a_unit_uses_a_tainted_node_only_when_every_member_tolerates_it() -> None:
    nodes = (make_node("n1").gpus(2, BIG).taint("dedicated", "gang"), make_node("n2").gpus(0, BIG))
    both = [member(n, "x", tolerations=(DEDICATED,)) for n in ("a", "b")]
    assert placed(both, *nodes).nodes == {"a": "n1", "b": "n1"}
    # The carrier (a) tolerates the taint, b does not: not there.
    infos, free = cluster(*nodes)
    outcome = plan_gang([both[0], member("b", "x")], free, infos, Policy())
    assert not isinstance(outcome, Placement)
    assert outcome.placeable == 0 and sorted(outcome.unplaced) == ["a", "b"]


def test_a_unit_keeps_the_node_its_members_were_planned_on_only_when_they_agree() -> None:
    # Binpack alone takes n2 (its one device fits exactly).
    nodes = (
        make_node("n1").gpus(2, BIG),
        make_node("n2").gpus(1, BIG),
        make_node("n3").gpus(2, BIG),
    )
    agreeing = [member(n, "x", planned_node="n1") for n in ("a", "b")]
    assert placed(agreeing, *nodes).nodes == {"a": "n1", "b": "n1"}
    apart = [member("a", "x", planned_node="n1"), member("b", "x", planned_node="n3")]
    assert placed(apart, *nodes).nodes == {"a": "n2", "b": "n2"}


def test_a_unit_goes_to_a_node_every_members_restriction_permits() -> None:
    nodes = [make_node(f"n{i}").gpus(1, BIG) for i in (1, 2, 3)]
    gang = [member("a", "x"), member("b", "x")]
    allow = {
        "a": NodeRestriction(allowed=frozenset({"n1", "n2"})),
        "b": NodeRestriction(allowed=frozenset({"n2", "n3"})),
    }
    assert placed(gang, *nodes, allowed=allow).nodes == {"a": "n2", "b": "n2"}
    deny = {
        "a": NodeRestriction(denied=frozenset({"n1"})),
        "b": NodeRestriction(denied=frozenset({"n2"})),
    }
    assert placed(gang, *nodes, allowed=deny).nodes == {"a": "n3", "b": "n3"}


def test_a_unit_no_node_holds_is_named_by_its_carrier_and_every_claim() -> None:
    infos, free = cluster(make_node("n1").gpus(1, BIG), make_node("n2").gpus(1, BIG))
    gang = [member("c", "y"), member("a", "x"), member("b", "x", "y")]
    outcome = plan_gang(gang, free, infos, Policy())
    assert not isinstance(outcome, Placement)
    assert "a and the 2 other members sharing ResourceClaim x, ResourceClaim y (one node)" in (
        outcome.message
    ), outcome.message
