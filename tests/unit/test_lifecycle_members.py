"""What the lifecycle reads from the API (domain/lifecycle/lifecycle.py): a member from its pod
JSON (defaults when fields are missing), the restart generation label, a PodGroup
status adopted after a restart, and which members count for PodsNotReady."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from extender.domain.lifecycle.lifecycle import (
    PHASE_ABORTED,
    RESTART_GENERATION_LABEL,
    LifecycleState,
    Member,
    Restart,
    decide,
    generation_of,
)
from extender.domain.lifecycle.lifecycle_policy import Action, Event, LifecyclePolicy
from extender.domain.preemption.preemption import PREEMPTED_BY_ANNOTATION

NOW = 1_000_000.0
T = "2026-01-01T00:00:00Z"
T_SECONDS = 1767225600.0


def pod(**parts: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {"metadata": {"name": "w-0"}}
    obj.update(parts)
    return obj


# ------------------------------------------------------------------ Member.from_api
def test_a_bare_pod_reads_as_a_pending_member_of_the_default_namespace() -> None:
    m = Member.from_api(pod())
    assert (m.uid, m.ref, m.phase, m.reason, m.message) == ("", "default/w-0", "Pending", "", "")
    assert (m.ready, m.scheduled_at, m.created, m.controlled) == (False, None, 0.0, False)
    assert (m.gone, m.preempted, m.deleting, m.generation) == (False, False, False, 0)


def test_a_running_pod_reads_its_namespace_phase_message_and_readiness() -> None:
    m = Member.from_api(
        pod(
            metadata={"name": "w-0", "namespace": "ns", "uid": "u", "creationTimestamp": T},
            status={
                "phase": "Running",
                "message": "all good",
                "conditions": [
                    {"type": "PodScheduled", "status": "True", "lastTransitionTime": T},
                    {"type": "Ready", "status": "True"},
                ],
            },
        )
    )
    assert (m.uid, m.ref, m.phase, m.message) == ("u", "ns/w-0", "Running", "all good")
    assert m.ready is True
    assert m.scheduled_at == T_SECONDS
    assert m.created == T_SECONDS


def test_a_pod_not_yet_scheduled_has_no_bind_time() -> None:
    m = Member.from_api(
        pod(
            status={
                "conditions": [{"type": "PodScheduled", "status": "False", "lastTransitionTime": T}]
            }
        )
    )
    assert m.scheduled_at is None


def test_an_owner_that_is_not_its_controller_does_not_make_it_controlled() -> None:
    refs = [{"kind": "ConfigMap", "uid": "c", "controller": False}, {"kind": "X", "uid": "x"}]
    m = Member.from_api(pod(metadata={"name": "w-0", "ownerReferences": refs}))
    assert m.controlled is False


def test_a_member_the_watch_saw_deleted_is_gone_and_deleting() -> None:
    m = Member.from_api(pod(), gone=True)
    assert m.gone is True and m.deleting is True


def test_preempted_by_gang_extenders_annotation_alone() -> None:
    annotations = {PREEMPTED_BY_ANNOTATION: "default/high"}
    m = Member.from_api(pod(metadata={"name": "w-0", "annotations": annotations}))
    assert m.preempted is True
    assert m.disruption is None


def test_preempted_by_kube_schedulers_disruption_target_alone() -> None:
    condition = {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}
    m = Member.from_api(pod(status={"conditions": [condition]}))
    assert m.preempted is True
    evicted = {**condition, "reason": "EvictionByEvictionAPI"}
    assert Member.from_api(pod(status={"conditions": [evicted]})).preempted is False


def test_unreadable_or_absent_timestamps_read_as_zero() -> None:
    for created in ("yesterday", 12345, "", None):
        meta = {"name": "w-0", "creationTimestamp": created}
        assert Member.from_api(pod(metadata=meta)).created == 0.0


# ------------------------------------------------------------------ generation label
def test_the_generation_label_is_a_whole_number_from_zero() -> None:
    def labelled(value: str) -> dict[str, Any]:
        return {"labels": {RESTART_GENERATION_LABEL: value}}

    assert generation_of({}) == 0
    assert generation_of(labelled("0")) == 0
    assert generation_of(labelled("1")) == 1
    assert generation_of(labelled("-1")) is None


# ------------------------------------------------------------------ adopt
def test_the_same_restart_count_keeps_the_remembered_restart_time() -> None:
    state = LifecycleState(restarts=2, restarted_at=123.0)
    state.adopt({"restarts": 2, "lastRestartTime": T}, None)
    assert (state.restarts, state.restarted_at) == (2, 123.0)
    state.adopt({"restarts": 3, "lastRestartTime": T}, None)
    assert (state.restarts, state.restarted_at) == (3, T_SECONDS)


def test_a_held_phase_takes_reason_and_message_from_the_lifecycle_condition_only() -> None:
    state = LifecycleState()
    state.adopt(
        {
            "phase": PHASE_ABORTED,
            "conditions": [
                {"type": "Lifecycle", "reason": "PodEvicted", "message": "w-0 evicted"},
                {"type": "Scheduled", "reason": "Running", "message": "4/4 bound"},
            ],
        },
        7,
    )
    assert (state.phase, state.reason, state.message) == (
        PHASE_ABORTED,
        "PodEvicted",
        "w-0 evicted",
    )


def test_a_lifecycle_condition_without_reason_or_message_adopts_empty_ones() -> None:
    state = LifecycleState()
    state.adopt({"phase": PHASE_ABORTED, "conditions": [{"type": "Lifecycle"}]}, 1)
    assert (state.reason, state.message) == ("", "")


# ------------------------------------------------------------------ PodsNotReady
def test_a_member_that_succeeded_is_not_waited_for_to_be_ready() -> None:
    ready = Member(
        uid="u1",
        ref="ns/w-1",
        generation=0,
        bound=True,
        phase="Running",
        reason="",
        message="",
        deleting=False,
        disruption=None,
        ready=True,
        scheduled_at=NOW - 100,
        created=NOW - 200,
        controlled=False,
    )
    done = replace(ready, uid="u0", ref="ns/w-0", phase="Succeeded", ready=False)
    members = [done, ready, replace(ready, uid="u2", ref="ns/w-2")]
    pol = LifecyclePolicy(
        rules={Event.PODS_NOT_READY: Action.RESTART_JOB}, pods_ready_timeout_seconds=10
    )
    state = LifecycleState()
    decision = decide("ns/g", pol, state, members, min_member=2, now=NOW + 1000)
    assert not any(isinstance(e, Restart) for e in decision.effects)
    assert state.ready_seen is True
