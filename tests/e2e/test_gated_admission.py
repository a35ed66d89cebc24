"""Gated admission on the real kube-scheduler and API server (docs/design.md#gated-admission).

Members created behind gang-extender's scheduling gate are never tried by
kube-scheduler while their gang cannot be placed whole: the service plans the gang
itself, then lifts the gate with the planned node in one write, and kube-scheduler
binds the members through the extender as usual.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from extender.domain.objects.membership import ADMISSION_GATE, MIN_AVAILABLE_ANNOTATION
from tests.e2e.gang_fixtures import (  # noqa: F401 (no_partial_gangs is a fixture)
    BindRecorder,
    bound,
    condition_message,
    create,
    events,
    gang_pod,
    get_podgroup,
    list_pods,
    no_partial_gangs,
    placed_as_gang,
    planned,
    podgroup,
    unschedulable_message,
    wait_until,
)

HOLD_OBSERVATION_SECONDS = 6  # several reconcile passes, each of which could lift a gate

pytestmark = pytest.mark.usefixtures("no_partial_gangs")


def behind_gate(pod: dict[str, Any]) -> bool:
    gates = pod["spec"].get("schedulingGates") or []
    return any(g.get("name") == ADMISSION_GATE for g in gates)


def gated_member(name: str, group: str, **kw: Any) -> dict[str, Any]:
    pod = gang_pod(name, group, **kw)
    pod["spec"]["schedulingGates"] = [{"name": ADMISSION_GATE}]
    return pod


def create_gated_gang(raw: Any, namespace: str, group: str, size: int, pool: Any) -> None:
    """A PodGroup of `size` and its 1-GPU members, each behind the admission gate."""
    create(raw, namespace, podgroup(group, size))
    for i in range(size):
        member = gated_member(f"{group}-{i}", group, gpus=1, node_selector=pool.node_selector)
        create(raw, namespace, member)


def test_a_gated_gang_that_does_not_fit_stays_gated_then_binds_whole_on_a_new_node(
    gang_stack, raw, namespace, gpu_nodes
) -> None:
    pool = gpu_nodes(1, gpus=2)
    recorder = BindRecorder(raw, namespace)
    create_gated_gang(raw, namespace, "hvd", 3, pool)
    message = wait_until(
        lambda: (
            "placeable" in condition_message(get_podgroup(raw, namespace, "hvd"))
            and condition_message(get_podgroup(raw, namespace, "hvd"))
        ),
        what="the PodGroup condition to say what is missing",
    )
    assert "needs 3 nvidia.com/gpu" in message and "largest free node has 2" in message
    time.sleep(HOLD_OBSERVATION_SECONDS)
    pods = list_pods(raw, namespace)
    assert [p["metadata"]["name"] for p in pods if behind_gate(p)] == ["hvd-0", "hvd-1", "hvd-2"]
    # kube-scheduler never tried them: no attempt refused, nothing bound.
    assert bound(pods) == []
    assert events(raw, namespace, "FailedScheduling") == []

    added_at = time.time()
    gpu_nodes(1, gpus=4, labels=pool.node_selector)
    wait_until(lambda: len(bound(list_pods(raw, namespace))) == 3, what="all 3 members bound")
    recorder.stop()
    wait_until(lambda: len(recorder.first_bound) == 3, what="the recorder to see all 3 bindings")
    assert min(recorder.first_bound.values()) >= added_at
    pods = list_pods(raw, namespace)
    assert not any(behind_gate(p) for p in pods)
    assert all(planned(p) for p in pods), "the gate went with the planned node's write"
    placed = placed_as_gang(raw, namespace, "hvd")
    assert placed == recorder.node_of
    assert len(set(placed.values())) == 1, "the whole gang on the new 4-GPU node"
    binds = sorted(recorder.first_bound.values())
    print(f"\ngated gang: GPU node added -> all 3 bound in {binds[-1] - added_at:.2f}s")


def test_a_gated_gang_that_fits_binds_without_a_refused_attempt(
    gang_stack, raw, namespace, gpu_nodes
) -> None:
    pool = gpu_nodes(2, gpus=4)
    create_gated_gang(raw, namespace, "ddp", 4, pool)
    wait_until(lambda: len(bound(list_pods(raw, namespace))) == 4, what="all 4 members bound")
    # The first three members were never tried while the gang was incomplete.
    assert events(raw, namespace, "FailedScheduling") == []
    assert len(set(placed_as_gang(raw, namespace, "ddp").values())) == 1


def test_a_gated_pod_of_a_misdeclared_group_is_ungated_for_the_filter_to_say_why(
    gang_stack, raw, namespace, gpu_nodes
) -> None:
    pool = gpu_nodes(1, gpus=2)
    create(
        raw,
        namespace,
        gated_member(
            "bad-0",
            "bad",
            gpus=1,
            node_selector=pool.node_selector,
            annotations={MIN_AVAILABLE_ANNOTATION: "0"},
        ),
    )

    def filter_message() -> str:
        (pod,) = list_pods(raw, namespace)
        # While gated, the condition says so (reason SchedulingGated).
        return "" if behind_gate(pod) else unschedulable_message(pod)

    message = wait_until(
        lambda: "min-available" in filter_message() and filter_message(),
        what="kube-scheduler to try the ungated pod and say why it waits",
    )
    assert f"{MIN_AVAILABLE_ANNOTATION}=" in message and ">= 1" in message
    assert not behind_gate(list_pods(raw, namespace)[0])
