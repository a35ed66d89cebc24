"""The body that recreates a member on a gang restart (domain/lifecycle/lifecycle.py,
`recreated_pod`): a v1 Pod with the member's own labels plus the restart generation,
no annotations left when only the planned node was there, and valid for a member
that was never bound."""

from __future__ import annotations

from typing import Any

from extender.domain.lifecycle.lifecycle import RESTART_GENERATION_LABEL, recreated_pod


def member(**metadata: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "worker-0", "namespace": "ns", "uid": "u", **metadata},
        "spec": {"schedulerName": "gang-extender", "containers": [{"name": "c"}]},
    }


def test_the_body_is_a_v1_pod() -> None:
    body = recreated_pod(member(), 1)
    assert body["apiVersion"] == "v1"
    assert body["kind"] == "Pod"
    assert set(body) == {"apiVersion", "kind", "metadata", "spec"}


def test_the_members_own_labels_are_kept_beside_the_restart_generation() -> None:
    body = recreated_pod(member(labels={"gang-extender.io/group": "g", "app": "train"}), 3)
    assert body["metadata"]["labels"] == {
        "gang-extender.io/group": "g",
        "app": "train",
        RESTART_GENERATION_LABEL: "3",
    }


def test_only_a_planned_node_annotation_leaves_no_annotations() -> None:
    body = recreated_pod(member(annotations={"gang-extender.io/planned-node": "n1"}), 1)
    assert "annotations" not in body["metadata"]


def test_a_member_never_bound_and_without_annotations_is_recreated_as_it_was() -> None:
    body = recreated_pod(member(), 2)
    assert body["metadata"] == {
        "name": "worker-0",
        "namespace": "ns",
        "labels": {RESTART_GENERATION_LABEL: "2"},
    }
    assert body["spec"] == {"schedulerName": "gang-extender", "containers": [{"name": "c"}]}
