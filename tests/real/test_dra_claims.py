"""A gang whose members ask a GPU through a ResourceClaimTemplate, on real nodes.

The session's real nodes serve their GPUs both ways (conftest): a device plugin
and a DRA kubelet plugin (Kubernetes' e2e test driver, driver and DeviceClass
`gpu.example.com`, 2 devices a node). The driver publishes each node's devices in
a ResourceSlice and, when kubelet prepares a claim, writes a CDI spec that
containerd applies: the container gets `claim_<claim>_<request>=true` in its
environment. docs/dra.md "Real nodes".
"""

from __future__ import annotations

import re
import time
from typing import Any

from extender.devcluster.cluster import LocalCluster
from extender.devcluster.node_commands import DRA_DEVICE_CLASS, DRA_DRIVER
from extender.domain.objects.membership import GROUP_LABEL
from extender.kube.rawapi import RawApi, path_of
from tests.e2e.gang_fixtures import (
    bound,
    condition_message,
    delete_pod,
    get_podgroup,
    list_pods,
    wait_until,
)
from tests.real.real_jobs import START_SECONDS, launch, member, ready_members, sh

#: Several of the gang scheduler's retries while the gang is held.
HOLD_OBSERVATION_SECONDS = 6
REQUEST = "gpu"
#: The extended resource every DeviceClass serves implicitly (DRAExtendedResource).
IMPLICIT_RESOURCE = f"deviceclass.resource.kubernetes.io/{DRA_DEVICE_CLASS}"


def namespaced(namespace: str, plural: str, *name: str) -> str:
    return path_of("apis", "resource.k8s.io", "v1", "namespaces", namespace, plural, *name)


def one_device_template(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {"name": REQUEST, "exactly": {"deviceClassName": DRA_DEVICE_CLASS}}
                    ]
                }
            }
        },
    }


def with_claim(pod: dict[str, Any], template: str) -> dict[str, Any]:
    """``pod`` asking one device through ``template`` (its first container uses it)."""
    pod["spec"]["resourceClaims"] = [{"name": "dev", "resourceClaimTemplateName": template}]
    pod["spec"]["containers"][0]["resources"]["claims"] = [{"name": "dev"}]
    return pod


def claim_of(raw: RawApi, namespace: str, pod: dict[str, Any]) -> dict[str, Any]:
    """The claim made from the template for ``pod`` (named in its status)."""
    statuses = pod["status"].get("resourceClaimStatuses") or []
    assert [s["name"] for s in statuses] == ["dev"], statuses
    claim: dict[str, Any] = raw.call(
        "GET", namespaced(namespace, "resourceclaims", statuses[0]["resourceClaimName"])
    )
    return claim


def claim_env(claim: dict[str, Any], request: str = REQUEST) -> str:
    """The variable the test driver's CDI spec sets for this claim's request."""
    return re.sub(r"[^a-zA-Z0-9]", "_", f"claim_{claim['metadata']['name']}_{request}")


def allocated_devices(raw: RawApi) -> list[tuple[str, str]]:
    """(pool, device) of every device of our driver allocated in any claim."""
    claims = raw.call("GET", path_of("apis", "resource.k8s.io", "v1", "resourceclaims"))["items"]
    return [
        (r["pool"], r["device"])
        for c in claims
        for r in ((c.get("status") or {}).get("allocation") or {})
        .get("devices", {})
        .get("results", [])
        if r["driver"] == DRA_DRIVER
    ]


def wait_devices_free(raw: RawApi) -> None:
    """An earlier test's namespace goes without waiting: its claims first."""
    wait_until(
        lambda: not allocated_devices(raw),
        timeout=START_SECONDS,
        what="the devices of earlier tests' claims to be free",
    )


def running(raw: RawApi, namespace: str, name: str) -> dict[str, Any]:
    pod: dict[str, Any] = wait_until(
        lambda: next(
            (
                p
                for p in list_pods(raw, namespace)
                if p["metadata"]["name"] == name and p["status"].get("phase") == "Running"
            ),
            None,
        ),
        timeout=START_SECONDS,
        what=f"{name} running with its device",
    )
    return pod


def prepared_device(
    cluster: LocalCluster, raw: RawApi, namespace: str, pod: dict[str, Any]
) -> tuple[str, str]:
    """Check that ``pod``'s claim is allocated on its node, reserved for it, and that its
    container sees exactly that claim's CDI variable; the (pool, device) it got."""
    name = pod["metadata"]["name"]
    claim = claim_of(raw, namespace, pod)
    results = claim["status"]["allocation"]["devices"]["results"]
    assert len(results) == 1, results
    result = results[0]
    assert result["driver"] == DRA_DRIVER
    assert result["pool"] == pod["spec"]["nodeName"], f"{name}: device on another node"
    assert result["request"] == REQUEST
    reserved = claim["status"].get("reservedFor") or []
    assert [(r["resource"], r["name"], r["uid"]) for r in reserved] == [
        ("pods", name, pod["metadata"]["uid"])
    ]
    seen = sh(cluster, namespace, name, "env | grep '^claim_' | sort")
    assert seen.code == 0, f"{name} sees no claim variable: {seen.err}"
    assert seen.out.split() == [f"{claim_env(claim)}=true"], seen.out
    return result["pool"], result["device"]


def test_claim_template_gang_held_whole_then_bound_whole_each_member_seeing_its_device(
    cluster: LocalCluster, raw: RawApi, namespace: str, real_node_names: list[str]
) -> None:
    """4 devices on 2 real nodes; a plain pod takes one. A gang of 4 members asking one
    each is held whole, naming the class; once the pod is gone it binds whole, 2 per
    node, each member running with its own prepared device."""
    wait_devices_free(raw)
    raw.call(
        "POST",
        namespaced(namespace, "resourceclaimtemplates"),
        body=one_device_template("one-gpu"),
    )
    blocker = with_claim(member("blocker", "", ""), "one-gpu")
    raw.call("POST", path_of("api", "v1", "namespaces", namespace, "pods"), body=blocker)
    prepared_device(cluster, raw, namespace, running(raw, namespace, "blocker"))

    members = [with_claim(member(f"train-{i}", "train", "worker"), "one-gpu") for i in range(4)]
    launch(raw, namespace, "train", members)
    message = wait_until(
        lambda: (
            "placeable" in (m := condition_message(get_podgroup(raw, namespace, "train"))) and m
        ),
        what="the hold to name the device class",
    )
    assert f"needs 4 devices of class {DRA_DEVICE_CLASS} in all" in message, message
    assert "3 free" in message, message
    time.sleep(HOLD_OBSERVATION_SECONDS)
    assert bound(list_pods(raw, namespace, f"{GROUP_LABEL}=train")) == [], (
        "no member may bind while a device is short"
    )

    delete_pod(raw, namespace, "blocker")
    pods = ready_members(raw, namespace, "train", 4)
    placed = sorted(p["spec"]["nodeName"] for p in pods)
    assert placed == sorted(real_node_names * 2), placed
    devices = {prepared_device(cluster, raw, namespace, pod) for pod in pods}
    assert len(devices) == 4, f"two members share a device: {devices}"


def with_implicit_resource(pod: dict[str, Any], count: int) -> dict[str, Any]:
    resources = pod["spec"]["containers"][0]["resources"]
    resources["requests"][IMPLICIT_RESOURCE] = count
    resources["limits"][IMPLICIT_RESOURCE] = count
    return pod


def extended_resource_devices(
    cluster: LocalCluster, raw: RawApi, namespace: str, pod: dict[str, Any], count: int
) -> set[tuple[str, str]]:
    """Check the claim kube-scheduler made for ``pod``'s DRA-served extended resource:
    ``count`` devices on its node, reserved for it, prepared (the container sees the
    claim's variable). The (pool, device)s it got."""
    name = pod["metadata"]["name"]
    status = pod["status"].get("extendedResourceClaimStatus") or {}
    assert status.get("resourceClaimName"), f"{name}: no extended-resource claim: {pod['status']}"
    claim = raw.call("GET", namespaced(namespace, "resourceclaims", status["resourceClaimName"]))
    results = claim["status"]["allocation"]["devices"]["results"]
    assert len(results) == count, results
    assert {r["pool"] for r in results} == {pod["spec"]["nodeName"]}
    reserved = claim["status"].get("reservedFor") or []
    assert [r["uid"] for r in reserved] == [pod["metadata"]["uid"]]
    seen = sh(cluster, namespace, name, "env | grep '^claim_' | sort")
    assert seen.code == 0, f"{name} sees no claim variable: {seen.err}"
    expected = sorted({f"{claim_env(claim, r['request'])}=true" for r in results})
    assert seen.out.split() == expected, seen.out
    return {(r["pool"], r["device"]) for r in results}


def test_gang_asking_the_classs_extended_resource_held_whole_then_bound_whole(
    cluster: LocalCluster, raw: RawApi, namespace: str, real_node_names: list[str]
) -> None:
    """The DRA-served extended resource (the class's implicit
    `deviceclass.resource.kubernetes.io/gpu.example.com`, no claim in the pod): a plain
    pod takes one of the 4 devices; a gang of 2 x 2 is held whole, then bound whole, one
    member a node, each running with the 2 devices kube-scheduler's claim gave it."""
    wait_devices_free(raw)
    blocker = with_implicit_resource(member("blocker", "", ""), 1)
    raw.call("POST", path_of("api", "v1", "namespaces", namespace, "pods"), body=blocker)
    extended_resource_devices(cluster, raw, namespace, running(raw, namespace, "blocker"), 1)

    members = [with_implicit_resource(member(f"xr-{i}", "xr", "worker"), 2) for i in range(2)]
    launch(raw, namespace, "xr", members)
    message = wait_until(
        lambda: "placeable" in (m := condition_message(get_podgroup(raw, namespace, "xr"))) and m,
        what="the hold to name the extended resource",
    )
    # The implicit resource is the class's devices: the hold names the class.
    assert f"needs 4 devices of class {DRA_DEVICE_CLASS} in all" in message, message
    assert "3 free" in message, message
    time.sleep(HOLD_OBSERVATION_SECONDS)
    assert bound(list_pods(raw, namespace, f"{GROUP_LABEL}=xr")) == [], (
        "no member may bind while a device is short"
    )

    delete_pod(raw, namespace, "blocker")
    pods = ready_members(raw, namespace, "xr", 2)
    assert sorted(p["spec"]["nodeName"] for p in pods) == sorted(real_node_names)
    devices = set().union(
        *(extended_resource_devices(cluster, raw, namespace, pod, 2) for pod in pods)
    )
    assert len(devices) == 4, f"two members share a device: {devices}"
