"""What the core reads from a pod or node object (domain/model.py) when a field is
missing or wrong: the defaults Kubernetes itself applies, and what is held back."""

from __future__ import annotations

from typing import Any

from extender.domain.model import STARVATION_ANNOTATION, NodeInfo, PodInfo, Taint
from extender.domain.snapshot import fits
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
