"""Gang members that ask DRA devices through ResourceClaimTemplates (docs/dra.md).

What a template asks, members planned only where their devices are free, a
member's own claim counted once (bound, or left allocated by a failed bind), and
the property that every allocated device is counted once whatever the order of
allocations, binds, Unreserves and deletions.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from extender.domain.devices.objects import ClaimTemplate, class_resource
from extender.domain.objects.policy import Policy
from extender.domain.planning.planner import Placement, plan_gang
from tests.builders import make_cluster_state, make_pod
from tests.unit.test_dra_devices import DRIVER, claim_obj, class_obj, dra_node, slice_obj

# ---- members asking devices through ResourceClaimTemplates ----


def template_obj(
    name: str, *requests: dict[str, Any], namespace: str = "default"
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"spec": {"devices": {"requests": list(requests)}}},
    }


def exactly(device_class: str, count: int | None = None, mode: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"deviceClassName": device_class}
    if count is not None:
        spec["count"] = count
    if mode is not None:
        spec["allocationMode"] = mode
    return {"name": "r", "exactly": spec}


@pytest.mark.parametrize(
    ("requests", "needs", "unsupported"),
    [
        ([exactly("gpu")], {"gpu": 1}, None),
        ([exactly("gpu", 2), exactly("gpu", 1), exactly("nic", 1)], {"gpu": 3, "nic": 1}, None),
        ([exactly("gpu", mode="Some")], {}, "allocationMode Some"),
        ([{"name": "r"}], {}, "neither exactly nor firstAvailable"),
        (
            [
                {
                    "name": "r",
                    "firstAvailable": [{"name": "a", "deviceClassName": "gpu", "count": 0}],
                }
            ],
            {},
            "subrequest 'r/a' has count 0",
        ),
        ([exactly("gpu", 0)], {}, "count 0"),
    ],
)
def test_what_a_claim_template_asks(
    requests: list[dict[str, Any]], needs: dict[str, int], unsupported: str | None
) -> None:
    template = ClaimTemplate.from_api(template_obj("t", *requests))
    assert dict(template.needs) == needs
    if unsupported is None:
        assert template.unsupported is None
    else:
        assert template.unsupported is not None and unsupported in template.unsupported


def member_with_claims(name: str, *claims: dict[str, str], group: str = "g") -> dict[str, Any]:
    pod = make_pod(name).group(group).obj()
    pod["metadata"]["uid"] = name
    pod["metadata"]["annotations"] = {"gang-extender.io/min-available": "4"}
    pod["spec"]["resourceClaims"] = list(claims)
    return pod


GPU_CLASS = class_resource("gpu")


def test_claim_template_members_are_planned_only_where_devices_are_free() -> None:
    state = make_cluster_state()
    state.on_page("nodes", [dra_node("n1"), dra_node("n2")], True, True)
    state.on_page(
        "deviceclasses",
        [class_obj("gpu", f'device.driver == "{DRIVER}"', extended=None)],
        True,
        True,
    )
    state.on_page("resourceslices", [slice_obj("s1", "n1", 2)], True, True)
    pods = [
        member_with_claims(f"m{i}", {"name": "gpu", "resourceClaimTemplateName": "one-gpu"})
        for i in range(4)
    ]
    for pod in pods:
        state.on_event("pods", "ADDED", pod)
    snapshot = state.core.snapshot
    # The template is not seen yet: the members' needs are unknown, and said so.
    assert "ResourceClaimTemplate one-gpu not found" in (snapshot.pods["m0"].group_error or "")
    state.on_page("resourceclaimtemplates", [template_obj("one-gpu", exactly("gpu"))], True, True)
    member = snapshot.pods["m0"]
    assert member.group_error is None
    assert member.requests[GPU_CLASS] == 1 and member.device_claims == ("gpu",)

    members = [snapshot.pods[f"m{i}"] for i in range(4)]
    free = {n: snapshot.free(n) for n in ("n1", "n2")}
    outcome = plan_gang(members, free, snapshot.nodes, Policy())
    assert not isinstance(outcome, Placement)
    assert "needs 4 devices of class gpu in all (1 for m" in outcome.message
    assert "2 free, largest free node has 2" in outcome.message

    state.on_event("resourceslices", "ADDED", slice_obj("s2", "n2", 2))
    free = {n: snapshot.free(n) for n in ("n1", "n2")}
    outcome = plan_gang(members, free, snapshot.nodes, Policy())
    assert isinstance(outcome, Placement)
    assert sorted(outcome.nodes.values()) == ["n1", "n1", "n2", "n2"]


def test_a_bound_members_template_claim_is_counted_once() -> None:
    state = make_cluster_state()
    state.on_page("nodes", [dra_node("n1")], True, True)
    state.on_page(
        "deviceclasses",
        [class_obj("gpu", f'device.driver == "{DRIVER}"', extended=None)],
        True,
        True,
    )
    state.on_page("resourceslices", [slice_obj("s1", "n1", 2)], True, True)
    state.on_page("resourceclaimtemplates", [template_obj("one-gpu", exactly("gpu"))], True, True)
    pod = member_with_claims("m0", {"name": "gpu", "resourceClaimTemplateName": "one-gpu"})
    pod["spec"]["nodeName"] = "n1"
    pod["status"]["phase"] = "Running"
    state.on_event("pods", "ADDED", pod)
    claim = claim_obj("m0-gpu", [("n1", "s1-0")], owner="m0")
    claim["metadata"]["annotations"] = {"resource.kubernetes.io/pod-claim-name": "gpu"}
    state.on_event("resourceclaims", "ADDED", claim)
    assert state.core.snapshot.free("n1")[GPU_CLASS] == 1
    # A claim the member does not count in its requests (named directly) takes its device.
    shared = claim_obj("shared", [("n1", "s1-1")])
    state.on_event("resourceclaims", "ADDED", shared)
    assert state.core.snapshot.free("n1")[GPU_CLASS] == 0


def test_a_claim_left_allocated_by_a_failed_bind_is_not_asked_again() -> None:
    """kube-scheduler allocates a member's claim, our bind barrier times out, and its
    Unreserve takes the member out of the claim's reservedFor but leaves the
    allocation: the member has its device already. It must not need one more (the
    gang would wait forever for a device it holds), and the device is taken."""
    state = make_cluster_state()
    state.on_page("nodes", [dra_node("n1")], True, True)
    state.on_page(
        "deviceclasses",
        [class_obj("gpu", f'device.driver == "{DRIVER}"', extended=None)],
        True,
        True,
    )
    state.on_page("resourceslices", [slice_obj("s1", "n1", 2)], True, True)
    state.on_page("resourceclaimtemplates", [template_obj("one-gpu", exactly("gpu"))], True, True)
    for i in range(2):
        pod = member_with_claims(f"m{i}", {"name": "gpu", "resourceClaimTemplateName": "one-gpu"})
        pod["metadata"]["annotations"]["gang-extender.io/min-available"] = "2"
        state.on_event("pods", "ADDED", pod)
    snapshot = state.core.snapshot
    claim = claim_obj("m0-gpu", [("n1", "s1-0")], owner="m0")
    claim["metadata"]["annotations"] = {"resource.kubernetes.io/pod-claim-name": "gpu"}
    claim["status"]["reservedFor"] = [{"resource": "pods", "name": "m0", "uid": "m0"}]
    state.on_event("resourceclaims", "ADDED", claim)  # PreBind: allocated, reserved for m0
    assert snapshot.pods["m0"].requests[GPU_CLASS] == 1
    del claim["status"]["reservedFor"]
    state.on_event("resourceclaims", "MODIFIED", claim)  # Unreserve after the failed bind
    assert snapshot.pods["m0"].requests.get(GPU_CLASS, 0) == 0
    assert snapshot.free("n1")[GPU_CLASS] == 1
    members = [snapshot.pods["m0"], snapshot.pods["m1"]]
    outcome = plan_gang(members, {"n1": snapshot.free("n1")}, snapshot.nodes, Policy())
    assert isinstance(outcome, Placement), outcome


STEPS = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=2),  # which member
        st.sampled_from(["allocate", "unreserve", "bind", "delete-pod", "delete-claim"]),
    ),
    max_size=14,
)


@settings(max_examples=200, deadline=None)
@given(steps=STEPS)
def test_every_allocated_device_is_counted_once_whatever_the_order(
    steps: list[tuple[int, str]],
) -> None:
    """Members of a gang with one device each (a claim template); kube-scheduler
    allocates and reserves their claims (PreBind), binds them, or takes them out of
    the claims after a failed bind (Unreserve); pods and claims go in any order. The
    node's free devices are always its devices less the claims allocated: never one
    counted twice (a bound member's request and its claim), never one lost."""
    devices = 3
    state = make_cluster_state()
    state.on_page("nodes", [dra_node("n1")], True, True)
    state.on_page(
        "deviceclasses",
        [class_obj("gpu", f'device.driver == "{DRIVER}"', extended=None)],
        True,
        True,
    )
    state.on_page("resourceslices", [slice_obj("s1", "n1", devices)], True, True)
    state.on_page("resourceclaimtemplates", [template_obj("one-gpu", exactly("gpu"))], True, True)
    pods: dict[int, dict[str, Any]] = {}
    claims: dict[int, dict[str, Any]] = {}
    for i in range(3):
        pods[i] = member_with_claims(
            f"m{i}", {"name": "gpu", "resourceClaimTemplateName": "one-gpu"}
        )
        pods[i]["metadata"]["annotations"]["gang-extender.io/min-available"] = "3"
        state.on_event("pods", "ADDED", pods[i])
    for i, action in steps:
        pod, claim = pods.get(i), claims.get(i)
        if (
            action == "allocate"
            and claim is None
            and pod is not None
            and not pod["spec"].get("nodeName")
        ):
            claims[i] = claim_obj(f"m{i}-gpu", [("n1", f"s1-{i}")], owner=f"m{i}")
            claims[i]["metadata"]["annotations"] = {"resource.kubernetes.io/pod-claim-name": "gpu"}
            claims[i]["status"]["reservedFor"] = [
                {"resource": "pods", "name": f"m{i}", "uid": f"m{i}"}
            ]
            state.on_event("resourceclaims", "ADDED", claims[i])
        elif (
            action == "unreserve"
            and claim is not None
            and pod is not None
            and not pod["spec"].get("nodeName")
        ):
            claim["status"].pop("reservedFor", None)
            state.on_event("resourceclaims", "MODIFIED", claim)
        elif (
            action == "bind"
            and claim is not None
            and pod is not None
            and claim["status"].get("reservedFor")
        ):
            pod["spec"]["nodeName"] = "n1"
            pod["status"]["phase"] = "Running"
            state.on_event("pods", "MODIFIED", pod)
        elif action == "delete-pod" and pod is not None:
            state.on_event("pods", "DELETED", pods.pop(i))
        elif (
            action == "delete-claim"
            and claim is not None
            and not (pod is not None and claim["status"].get("reservedFor"))
        ):
            # The API server keeps a claim reserved for a live pod (its finalizer).
            state.on_event("resourceclaims", "DELETED", claims.pop(i))
        allocated = len(claims)
        free = state.core.snapshot.free("n1")[GPU_CLASS]
        assert free == devices - allocated, (steps, free, allocated)
