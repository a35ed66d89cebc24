"""What the service created is told apart by a seal only it can compute (kube/ownership.py).

Issue 30, finding 6: a pod labelled gang-extender.io/placeholder counted as a gang's
room and was deleted by the service, whoever made it. Now the watch adapter
(ClusterState) hands the core a placeholder only when its seal matches; any other
labelled pod is an ordinary pod: it holds what it requests, and nothing deletes it.
The wiring objects' seals: tests/unit/test_webhook_wiring.py (TestPlantedObjects).
"""

from __future__ import annotations

import copy
from typing import Any

from extender.controller.cluster_state import ClusterState
from extender.domain.state.decisions import PlaceholderCreate, PlaceholderDelete
from extender.kube.ownership import SEAL_ANNOTATION, OwnershipSeal
from extender.kube.reservation_writes import placeholder_pod
from tests.builders import make_node
from tests.unit.test_placeholders import deletes
from tests.unit.test_reservations import BIG, T0, core_with

TOKEN = "the-webhook-path-token"


def placeholder(
    seal: OwnershipSeal, *, name: str = "big-hold-n1-1", node: str = "n1"
) -> dict[str, Any]:
    """A placeholder pod as `seal`'s service creates it, as the watch delivers it."""
    body = placeholder_pod(
        namespace=BIG.namespace,
        name=name,
        group=BIG.name,
        node=node,
        gpus=2,
        owner=None,
        seal=seal.placeholder(namespace=BIG.namespace, name=name, group=BIG.name, node=node),
    )
    body["metadata"]["uid"] = f"uid-{name}"
    body["status"] = {"phase": "Running"}
    return body


def watched(pod: dict[str, Any]) -> ClusterState:
    core = core_with([make_node("n1").gpus(4).obj()])
    state = ClusterState(core, flush_effects=lambda: None, seal=OwnershipSeal(TOKEN))
    state.on_event("pods", "ADDED", pod)
    return state


def test_a_placeholder_this_service_created_is_a_gangs_room_and_deleted_when_unwanted() -> None:
    state = watched(placeholder(OwnershipSeal(TOKEN)))
    assert state.core.snapshot.pods["uid-big-hold-n1-1"].placeholder_for == BIG
    state.core.expire(T0)  # no reservation wants it
    assert deletes(state.core.drain_effects()) == [PlaceholderDelete(BIG, "big-hold-n1-1")]


def test_a_pod_that_only_carries_the_label_is_an_ordinary_pod_never_deleted() -> None:
    planted = placeholder(OwnershipSeal(TOKEN))
    del planted["metadata"]["annotations"]
    state = watched(planted)
    pod = state.core.snapshot.pods["uid-big-hold-n1-1"]
    assert pod.placeholder_for is None, "not a gang's room"
    assert pod.holds_capacity, "its GPUs are taken like any pod's"
    state.core.expire(T0)
    assert deletes(state.core.drain_effects()) == []


def test_a_seal_made_under_another_key_or_copied_to_another_pod_is_not_ours() -> None:
    other_service = watched(placeholder(OwnershipSeal("someone-elses-token")))
    assert other_service.core.snapshot.pods["uid-big-hold-n1-1"].placeholder_for is None
    # Our seal, copied onto a pod on another node under the same name.
    copied = placeholder(OwnershipSeal(TOKEN))
    copied["spec"]["nodeName"] = "n2"
    assert watched(copied).core.snapshot.pods["uid-big-hold-n1-1"].placeholder_for is None
    # ... or relabelled for another group.
    moved = copy.deepcopy(placeholder(OwnershipSeal(TOKEN)))
    moved["metadata"]["labels"]["gang-extender.io/placeholder"] = "other"
    assert watched(moved).core.snapshot.pods["uid-big-hold-n1-1"].placeholder_for is None


def test_the_effect_writer_seals_what_it_creates() -> None:
    seal = OwnershipSeal(TOKEN)
    effect = PlaceholderCreate(BIG, "big-hold-n1-1", "n1", 2)
    body = placeholder(seal)
    assert body["metadata"]["annotations"][SEAL_ANNOTATION] == seal.placeholder(
        namespace=BIG.namespace, name=effect.name, group=BIG.name, node=effect.node
    )
    assert seal.is_our_placeholder(body, BIG.name)
    assert not OwnershipSeal().is_our_placeholder(body, BIG.name), "the key matters"


def test_an_objects_seal_is_bound_to_its_uid() -> None:
    seal = OwnershipSeal(TOKEN)
    secret = {"kind": "Secret", "metadata": {"namespace": "ns", "name": "g-ssh", "uid": "u-1"}}
    secret["metadata"]["annotations"] = {SEAL_ANNOTATION: seal.object_seal(secret)}
    assert seal.is_sealed(secret)
    recreated = copy.deepcopy(secret)
    recreated["metadata"]["uid"] = "u-2"
    assert not seal.is_sealed(recreated)
    assert not OwnershipSeal("another").is_sealed(secret)
