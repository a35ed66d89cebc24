"""Gang preemption, whole gangs only, on the real kube-scheduler, API server and KWOK
GPU nodes (issue 13, item 3).

A high-priority gang that fits only by evicting a running low-priority gang gets
it evicted whole and is bound, with Events on both; a gang that opted out
(`preemptible: false`) is left running. kube-scheduler's own preemption for a
high-priority plain pod (its own scheduler's or the default one) never leaves
part of a low gang running. A PodDisruptionBudget that forbids the eviction
keeps the low gang whole and running. A victim the API server forbids the
service to mark (403) is a refused eviction: the preemptor's hold on its nodes is
dropped at once and the victim is not chosen again. PriorityClasses are the test's own.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from extender.devcluster.priority_classes import temporary_priority_classes
from extender.domain.objects.membership import ADMISSION_GATE
from extender.domain.preemption.preemption import PREEMPTED_BY_ANNOTATION
from extender.kube.rawapi import KubeError, RawApi, path_of
from tests.e2e.gang_fixtures import (  # noqa: F401 (no_partial_gangs is a fixture)
    bound,
    condition_message,
    create,
    events,
    gang_pod,
    get_podgroup,
    list_pods,
    no_partial_gangs,
    planned,
    podgroup,
    wait_until,
)

LOW, HIGH = 10, 1000

pytestmark = pytest.mark.usefixtures("no_partial_gangs")


@pytest.fixture
def priority_classes(raw: RawApi) -> Iterator[dict[int, str]]:
    """Two PriorityClasses, low and high, both allowed to preempt; deleted after."""
    suffix = uuid.uuid4().hex[:6]
    names = {LOW: f"e2e-preempt-low-{suffix}", HIGH: f"e2e-preempt-high-{suffix}"}
    with temporary_priority_classes(raw, {name: value for value, name in names.items()}):
        yield names


def pod(
    name: str, group: str, selector: dict[str, str], priority_class: str, **kw: Any
) -> dict[str, Any]:
    obj = gang_pod(name, group, gpus=1, node_selector=selector, **kw)
    obj["spec"]["priorityClassName"] = priority_class
    # KWOK deletes a pod at once on eviction; a grace period would only slow the test.
    obj["spec"]["terminationGracePeriodSeconds"] = 0
    return obj


def names(pods: list[dict[str, Any]], prefix: str) -> set[str]:
    return {p["metadata"]["name"] for p in pods if p["metadata"]["name"].startswith(prefix)}


def start_low_gang(
    raw: RawApi, namespace: str, selector: dict[str, str], classes: dict[int, str], **spec: Any
) -> None:
    create(raw, namespace, podgroup("low", 2, **spec))
    for i in range(2):
        create(raw, namespace, pod(f"low-{i}", "low", selector, classes[LOW]))
    wait_until(
        lambda: names(bound(list_pods(raw, namespace)), "low") == {"low-0", "low-1"},
        what="the low-priority gang to be bound on both GPUs",
    )


def low_gang_is_whole_or_gone(raw: RawApi, namespace: str) -> Callable[[], bool]:
    def check() -> bool:
        return not names(bound(list_pods(raw, namespace)), "low")

    return check


def test_a_high_priority_gang_evicts_a_running_low_gang_whole_and_is_bound(
    gang_stack, raw, namespace, gpu_nodes, priority_classes
) -> None:
    selector = gpu_nodes(2, gpus=1).node_selector
    start_low_gang(raw, namespace, selector, priority_classes)

    create(raw, namespace, podgroup("high", 2))
    for i in range(2):
        create(raw, namespace, pod(f"high-{i}", "high", selector, priority_classes[HIGH]))

    wait_until(
        lambda: names(bound(list_pods(raw, namespace)), "high") == {"high-0", "high-1"},
        what="the high-priority gang to be bound",
    )
    assert names(bound(list_pods(raw, namespace)), "low") == set(), "no low member left bound"
    wait_until(
        lambda: (
            {e["involvedObject"]["name"] for e in events(raw, namespace, "PreemptedByGang")}
            == {"low-0", "low-1"}
        ),
        what="a PreemptedByGang Event on each low member",
    )
    victim = events(raw, namespace, "PreemptedByGang")[0]
    assert f"gang {namespace}/high (priority {HIGH})" in victim["message"]
    wait_until(
        lambda: (
            {e["involvedObject"]["name"] for e in events(raw, namespace, "GangPreempting")}
            >= {"high-0", "high-1"}
        ),
        what="a GangPreempting Event on the high gang's members",
    )
    preempting = events(raw, namespace, "GangPreempting")[0]["message"]
    assert f"preempting gang {namespace}/low (priority {LOW})" in preempting


def test_a_gang_that_opted_out_of_preemption_keeps_running(
    gang_stack, raw, namespace, gpu_nodes, priority_classes
) -> None:
    selector = gpu_nodes(2, gpus=1).node_selector
    start_low_gang(raw, namespace, selector, priority_classes, preemptible=False)

    create(raw, namespace, podgroup("high", 2))
    for i in range(2):
        create(raw, namespace, pod(f"high-{i}", "high", selector, priority_classes[HIGH]))

    # kube-scheduler tried the high gang (FailedScheduling comes after its preemption
    # asked the preempt verb), and the service decided: the gang waits.
    wait_until(
        lambda: any(
            e["involvedObject"]["name"].startswith("high")
            for e in events(raw, namespace, "FailedScheduling")
        ),
        what="kube-scheduler to try the high gang",
    )
    wait_until(
        lambda: (
            f"gang {namespace}/high:" in condition_message(get_podgroup(raw, namespace, "high"))
        ),
        what="the high gang's hold message",
    )
    message = condition_message(get_podgroup(raw, namespace, "high"))
    assert "preempting" not in message, message
    assert events(raw, namespace, "PreemptedByGang") == []
    running = bound(list_pods(raw, namespace))
    assert names(running, "low") == {"low-0", "low-1"}
    assert not any(p["metadata"].get("deletionTimestamp") for p in running)
    assert names(running, "high") == set()


def test_a_gang_its_disruption_budget_protects_keeps_running_and_says_why(
    gang_stack, raw, namespace, gpu_nodes, priority_classes
) -> None:
    selector = gpu_nodes(2, gpus=1).node_selector
    raw.call(
        "POST",
        path_of("apis", "policy", "v1", "namespaces", namespace, "poddisruptionbudgets"),
        body={
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "low"},
            "spec": {
                "minAvailable": 2,
                "selector": {"matchLabels": {"gang-extender.io/group": "low"}},
            },
        },
    )
    start_low_gang(raw, namespace, selector, priority_classes)

    create(raw, namespace, podgroup("high", 2))
    for i in range(2):
        create(raw, namespace, pod(f"high-{i}", "high", selector, priority_classes[HIGH]))

    refused = wait_until(
        lambda: events(raw, namespace, "PreemptionRefused"),
        what="the budget to refuse the low gang's eviction",
    )
    # Members go one after another: the first refused, the second is never asked.
    assert [e["involvedObject"]["name"] for e in refused] in (["low-0"], ["low-1"])
    assert events(raw, namespace, "PreemptedByGang") == []
    running = bound(list_pods(raw, namespace))
    assert names(running, "low") == {"low-0", "low-1"}
    assert not any(p["metadata"].get("deletionTimestamp") for p in running)
    assert names(running, "high") == set()


@pytest.mark.parametrize("scheduler", ["gang-extender", "default-scheduler"])
def test_kube_schedulers_preemption_for_a_plain_pod_never_leaves_part_of_a_gang(
    gang_stack, raw, namespace, gpu_nodes, priority_classes, scheduler
) -> None:
    selector = gpu_nodes(2, gpus=1).node_selector
    start_low_gang(raw, namespace, selector, priority_classes)

    create(raw, namespace, pod("urgent", "", selector, priority_classes[HIGH], scheduler=scheduler))
    wait_until(
        lambda: names(bound(list_pods(raw, namespace)), "urgent") == {"urgent"},
        what="the high-priority plain pod to be bound by preemption",
    )
    # kube-scheduler evicted one low member; the service evicts the other.
    wait_until(
        low_gang_is_whole_or_gone(raw, namespace),
        what="the low gang to be gone whole (no member left running alone)",
    )


ADMISSION = ("apis", "admissionregistration.k8s.io", "v1")


@contextlib.contextmanager
def marks_forbidden_in(raw: RawApi, namespace: str) -> Iterator[None]:
    """The API server answers 403 to any change of a pod's preempted-by annotation in
    `namespace`, as it does where the service has no RoleBinding: a real refusal from
    a ValidatingAdmissionPolicy (reason Forbidden), scoped to that namespace."""
    name = f"e2e-no-preempt-mark-{namespace}"[:63]
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["UPDATE"],
                        "resources": ["pods"],
                    }
                ]
            },
            "validations": [
                {
                    "expression": (
                        f"object.metadata.?annotations[?'{PREEMPTED_BY_ANNOTATION}'] == "
                        f"oldObject.metadata.?annotations[?'{PREEMPTED_BY_ANNOTATION}']"
                    ),
                    "message": "e2e: the service has no RoleBinding here",
                    "reason": "Forbidden",
                }
            ],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {
            "policyName": name,
            "validationActions": ["Deny"],
            "matchResources": {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
            },
        },
    }
    raw.call("POST", path_of(*ADMISSION, "validatingadmissionpolicies"), body=policy)
    raw.call("POST", path_of(*ADMISSION, "validatingadmissionpolicybindings"), body=binding)
    try:
        yield
    finally:
        for plural in ("validatingadmissionpolicybindings", "validatingadmissionpolicies"):
            with contextlib.suppress(KubeError):
                raw.call("DELETE", path_of(*ADMISSION, plural, name))


def mark_refused(raw: RawApi, namespace: str, pod_name: str) -> bool:
    """A dry-run mark of `pod_name` is answered 403 (the policy is in force)."""
    try:
        raw.call(
            "PATCH",
            path_of("api", "v1", "namespaces", namespace, "pods", pod_name),
            query={"dryRun": "All"},
            body={"metadata": {"annotations": {PREEMPTED_BY_ANNOTATION: "probe"}}},
            content_type="application/merge-patch+json",
        )
    except KubeError as err:
        return err.status == 403
    return False


def test_a_victim_the_service_may_not_mark_is_refused_once_and_holds_no_node(
    gang_stack, raw, namespace, gpu_nodes, priority_classes
) -> None:
    """Issue 30, finding 4: the 403 used to be dropped on the floor, so the high gang
    kept the victims' nodes reserved for the whole hold (120 s) and then chose the
    same victim again, forever."""
    selector = gpu_nodes(2, gpus=1).node_selector
    start_low_gang(raw, namespace, selector, priority_classes)
    with marks_forbidden_in(raw, namespace):
        wait_until(lambda: mark_refused(raw, namespace, "low-0"), what="the policy in force")
        create(raw, namespace, podgroup("high", 2))
        for i in range(2):
            create(raw, namespace, pod(f"high-{i}", "high", selector, priority_classes[HIGH]))

        refused = wait_until(
            lambda: events(raw, namespace, "PreemptionRefused"),
            what="the service to say the victim was not evicted",
        )
        message = refused[0]["message"]
        assert "mark it preempted" in message and "status 403" in message, message
        assert f"gang {namespace}/low is left out of gang preemption" in message, message
        # The hold is dropped at once, not after preemption_hold_seconds (120 s).
        dropped = wait_until(
            lambda: [
                e
                for e in events(raw, namespace, "GangWaiting")
                if f"the eviction of gang {namespace}/low was refused (status 403" in e["message"]
            ],
            what="the high gang's hold dropped because the eviction was refused",
        )
        assert {e["involvedObject"]["name"] for e in dropped} <= {"high-0", "high-1"}
        wait_until(
            lambda: (
                not any(
                    planned(p)
                    for p in list_pods(raw, namespace)
                    if p["metadata"]["name"].startswith("high")
                )
            ),
            what="no high member planned on the victims' nodes any more",
        )
        # Tried again after the drop: it waits, without choosing the same victim.
        wait_until(
            lambda: (
                (msg := condition_message(get_podgroup(raw, namespace, "high")))
                and "plan dropped" not in msg
                and "preempting" not in msg
            ),
            what="the high gang held again, not preempting",
        )
        assert len(events(raw, namespace, "PreemptionRefused")) == 1, "the victim chosen again"
        running = bound(list_pods(raw, namespace))
        assert names(running, "low") == {"low-0", "low-1"}, "the low gang keeps running whole"
        assert names(running, "high") == set()


def test_a_gated_high_priority_gang_evicts_the_low_gang_then_is_ungated_and_bound(
    gang_stack, raw, namespace, gpu_nodes, priority_classes
) -> None:
    """Gated admission (docs/design.md#gated-admission): the service preempts for a
    gang kube-scheduler never saw, and lifts the gate only once the victims are gone."""
    selector = gpu_nodes(2, gpus=1).node_selector
    start_low_gang(raw, namespace, selector, priority_classes)

    create(raw, namespace, podgroup("high", 2))
    for i in range(2):
        member = pod(f"high-{i}", "high", selector, priority_classes[HIGH])
        member["spec"]["schedulingGates"] = [{"name": ADMISSION_GATE}]
        create(raw, namespace, member)

    wait_until(
        lambda: names(bound(list_pods(raw, namespace)), "high") == {"high-0", "high-1"},
        what="the gated high-priority gang to be bound",
    )
    assert names(bound(list_pods(raw, namespace)), "low") == set(), "no low member left bound"
    # kube-scheduler never tried a high member while a low one held its node.
    assert [
        e
        for e in events(raw, namespace, "FailedScheduling")
        if e["involvedObject"]["name"].startswith("high")
    ] == []
