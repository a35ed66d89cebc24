"""DRA devices counted as the planner's resources (extender/domain/devices, docs/dra.md).

Table tests of the CEL selectors on Kubernetes' device environment and of the
device count per node; the watch's side (ClusterState folding devices into the
nodes the core sees); and the property that no node is planned past its free
devices, whatever the slices and allocated claims.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from extender.domain.devices.inventory import DeviceInventory
from extender.domain.devices.objects import (
    EXTENDED_RESOURCE_CLAIM_ANNOTATION,
    Claim,
    DeviceClass,
    Slice,
    class_resource,
)
from extender.domain.devices.selectors import SelectorError, matches
from extender.domain.objects.model import PodInfo
from extender.domain.objects.policy import Policy
from extender.domain.planning.planner import Placement, plan_gang
from tests.builders import make_cluster_state, make_node, make_pod

GPU = "nvidia.com/gpu"
DRIVER = "gpu.example.com"


def slice_obj(
    name: str,
    node: str,
    count: int,
    *,
    driver: str = DRIVER,
    generation: int = 0,
    pool: str | None = None,
    **attrs: Any,
) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": pool or node, "generation": generation, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": f"{name}-{i}",
                    "attributes": {
                        "index": {"int": i},
                        "productName": {"string": "NVIDIA A100"},
                        **{k: {"string": v} for k, v in attrs.items()},
                    },
                    "capacity": {"memory": {"value": "80Gi"}},
                }
                for i in range(count)
            ],
        },
    }


def class_obj(name: str, *selectors: str, extended: str | None = GPU) -> dict[str, Any]:
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": e}} for e in selectors]}
    if extended:
        spec["extendedResourceName"] = extended
    return {"metadata": {"name": name}, "spec": spec}


def claim_obj(
    name: str, devices: list[tuple[str, str]], *, owner: str | None = None, extended: bool = False
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "default"}
    if owner:
        meta["ownerReferences"] = [{"kind": "Pod", "name": owner, "uid": owner, "controller": True}]
    if extended:
        meta["annotations"] = {EXTENDED_RESOURCE_CLAIM_ANNOTATION: "true"}
    results = [
        {"driver": DRIVER, "pool": pool, "device": dev, "request": "r"} for pool, dev in devices
    ]
    return {"metadata": meta, "status": {"allocation": {"devices": {"results": results}}}}


DEVICE = Slice.from_api(slice_obj("s", "n1", 1)).devices[0]


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        (f'device.driver == "{DRIVER}"', True),
        ('device.driver == "other.example.com"', False),
        (f'device.attributes["{DRIVER}"].productName.startsWith("NVIDIA")', True),
        (f'device.attributes["{DRIVER}"].index == 0', True),
        (f'"{DRIVER}" in device.attributes && device.attributes["{DRIVER}"].index > 0', False),
        (f'device.capacity["{DRIVER}"].memory.compareTo(quantity("40Gi")) >= 0', True),
        (f'device.capacity["{DRIVER}"].memory.isGreaterThan(quantity("80Gi"))', False),
        (f'device.capacity["{DRIVER}"].memory.isLessThan(quantity("81Gi"))', True),
        (f'device.capacity["{DRIVER}"].memory.asInteger() == 85899345920', True),
    ],
)
def test_cel_on_the_device_environment(expression: str, expected: bool) -> None:
    assert matches((expression,), DEVICE) is expected


@pytest.mark.parametrize(
    ("expression", "named"),
    [
        ('device.attributes["x.example.com"].model == "a"', "failed on device"),
        ("device.driver ==", "does not compile"),
        ("device.driver", "not a boolean"),
        ('semver("1.0.0") == semver("1.0.0")', "failed on device"),
        ('quantity("lots") == quantity("1")', "failed on device"),
    ],
)
def test_cel_that_cannot_tell_is_an_error_never_a_guess(expression: str, named: str) -> None:
    with pytest.raises(SelectorError, match=named):
        matches((expression,), DEVICE)


def inventory(*objs: tuple[str, dict[str, Any]]) -> DeviceInventory:
    inv = DeviceInventory()
    for kind, obj in objs:
        if kind == "class":
            inv.upsert_class(DeviceClass.from_api(obj))
        elif kind == "slice":
            inv.upsert_slice(Slice.from_api(obj))
        else:
            inv.upsert_claim(Claim.from_api(obj))
    return inv


DRIVER_CLASS = ("class", class_obj("gpu", f'device.driver == "{DRIVER}"'))
BOUND = {("plain", "n1")}


@pytest.mark.parametrize(
    ("objs", "advertised", "expected"),
    [
        # 4 devices of the class's driver: 4 nvidia.com/gpu, and 4 of its implicit name.
        ([DRIVER_CLASS, ("slice", slice_obj("s", "n1", 4))], {}, 4),
        # Another driver's devices do not match the class.
        ([DRIVER_CLASS, ("slice", slice_obj("s", "n1", 4, driver="x.example.com"))], {}, 0),
        # A node that advertises nvidia.com/gpu itself (device plugin) is not served by DRA.
        ([DRIVER_CLASS, ("slice", slice_obj("s", "n1", 4))], {GPU: 2}, None),
        # Only a pool's newest generation counts.
        (
            [
                DRIVER_CLASS,
                ("slice", slice_obj("old", "n1", 4, generation=1)),
                ("slice", slice_obj("new", "n1", 2, generation=2)),
            ],
            {},
            2,
        ),
        # A claim made by hand takes its device.
        (
            [
                DRIVER_CLASS,
                ("slice", slice_obj("s", "n1", 4)),
                ("claim", claim_obj("c", [("n1", "s-0")])),
            ],
            {},
            3,
        ),
        # kube-scheduler's extended-resource claim of a bound pod: its request counts, not the claim.
        (
            [
                DRIVER_CLASS,
                ("slice", slice_obj("s", "n1", 4)),
                ("claim", claim_obj("c", [("n1", "s-0")], owner="plain", extended=True)),
            ],
            {},
            4,
        ),
        # ... of a pod not bound yet (in a bind barrier): the device is taken.
        (
            [
                DRIVER_CLASS,
                ("slice", slice_obj("s", "n1", 4)),
                ("claim", claim_obj("c", [("n1", "s-0")], owner="waiting", extended=True)),
            ],
            {},
            3,
        ),
        # A claim allocating a device of another node takes nothing here.
        (
            [
                DRIVER_CLASS,
                ("slice", slice_obj("s", "n1", 4)),
                ("claim", claim_obj("c", [("n2", "s-0")])),
            ],
            {},
            4,
        ),
        # A selector on attributes.
        (
            [
                ("class", class_obj("a100", f'device.attributes["{DRIVER}"].model == "a100"')),
                ("slice", slice_obj("s", "n1", 2, model="a100")),
                ("slice", slice_obj("t", "n1", 3, pool="other", model="h100")),
            ],
            {},
            2,
        ),
    ],
)
def test_devices_a_node_offers(
    objs: list[tuple[str, dict[str, Any]]], advertised: dict[str, int], expected: int | None
) -> None:
    inv = inventory(*objs)
    offered, unreadable = inv.capacity(
        "n1", advertised, lambda claim, node: (claim.owner_pod, node) in BOUND and claim.extended
    )
    assert offered.get(GPU) == expected
    assert unreadable == {}


def test_the_implicit_class_resource_is_offered_too() -> None:
    inv = inventory(DRIVER_CLASS, ("slice", slice_obj("s", "n1", 4)))
    offered, _ = inv.capacity("n1", {}, lambda claim, node: False)
    assert offered == {GPU: 4, class_resource("gpu"): 4}


def test_a_selector_that_fails_is_named_and_its_devices_not_counted() -> None:
    inv = inventory(
        ("class", class_obj("gpu", 'device.attributes["x.example.com"].model == "a"')),
        ("slice", slice_obj("s", "n1", 4)),
    )
    offered, unreadable = inv.capacity("n1", {}, lambda claim, node: False)
    assert offered[GPU] == 0
    assert "DeviceClass gpu" in unreadable[GPU] and "x.example.com" in unreadable[GPU]


# ---- the watch's side: devices folded into the nodes the core sees ----


def dra_node(name: str) -> dict[str, Any]:
    return make_node(name).cpu_only().obj()


def test_cluster_state_folds_devices_into_the_core_node_and_counts_a_bound_pod_once() -> None:
    state = make_cluster_state()
    state.on_page("nodes", [dra_node("n1")], True, True)
    state.on_page("deviceclasses", [DRIVER_CLASS[1]], True, True)
    state.on_page("resourceslices", [slice_obj("s", "n1", 4)], True, True)
    snapshot = state.core.snapshot
    assert snapshot.nodes["n1"].allocatable[GPU] == 4

    pod = make_pod("plain").gpus(1).obj()
    pod["metadata"]["uid"] = "plain"
    claim = claim_obj("plain-extended", [("n1", "s-0")], owner="plain", extended=True)
    # kube-scheduler allocates the claim before it binds the pod: the device is taken.
    state.on_event("pods", "ADDED", pod)
    state.on_event("resourceclaims", "ADDED", claim)
    assert snapshot.free("n1")[GPU] == 3
    # Bound: its request counts, the claim does not count a second time.
    pod["spec"]["nodeName"] = "n1"
    pod["status"]["phase"] = "Running"
    state.on_event("pods", "MODIFIED", pod)
    assert snapshot.free("n1")[GPU] == 3
    # Deleted: the claim's device stays taken until the claim goes.
    state.on_event("pods", "DELETED", pod)
    assert snapshot.free("n1")[GPU] == 3
    state.on_event("resourceclaims", "DELETED", claim)
    assert snapshot.free("n1")[GPU] == 4
    # The slice relisted without it: no device left.
    state.on_page("resourceslices", [], True, True)
    assert snapshot.free("n1").get(GPU, 0) == 0


# ---- property: no node is planned past its free devices ----


@settings(max_examples=150, deadline=None)
@given(
    devices=st.lists(st.integers(min_value=0, max_value=6), min_size=1, max_size=5),
    taken=st.lists(st.tuples(st.integers(0, 4), st.integers(0, 5), st.booleans()), max_size=8),
    members=st.lists(st.integers(min_value=1, max_value=4), min_size=1, max_size=6),
    resource=st.sampled_from([GPU, class_resource("gpu")]),
)
def test_no_node_is_planned_past_its_free_devices(
    devices: list[int], taken: list[tuple[int, int, bool]], members: list[int], resource: str
) -> None:
    """Whether members ask nvidia.com/gpu (served by the class) or the class's devices
    (as a claim template makes them ask), and whatever devices claims hold."""
    state = make_cluster_state()
    state.on_page("deviceclasses", [DRIVER_CLASS[1]], True, True)
    nodes = [f"n{i}" for i in range(len(devices))]
    state.on_page("nodes", [dra_node(n) for n in nodes], True, True)
    state.on_page(
        "resourceslices",
        [slice_obj(f"s{i}", n, c) for i, (n, c) in enumerate(zip(nodes, devices, strict=True))],
        True,
        True,
    )
    allocated: set[tuple[str, str]] = set()
    claims = []
    for k, (node_index, device_index, by_pod) in enumerate(taken):
        if node_index >= len(nodes) or device_index >= devices[node_index]:
            continue
        device = (nodes[node_index], f"s{node_index}-{device_index}")
        if device in allocated:
            continue
        allocated.add(device)
        claims.append(
            claim_obj(f"c{k}", [device], owner=f"pending-{k}" if by_pod else None, extended=by_pod)
        )
    state.on_page("resourceclaims", claims, True, True)
    snapshot = state.core.snapshot
    really_free = {
        n: devices[i] - sum(1 for node, _ in allocated if node == n) for i, n in enumerate(nodes)
    }
    gang = []
    for i, gpus in enumerate(members):
        pod = make_pod(f"m{i}").obj()
        pod["metadata"]["uid"] = f"m{i}"
        info = PodInfo.from_api(pod)
        gang.append(dataclasses.replace(info, requests={**info.requests, resource: gpus}))
    free = {n: snapshot.free(n) for n in nodes}
    outcome = plan_gang(gang, free, snapshot.nodes, Policy())
    if isinstance(outcome, Placement):
        load: dict[str, int] = {}
        for member in gang:
            node = outcome.nodes[member.uid]
            load[node] = load.get(node, 0) + member.requests[resource]
        for node, used in load.items():
            assert used <= really_free[node], (node, used, really_free)


def test_a_planned_members_claim_allocated_before_bind_is_not_counted_twice() -> None:
    """kube-scheduler allocates a member's extended-resource claim before it calls bind:
    the gang's plan reserves those GPUs already, so the claim must not take them again
    (the plan would be dropped as "no room left for its reservations")."""
    state = make_cluster_state()
    state.on_page("nodes", [dra_node("n1")], True, True)
    state.on_page("deviceclasses", [DRIVER_CLASS[1]], True, True)
    state.on_page("resourceslices", [slice_obj("s", "n1", 5)], True, True)
    members = []
    for i in range(2):
        pod = make_pod(f"m{i}").group("g").gpus(2).obj()
        pod["metadata"]["uid"] = f"m{i}"
        pod["metadata"]["annotations"] = {"gang-extender.io/min-available": "2"}
        state.on_event("pods", "ADDED", pod)
        members.append(PodInfo.from_api(pod))
    core = state.core
    decision = core.filter(members[0], ["n1"], 1_000_000.0)
    assert decision.nodes == ["n1"]
    plan = core.ledger.plans[members[0].group]
    assert set(plan.placements) == {"m0", "m1"}
    for i in range(2):
        state.on_event(
            "resourceclaims",
            "ADDED",
            claim_obj(
                f"m{i}-x",
                [("n1", f"s-{2 * i}"), ("n1", f"s-{2 * i + 1}")],
                owner=f"m{i}",
                extended=True,
            ),
        )
    assert core.snapshot.nodes["n1"].allocatable[GPU] == 5
    assert core.free_after_reservations("n1")[GPU] == 1
    # A claim of a pod neither bound nor planned takes its devices.
    state.on_event(
        "resourceclaims", "ADDED", claim_obj("stray", [("n1", "s-4")], owner="other", extended=True)
    )
    assert core.snapshot.nodes["n1"].allocatable[GPU] == 4
    assert core.free_after_reservations("n1")[GPU] == 0


def test_a_hold_names_devices_a_selector_could_not_count() -> None:
    state = make_cluster_state()
    state.on_page("nodes", [dra_node("n1")], True, True)
    state.on_page(
        "deviceclasses",
        [class_obj("gpu", 'device.attributes["x.example.com"].model == "a"')],
        True,
        True,
    )
    state.on_page("resourceslices", [slice_obj("s", "n1", 4)], True, True)
    snapshot = state.core.snapshot
    member = PodInfo.from_api(make_pod("m0").gpus(1).obj())
    outcome = plan_gang([member], {"n1": snapshot.free("n1")}, snapshot.nodes, Policy())
    assert not isinstance(outcome, Placement)
    assert "devices not counted: DeviceClass gpu: CEL" in outcome.message
    assert "x.example.com" in outcome.message and "(node n1)" in outcome.message


def test_a_remembered_cel_failure_names_the_device_it_failed_on() -> None:
    """Devices of one content share one evaluation; the error still names each device."""
    expression = 'device.attributes["x.example.com"].model == "a"'
    first, second = (dataclasses.replace(DEVICE, name=name) for name in ("gpu-a", "gpu-b"))
    for device in (first, second):
        with pytest.raises(SelectorError, match=f"device {device.name} of driver"):
            matches((expression,), device)


def test_a_slice_not_bound_to_one_node_counts_on_no_node() -> None:
    obj = slice_obj("s", "n1", 4)
    del obj["spec"]["nodeName"]
    obj["spec"]["allNodes"] = True
    parsed = Slice.from_api(obj)
    assert parsed.unsupported is not None and "allNodes" in parsed.unsupported
    inv = inventory(DRIVER_CLASS, ("slice", obj))
    assert inv.capacity("n1", {}, lambda claim, node: False) == ({}, {})
