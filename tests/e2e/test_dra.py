"""GPUs served by Dynamic Resource Allocation (docs/dra.md), on the local control plane.

A DeviceClass maps `nvidia.com/gpu` (as NVIDIA's DRA driver's does by default); a
KWOK node publishes its GPUs in a ResourceSlice made by the test and advertises no
`nvidia.com/gpu` in allocatable. No kubelet plugin is needed: scheduling reads only
the API objects. DRA-served extended resources are on in 1.37 (DRAExtendedResource);
on the oldest tier (1.35) the test skips.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from extender.devcluster.cluster import binary_version
from extender.devcluster.nodes import gpu_node_body, wait_for_nodes_ready
from extender.kube.rawapi import KubeError, RawApi, path_of
from tests.e2e.gang_fixtures import (  # noqa: F401 (no_partial_gangs is a fixture)
    bound,
    condition_message,
    create,
    delete_pod,
    gang_pod,
    get_podgroup,
    list_pods,
    minor_version,
    no_partial_gangs,
    podgroup,
    ungate,
    wait_until,
)

GPU = "nvidia.com/gpu"
HOLD_OBSERVATION_SECONDS = 6  # several scheduler retries of a held gang
RESOURCE_API = ("apis", "resource.k8s.io", "v1")

pytestmark = pytest.mark.usefixtures("no_partial_gangs")


@pytest.fixture
def dra_extended_resources(bin_dir: Path) -> None:
    version = binary_version(bin_dir)
    if minor_version(version) < 37:
        pytest.skip(
            f"DRA-served extended resources (DRAExtendedResource) are on from 1.37; "
            f"this control plane is {version}"
        )


@pytest.fixture
def dra_objects(api: k8s.ApiClient, raw: RawApi) -> Iterator[list[str]]:
    """Paths of the cluster-scoped objects a test creates, deleted after it."""
    made: list[str] = []
    yield made
    for path in reversed(made):
        try:
            raw.call("DELETE", path)
        except KubeError as err:
            if err.status != 404:
                raise


def make(raw: RawApi, made: list[str], plural: str, obj: dict[str, Any]) -> None:
    raw.call("POST", path_of(*RESOURCE_API, plural), body=obj)
    made.append(path_of(*RESOURCE_API, plural, obj["metadata"]["name"]))


def device_class(name: str, driver: str, extended: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]}
    if extended:
        spec["extendedResourceName"] = extended
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": spec,
    }


def resource_slice(name: str, node: str, driver: str, gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": 0, "resourceSliceCount": 1},
            "devices": [
                {"name": f"gpu-{i}", "attributes": {"index": {"int": i}}} for i in range(gpus)
            ],
        },
    }


def dra_node(api: k8s.ApiClient, made_nodes: list[str], pool: str) -> str:
    """A Ready KWOK node with cpu and memory but no nvidia.com/gpu in allocatable."""
    name = f"dra-{pool}"
    body = gpu_node_body(name, labels={"e2e.gang-extender.io/pool": pool})
    for part in ("capacity", "allocatable"):
        del body["status"][part][GPU]
    k8s.CoreV1Api(api).create_node(body)
    made_nodes.append(name)
    wait_for_nodes_ready(api, [name])
    return name


@pytest.fixture
def made_nodes(core: k8s.CoreV1Api) -> Iterator[list[str]]:
    names: list[str] = []
    yield names
    for name in names:
        try:
            core.delete_node(name)
        except k8s.ApiException as exc:
            if exc.status != 404:
                raise


def test_gang_of_dra_served_gpus_held_whole_while_short_then_bound_whole(
    dra_extended_resources: None,
    gang_stack: Any,
    api: k8s.ApiClient,
    raw: RawApi,
    namespace: str,
    dra_objects: list[str],
    made_nodes: list[str],
) -> None:
    suffix = uuid.uuid4().hex[:6]
    driver = f"gpu-{suffix}.e2e.example.com"
    make(raw, dra_objects, "deviceclasses", device_class(f"gpu-{suffix}", driver, GPU))
    node = dra_node(api, made_nodes, suffix)
    make(raw, dra_objects, "resourceslices", resource_slice(f"{node}-gpus", node, driver, 4))
    selector = {"e2e.gang-extender.io/pool": suffix}

    # The stock default scheduler serves a 1-GPU pod from the node's DRA devices.
    plain = gang_pod("plain", "", gpus=1, node_selector=selector, scheduler="default-scheduler")
    create(raw, namespace, plain)
    wait_until(
        lambda: bound([p for p in list_pods(raw, namespace) if p["metadata"]["name"] == "plain"]),
        what="the plain 1-GPU pod bound to the DRA node",
    )

    create(raw, namespace, podgroup("train", 2))
    for i in range(2):
        create(raw, namespace, gang_pod(f"train-{i}", "train", gpus=2, node_selector=selector))
    message = wait_until(
        lambda: (
            "placeable" in (m := condition_message(get_podgroup(raw, namespace, "train"))) and m
        ),
        what="the hold to say what is missing",
    )
    assert f"needs 4 {GPU} in all" in message
    assert "3 free" in message, message  # 4 devices, 1 taken by the plain pod
    time.sleep(HOLD_OBSERVATION_SECONDS)
    assert [p["metadata"]["name"] for p in bound(list_pods(raw, namespace))] == ["plain"], (
        "no member may be bound while the gang does not fit"
    )

    delete_pod(raw, namespace, "plain")
    wait_until(
        lambda: (
            len([p for p in bound(list_pods(raw, namespace)) if p["metadata"]["name"] != "plain"])
            == 2
        ),
        what="both members bound once the plain pod's GPU is free",
    )
    nodes = {p["spec"]["nodeName"] for p in bound(list_pods(raw, namespace))}
    assert nodes == {node}


def claim_template(name: str, device_class: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [{"name": "gpu", "exactly": {"deviceClassName": device_class}}]
                }
            }
        },
    }


def test_claim_template_gang_held_naming_the_class_then_bound_whole_when_devices_arrive(
    gang_stack: Any,
    api: k8s.ApiClient,
    raw: RawApi,
    namespace: str,
    dra_objects: list[str],
    made_nodes: list[str],
) -> None:
    """Members that each ask 1 device of a class through a ResourceClaimTemplate: 4 of
    them, 2 devices on the first node. Held whole with a hold naming the class; bound
    whole once a second node's slice brings 2 more."""
    suffix = uuid.uuid4().hex[:6]
    driver = f"dev-{suffix}.e2e.example.com"
    device_class_name = f"dev-{suffix}.example.com"
    make(raw, dra_objects, "deviceclasses", device_class(device_class_name, driver))
    pool = f"t{suffix}"
    first = dra_node(api, made_nodes, pool)
    make(raw, dra_objects, "resourceslices", resource_slice(f"{first}-devs", first, driver, 2))
    raw.call(
        "POST",
        path_of("apis", "resource.k8s.io", "v1", "namespaces", namespace, "resourceclaimtemplates"),
        body=claim_template("one-device", device_class_name),
    )
    selector = {"e2e.gang-extender.io/pool": pool}
    create(raw, namespace, podgroup("train", 4))
    for i in range(4):
        pod = gang_pod(f"train-{i}", "train", node_selector=selector)
        pod["spec"]["resourceClaims"] = [{"name": "dev", "resourceClaimTemplateName": "one-device"}]
        pod["spec"]["containers"][0]["resources"]["claims"] = [{"name": "dev"}]
        create(raw, namespace, pod)
    message = wait_until(
        lambda: (
            "placeable" in (m := condition_message(get_podgroup(raw, namespace, "train"))) and m
        ),
        what="the hold to name the device class",
    )
    assert f"needs 4 devices of class {device_class_name} in all" in message, message
    assert "2 free" in message, message
    time.sleep(HOLD_OBSERVATION_SECONDS)
    assert bound(list_pods(raw, namespace)) == [], "no member may bind while devices are short"

    second = dra_node(api, made_nodes, pool + "b")
    # The second node joins the same pool label, so the members may go there.
    k8s.CoreV1Api(api).patch_node(second, {"metadata": {"labels": selector}})
    make(raw, dra_objects, "resourceslices", resource_slice(f"{second}-devs", second, driver, 2))
    wait_until(
        lambda: len(bound(list_pods(raw, namespace))) == 4,
        what="all 4 members bound once the second node's devices arrive",
    )
    placed = sorted(p["spec"]["nodeName"] for p in bound(list_pods(raw, namespace)))
    assert placed == sorted([first, first, second, second])


def claims_of(raw: RawApi, namespace: str) -> dict[str, dict[str, Any]]:
    """The namespace's ResourceClaims by the pod that owns them."""
    found: dict[str, dict[str, Any]] = {}
    items = raw.call(
        "GET", path_of("apis", "resource.k8s.io", "v1", "namespaces", namespace, "resourceclaims")
    )["items"]
    for claim in items:
        for ref in claim["metadata"].get("ownerReferences") or []:
            if ref.get("kind") == "Pod":
                found[ref["name"]] = claim
    return found


def two_device_gang_with_train_1_gated(
    raw: RawApi,
    api: k8s.ApiClient,
    namespace: str,
    dra_objects: list[str],
    made_nodes: list[str],
    *,
    tag: str,
) -> tuple[str, str, dict[str, str]]:
    """A node whose slice has 2 devices of a new class, and a gang of 2 members each
    asking 1 through a ResourceClaimTemplate, train-1 gated: (node, class, selector)."""
    suffix = uuid.uuid4().hex[:6]
    driver = f"{tag}-{suffix}.e2e.example.com"
    device_class_name = f"{tag}-{suffix}.example.com"
    make(raw, dra_objects, "deviceclasses", device_class(device_class_name, driver))
    pool = f"{tag[0]}{suffix}"
    node = dra_node(api, made_nodes, pool)
    make(raw, dra_objects, "resourceslices", resource_slice(f"{node}-devs", node, driver, 2))
    raw.call(
        "POST",
        path_of("apis", "resource.k8s.io", "v1", "namespaces", namespace, "resourceclaimtemplates"),
        body=claim_template("one-device", device_class_name),
    )
    selector = {"e2e.gang-extender.io/pool": pool}
    create(raw, namespace, podgroup("train", 2, scheduleTimeoutSeconds=300))
    for i in range(2):
        pod = gang_pod(f"train-{i}", "train", node_selector=selector, gated=(i == 1))
        pod["spec"]["resourceClaims"] = [{"name": "dev", "resourceClaimTemplateName": "one-device"}]
        pod["spec"]["containers"][0]["resources"]["claims"] = [{"name": "dev"}]
        create(raw, namespace, pod)
    return node, device_class_name, selector


def test_claims_of_members_whose_bind_barrier_times_out(
    gang_stack: Any,
    api: k8s.ApiClient,
    raw: RawApi,
    namespace: str,
    dra_objects: list[str],
    made_nodes: list[str],
) -> None:
    """train-1 is gated, so train-0 reaches bind (its claim allocated by kube-scheduler
    first) and waits in the barrier until it times out. What is left of its claim, and
    does the gang still bind whole once train-1 may go?"""
    node, device_class_name, selector = two_device_gang_with_train_1_gated(
        raw, api, namespace, dra_objects, made_nodes, tag="bar"
    )
    allocated = wait_until(
        lambda: (
            (c := claims_of(raw, namespace).get("train-0"))
            and (c.get("status") or {}).get("allocation")
            and c
        ),
        what="kube-scheduler to allocate train-0's claim before it calls bind",
    )
    print(f"\nbefore the barrier timeout: {allocated.get('status')}")
    started = time.monotonic()
    timeout_events = wait_until(
        lambda: [
            e
            for e in raw.call("GET", f"/api/v1/namespaces/{namespace}/events")["items"]
            if "barrier" in (e.get("message") or "")
        ],
        what="the barrier timeout",
    )
    print(
        f"barrier timed out after {time.monotonic() - started:.0f}s: {timeout_events[0]['message']}"
    )
    time.sleep(HOLD_OBSERVATION_SECONDS)
    after = claims_of(raw, namespace).get("train-0") or {}
    print(f"after the barrier timeout: {after.get('status')}")
    assert bound(list_pods(raw, namespace)) == [], "no member may bind alone"
    # kube-scheduler's Unreserve took train-0 out of its claim (reservedFor; its next
    # attempt may already have put it back) and left the allocation: the device stays
    # train-0's (docs/dra.md#when-the-bind-barrier-times-out).
    kept = (after.get("status") or {}).get("allocation")
    assert kept == allocated["status"]["allocation"], after

    ungate(raw, namespace, "train-1")
    wait_until(
        lambda: len(bound(list_pods(raw, namespace))) == 2,
        what="the gang bound whole once train-1 may go",
    )
    claims = claims_of(raw, namespace)
    for name in ("train-0", "train-1"):
        status = claims[name].get("status") or {}
        assert status.get("allocation"), name
        assert [r["name"] for r in status.get("reservedFor") or []] == [name]
    # train-0 was bound with the device it kept, not a second one.
    assert claims["train-0"]["status"]["allocation"] == kept


def plain_with_claim(name: str, template: str, selector: dict[str, str]) -> dict[str, Any]:
    """A pod of the stock default scheduler asking a device through `template`."""
    pod = gang_pod(name, "", node_selector=selector, scheduler="default-scheduler")
    pod["spec"]["resourceClaims"] = [{"name": "dev", "resourceClaimTemplateName": template}]
    pod["spec"]["containers"][0]["resources"]["claims"] = [{"name": "dev"}]
    return pod


def test_the_stock_scheduler_cannot_take_a_planned_gangs_devices_past_the_barrier(
    gang_stack: Any,
    api: k8s.ApiClient,
    raw: RawApi,
    namespace: str,
    dra_objects: list[str],
    made_nodes: list[str],
) -> None:
    """A gang of 2 x 1 device is planned on a node with 2; train-0 waits in the bind
    barrier (its claim allocated), train-1 is gated. The stock default scheduler, which
    sees claims but not our plans, gives the device planned for train-1 to a plain pod.
    No member may bind alone: the barrier's re-check finds the node short, the gang
    is held naming the class, and binds whole once the plain pod is gone."""
    node, device_class_name, selector = two_device_gang_with_train_1_gated(
        raw, api, namespace, dra_objects, made_nodes, tag="stk"
    )
    wait_until(
        lambda: (
            (c := claims_of(raw, namespace).get("train-0"))
            and (c.get("status") or {}).get("allocation")
        ),
        what="train-0 in the barrier, its claim allocated",
    )
    create(raw, namespace, plain_with_claim("plain", "one-device", selector))
    wait_until(
        lambda: [p["metadata"]["name"] for p in bound(list_pods(raw, namespace))] == ["plain"],
        what="the stock scheduler to bind the plain pod with the node's last free device",
    )
    ungate(raw, namespace, "train-1")
    message = wait_until(
        lambda: (
            f"devices of class {device_class_name}"
            in (m := condition_message(get_podgroup(raw, namespace, "train")))
            and m
        ),
        what="the gang held, short of a device of the class",
    )
    print(f"\nheld: {message}")
    time.sleep(HOLD_OBSERVATION_SECONDS)
    assert [p["metadata"]["name"] for p in bound(list_pods(raw, namespace))] == ["plain"], (
        "no member may bind while the plain pod holds the device planned for the gang"
    )

    delete_pod(raw, namespace, "plain")
    wait_until(
        lambda: (
            sorted(p["metadata"]["name"] for p in bound(list_pods(raw, namespace)))
            == ["train-0", "train-1"]
        ),
        what="the gang bound whole once the plain pod's device is free",
    )
    assert {p["spec"]["nodeName"] for p in bound(list_pods(raw, namespace))} == {node}


def shared_claim(name: str, device_class_name: str, count: int) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpus",
                        "exactly": {"deviceClassName": device_class_name, "count": count},
                    }
                ]
            }
        },
    }


def test_a_claim_shared_by_the_gang_is_planned_once_on_the_node_its_devices_fit(
    gang_stack: Any,
    api: k8s.ApiClient,
    raw: RawApi,
    namespace: str,
    dra_objects: list[str],
    made_nodes: list[str],
) -> None:
    """Both members name one ResourceClaim of 2 devices. With a node of 1 device no
    member binds (kube-scheduler's own filter refuses the claim there); once a node
    with 2 joins, the gang is planned as one unit there: both members are bound on
    it, the claim allocated once and reserved for both. (The hold that names the
    claim, when kube-scheduler does offer nodes, is unit-tested:
    tests/unit/test_dra_shared_claims.py.)"""
    suffix = uuid.uuid4().hex[:6]
    driver = f"shr-{suffix}.e2e.example.com"
    device_class_name = f"shr-{suffix}.example.com"
    make(raw, dra_objects, "deviceclasses", device_class(device_class_name, driver))
    pool = f"s{suffix}"
    small = dra_node(api, made_nodes, pool)
    make(raw, dra_objects, "resourceslices", resource_slice(f"{small}-devs", small, driver, 1))
    claims_path = path_of(
        "apis", "resource.k8s.io", "v1", "namespaces", namespace, "resourceclaims"
    )
    raw.call("POST", claims_path, body=shared_claim("shared", device_class_name, 2))
    selector = {"e2e.gang-extender.io/pool": pool}
    create(raw, namespace, podgroup("train", 2))
    for i in range(2):
        pod = gang_pod(f"train-{i}", "train", node_selector=selector)
        pod["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimName": "shared"}]
        pod["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpus"}]
        create(raw, namespace, pod)
    # No node can serve the claim: kube-scheduler's own DRA filter refuses every node
    # before asking the extender, and the PodGroup relays its words.
    message = wait_until(
        lambda: (
            "cannot allocate all claims"
            in (m := condition_message(get_podgroup(raw, namespace, "train")))
            and m
        ),
        what="the PodGroup to relay kube-scheduler's refusal",
    )
    print(f"\nheld: {message}")
    time.sleep(HOLD_OBSERVATION_SECONDS)
    assert bound(list_pods(raw, namespace)) == []

    big = dra_node(api, made_nodes, pool + "b")
    k8s.CoreV1Api(api).patch_node(big, {"metadata": {"labels": selector}})
    make(raw, dra_objects, "resourceslices", resource_slice(f"{big}-devs", big, driver, 2))
    wait_until(
        lambda: len(bound(list_pods(raw, namespace))) == 2,
        what="both members bound where the shared claim's devices fit",
    )
    assert {p["spec"]["nodeName"] for p in bound(list_pods(raw, namespace))} == {big}
    claim = raw.call("GET", f"{claims_path}/shared")
    results = claim["status"]["allocation"]["devices"]["results"]
    assert len(results) == 2 and {r["pool"] for r in results} == {big}
    assert sorted(r["name"] for r in claim["status"]["reservedFor"]) == ["train-0", "train-1"]
