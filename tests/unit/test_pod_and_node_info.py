"""What the core reads from a pod or node object (domain/objects/model.py) when a field is
missing or wrong: the defaults Kubernetes itself applies, and what is held back."""

from __future__ import annotations

from typing import Any

import pytest

from extender.domain.cluster.snapshot import fits
from extender.domain.objects.membership import GroupKey
from extender.domain.objects.model import (
    PLACEHOLDER_LABEL,
    STARVATION_ANNOTATION,
    NodeInfo,
    PodInfo,
    Taint,
)
from extender.domain.objects.policy import (
    KUEUE_PREFERRED_TOPOLOGY,
    KUEUE_REQUIRED_TOPOLOGY,
    topology_from_annotations,
)
from tests.builders import make_node, make_pod


def test_a_node_without_allocatable_is_read_by_its_capacity() -> None:
    obj = make_node("n1").gpus(4).obj()
    obj["status"]["capacity"] = obj["status"].pop("allocatable")
    assert NodeInfo.from_api(obj).allocatable["nvidia.com/gpu"] == 4


def test_a_pod_with_an_unreadable_request_counts_as_one_pod_and_is_held_saying_why() -> None:
    obj = make_pod("w0").group("g").obj()
    obj["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    pod = PodInfo.from_api(obj)
    assert pod.requests == {"pods": 1}
    assert pod.group_error is not None
    assert pod.group_error.startswith("unreadable resource request: ")


def test_a_bad_starvation_annotation_holds_a_gang_member_but_not_a_plain_pod() -> None:
    plain = make_pod("p").annotation(STARVATION_ANNOTATION, "soon").obj()
    member = make_pod("m").group("g").annotation(STARVATION_ANNOTATION, "soon").obj()
    assert PodInfo.from_api(plain).group_error is None
    assert PodInfo.from_api(member).group_error is not None


def test_a_toleration_without_an_operator_is_equal() -> None:
    obj = make_pod("p").obj()
    obj["spec"]["tolerations"] = [{"key": "dedicated", "value": "infer"}]
    (toleration,) = PodInfo.from_api(obj).tolerations
    assert toleration.tolerates(Taint("dedicated", "infer", "NoSchedule"))
    assert not toleration.tolerates(Taint("dedicated", "train", "NoSchedule"))


def test_a_pod_without_a_uid_is_known_by_namespace_and_name() -> None:
    obj: dict[str, Any] = make_pod("p").obj()
    obj["metadata"].pop("uid", None)
    obj["metadata"]["namespace"] = "team-a"
    pod = PodInfo.from_api(obj)
    assert (pod.uid, pod.namespace) == ("team-a/p", "team-a")


def test_a_request_fits_only_where_the_node_lists_the_resource() -> None:
    assert not fits({"nvidia.com/gpu": 1}, {"cpu": 4000})
    # A zero request is no request, even of a resource the node is short of.
    assert fits({"nvidia.com/gpu": 1, "memory": 0}, {"nvidia.com/gpu": 1, "memory": -5})


def test_fields_a_pod_object_may_leave_out_take_kubernetes_defaults() -> None:
    obj = make_pod("p").obj()
    obj["metadata"].pop("namespace", None)
    obj.pop("status", None)
    obj["spec"].pop("preemptionPolicy", None)
    obj["metadata"].pop("creationTimestamp", None)
    pod = PodInfo.from_api(obj)
    assert (pod.namespace, pod.phase, pod.preemption_policy) == (
        "default",
        "Pending",
        "PreemptLowerPriority",
    )
    assert pod.created == 0.0  # no creationTimestamp: oldest of all


def test_an_unreadable_creation_time_sorts_as_oldest() -> None:
    obj = make_pod("p").obj()
    for unreadable in ("yesterday", "yesterday", 1795341600, ["2026-11-22T10:00:00Z"]):
        obj["metadata"]["creationTimestamp"] = unreadable
        assert PodInfo.from_api(obj).created == 0.0
    obj["metadata"]["creationTimestamp"] = "2026-11-22T10:00:00Z"
    assert PodInfo.from_api(obj).created == 1795341600.0
    obj["metadata"]["creationTimestamp"] = "2026-11-22T10:00:01+00:00"
    assert PodInfo.from_api(obj).created == 1795341601.0


def test_a_placeholder_pod_names_its_gang_in_its_namespace() -> None:
    obj = make_pod("hold").label(PLACEHOLDER_LABEL, "big").obj()
    obj["metadata"].pop("namespace", None)
    assert PodInfo.from_api(obj).placeholder_for == GroupKey("default", "big")
    obj["metadata"]["labels"][PLACEHOLDER_LABEL] = ""
    assert PodInfo.from_api(obj).placeholder_for is None


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("0.5", 0.5), ("30", 30.0), ("0", None), ("-3", None), ("inf", None), ("soon", None)],
)
def test_the_starvation_annotation_is_a_positive_finite_number(
    value: str, seconds: float | None
) -> None:
    pod = PodInfo.from_api(make_pod("m").group("g").annotation(STARVATION_ANNOTATION, value).obj())
    assert pod.starvation_seconds == seconds
    if seconds is None:
        assert pod.group_error == (
            f"annotation {STARVATION_ANNOTATION}={value!r} must be a number of seconds > 0"
        )


def with_conditions(*conditions: dict[str, Any]) -> PodInfo:
    obj = make_pod("p").obj()
    obj["status"] = {"phase": "Pending", "conditions": list(conditions)}
    return PodInfo.from_api(obj)


def test_a_pod_is_disrupted_only_by_a_true_disruption_target_condition() -> None:
    target = {"type": "DisruptionTarget", "status": "True"}
    assert with_conditions({**target, "reason": "PreemptionByScheduler"}).disruption == (
        "PreemptionByScheduler"
    )
    assert with_conditions(target).disruption == "DisruptionTarget"
    assert with_conditions({**target, "status": "False"}).disruption is None
    assert with_conditions({"type": "Ready", "status": "True"}).disruption is None


def test_a_pod_read_in_one_pass_of_its_conditions_gets_the_first_of_each_kind() -> None:
    pod = with_conditions(
        {"type": "Ready", "status": "False", "message": "not this"},
        "not a condition",  # type: ignore[arg-type]
        {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"},
        {"type": "PodScheduled", "status": "False", "message": "0/3 nodes"},
        {"type": "PodScheduled", "status": "False", "message": "a later one"},
        {"type": "DisruptionTarget", "status": "True", "reason": "a later one"},
    )
    assert (pod.unschedulable_message, pod.disruption) == ("0/3 nodes", "EvictionByEvictionAPI")
    scheduled_first = with_conditions(
        {"type": "PodScheduled", "status": "True"},
        {"type": "PodScheduled", "status": "False", "message": "0/3 nodes"},
    )
    assert scheduled_first.unschedulable_message == "0/3 nodes"


def test_only_a_false_pod_scheduled_condition_gives_the_unschedulable_message() -> None:
    unscheduled = {"type": "PodScheduled", "status": "False"}
    assert with_conditions({**unscheduled, "message": "0/3 nodes"}).unschedulable_message == (
        "0/3 nodes"
    )
    assert with_conditions(unscheduled).unschedulable_message is None
    assert (
        with_conditions({"type": "Ready", "status": "False", "message": "x"}).unschedulable_message
        is None
    )
    assert (
        with_conditions(
            {"type": "PodScheduled", "status": "True", "message": "x"}
        ).unschedulable_message
        is None
    )


def test_both_kueue_topology_annotations_on_a_pod_say_to_set_one() -> None:
    annotations = {KUEUE_REQUIRED_TOPOLOGY: "zone", KUEUE_PREFERRED_TOPOLOGY: "rack"}
    assert topology_from_annotations(annotations) == (
        None,
        f"annotations {KUEUE_REQUIRED_TOPOLOGY} and {KUEUE_PREFERRED_TOPOLOGY} are both set; "
        "Kueue allows one of them, set only one",
    )
