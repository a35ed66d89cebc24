"""The lifecycle policy engine (domain/lifecycle/lifecycle.py): parsing, each event x action, invariants."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from extender.domain.lifecycle.lifecycle import (
    PHASE_ABORTED,
    PHASE_FAILED,
    RESTART_GENERATION_LABEL,
    Abort,
    Failure,
    LifecycleState,
    Member,
    Recovered,
    Released,
    Restart,
    RetriesExhausted,
    Stamp,
    decide,
    recreated_pod,
)
from extender.domain.lifecycle.lifecycle_policy import (
    DEFAULT_MAX_RETRY,
    Action,
    Event,
    LifecyclePolicy,
    policy_from_annotations,
    policy_from_spec,
)
from extender.domain.objects.model import GroupSpec

NOW = 1_000_000.0


def member(
    name: str,
    *,
    generation: int | None = 0,
    bound: bool = True,
    phase: str = "Running",
    reason: str = "",
    deleting: bool = False,
    disruption: str | None = None,
    ready: bool = True,
    scheduled_at: float | None = NOW - 100,
    created: float = NOW - 200,
    gone: bool = False,
) -> Member:
    return Member(
        uid=f"uid-{name}",
        ref=f"ns/{name}",
        generation=generation,
        bound=bound,
        phase=phase,
        reason=reason,
        message="",
        deleting=deleting or gone,
        disruption=disruption,
        ready=ready,
        scheduled_at=scheduled_at,
        created=created,
        controlled=False,
        gone=gone,
    )


def gang(n: int = 3, **overrides: Any) -> list[Member]:
    return [member(f"m{i}", **overrides) for i in range(n)]


def policy(event: Event, action: Action, **kw: Any) -> LifecyclePolicy:
    return LifecyclePolicy(rules={event: action}, **kw)


def failing(event: Event) -> tuple[list[Member], dict[str, Any]]:
    """A gang of three whose m1 shows `event`; extra decide() keywords."""
    members = gang(3)
    if event is Event.POD_EVICTED:
        members[1] = replace(
            members[1], disruption="EvictionByEvictionAPI", gone=True, deleting=True
        )
    elif event is Event.POD_FAILED:
        members[1] = replace(members[1], phase="Failed", reason="OutOfnvidia.com/gpu")
    else:
        members[1] = replace(members[1], ready=False, phase="Pending")
    return members, {}


READY_TIMEOUT = 30.0


def run(
    pol: LifecyclePolicy,
    state: LifecycleState,
    members: list[Member],
    now: float = NOW,
    **kw: Any,
) -> list[Any]:
    return decide("ns/g", pol, state, members, min_member=3, now=now, **kw).effects


# ---------------------------------------------------------------- parsing
def test_spec_policies_parse_with_default_max_retry() -> None:
    parsed = policy_from_spec(
        {"policies": [{"event": "PodEvicted", "action": "RestartJob"}], "minMember": 2}
    )
    assert parsed.rules == {Event.POD_EVICTED: Action.RESTART_JOB}
    assert parsed.max_retry == DEFAULT_MAX_RETRY == 3
    assert parsed.error is None and parsed.active


def test_no_policies_is_inactive_and_not_an_error() -> None:
    parsed = policy_from_spec({"minMember": 2})
    assert not parsed.active and parsed.error is None


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        (
            {"policies": [{"event": "PodGone", "action": "RestartJob"}]},
            "event 'PodGone' is not one of",
        ),
        (
            {"policies": [{"event": "PodFailed", "action": "Reboot"}]},
            "action 'Reboot' is not one of",
        ),
        ({"policies": "PodFailed=RestartJob"}, "must be a list"),
        ({"policies": [{"event": "PodFailed", "action": "RestartJob"}], "maxRetry": -1}, ">= 0"),
        (
            {"policies": [{"event": "PodFailed", "action": "RestartJob"}], "maxRetry": "x"},
            "not a whole number",
        ),
        (
            {"policies": [{"event": "PodsNotReady", "action": "RestartJob"}]},
            "needs spec.podsReadyTimeoutSeconds",
        ),
        (
            {
                "policies": [
                    {"event": "PodFailed", "action": "RestartJob"},
                    {"event": "PodFailed", "action": "AbortJob"},
                ]
            },
            "two actions",
        ),
    ],
)
def test_bad_spec_is_an_error_that_says_what_to_fix(spec: dict[str, Any], said: str) -> None:
    parsed = policy_from_spec(spec)
    assert parsed.error is not None and said in parsed.error
    assert parsed.error.startswith("PodGroup ")
    assert not parsed.active


def test_annotation_form() -> None:
    parsed = policy_from_annotations(
        {
            "gang-extender.io/policies": "PodEvicted=RestartJob, PodFailed=AbortJob",
            "gang-extender.io/max-retry": "5",
        }
    )
    assert parsed.rules == {
        Event.POD_EVICTED: Action.RESTART_JOB,
        Event.POD_FAILED: Action.ABORT_JOB,
    }
    assert parsed.max_retry == 5


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("PodEvicted", "expected 'Event=Action'"),
        ("PodEvicted=Restart", "action 'Restart'"),
        (",", "names no policy"),
    ],
)
def test_bad_annotation_says_what_to_fix(text: str, said: str) -> None:
    parsed = policy_from_annotations({"gang-extender.io/policies": text})
    assert parsed.error is not None and said in parsed.error
    assert "gang-extender.io/policies" in parsed.error


# ------------------------------------------------------ observed members
def test_member_from_api_reads_eviction_admission_reject_and_generation() -> None:
    obj = {
        "metadata": {
            "name": "w-0",
            "namespace": "ns",
            "uid": "u",
            "labels": {RESTART_GENERATION_LABEL: "2"},
            "deletionTimestamp": "2026-01-01T00:00:00Z",
            "ownerReferences": [{"kind": "ReplicaSet", "controller": True, "uid": "r"}],
        },
        "spec": {"nodeName": "n1"},
        "status": {
            "phase": "Failed",
            "reason": "OutOfnvidia.com/gpu",
            "conditions": [
                {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"},
                {
                    "type": "PodScheduled",
                    "status": "True",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                },
                {"type": "Ready", "status": "False"},
            ],
        },
    }
    m = Member.from_api(obj)
    assert (m.generation, m.bound, m.deleting, m.controlled, m.ready) == (
        2,
        True,
        True,
        True,
        False,
    )
    assert m.disruption == "EvictionByEvictionAPI"
    assert m.reason == "OutOfnvidia.com/gpu"
    assert m.scheduled_at is not None and m.scheduled_at > 0
    bad = {**obj, "metadata": {**obj["metadata"], "labels": {RESTART_GENERATION_LABEL: "x"}}}
    assert Member.from_api(bad).generation is None


def test_recreated_pod_strips_placement_and_server_fields() -> None:
    obj = {
        "metadata": {
            "name": "master",
            "namespace": "ns",
            "uid": "u",
            "resourceVersion": "9",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "managedFields": [{}],
            "labels": {"gang-extender.io/group": "g", RESTART_GENERATION_LABEL: "0"},
            "annotations": {"gang-extender.io/planned-node": "n1", "keep": "me"},
        },
        "spec": {"nodeName": "n1", "schedulerName": "gang-extender", "containers": [{"name": "c"}]},
        "status": {"phase": "Running"},
    }
    body = recreated_pod(obj, 2)
    assert set(body["metadata"]) == {"name", "namespace", "labels", "annotations"}
    assert body["metadata"]["labels"][RESTART_GENERATION_LABEL] == "2"
    assert body["metadata"]["annotations"] == {"keep": "me"}
    assert "nodeName" not in body["spec"] and body["spec"]["schedulerName"] == "gang-extender"
    assert "status" not in body
    assert obj["spec"]["nodeName"] == "n1", "the template is not changed"


def test_an_aborted_podgroup_holds_its_members_with_a_message() -> None:
    obj = {
        "metadata": {"name": "g", "namespace": "ns"},
        "spec": {"minMember": 2},
        "status": {"phase": PHASE_ABORTED},
    }
    spec = GroupSpec.from_podgroup(obj, source="PodGroup")
    assert spec.error is not None and "Aborted" in spec.error and "change or delete" in spec.error
    running = {**obj, "status": {"phase": "Running"}}
    assert GroupSpec.from_podgroup(running, source="PodGroup").error is None


# ----------------------------------------------------- each event x action
@pytest.mark.parametrize("event", list(Event))
def test_each_event_with_restart_restarts_every_live_member(event: Event) -> None:
    members, _ = failing(event)
    pol = policy(event, Action.RESTART_JOB, pods_ready_timeout_seconds=READY_TIMEOUT)
    state = LifecycleState()
    effects = run(pol, state, members)
    (restart,) = [e for e in effects if isinstance(e, Restart)]
    assert restart.failure.event is event and restart.failure.member == "ns/m1"
    assert restart.generation == 1 == state.restarts
    live = {m.uid for m in members if not m.deleting}
    assert set(restart.delete) == live
    assert event.value in restart.message and "ns/m1" in restart.message


@pytest.mark.parametrize("event", list(Event))
def test_each_event_with_abort_deletes_members_and_holds_the_group(event: Event) -> None:
    members, _ = failing(event)
    pol = policy(event, Action.ABORT_JOB, pods_ready_timeout_seconds=READY_TIMEOUT)
    state = LifecycleState()
    effects = run(pol, state, members, spec_generation=4)
    (abort,) = [e for e in effects if isinstance(e, Abort)]
    assert abort.failure.event is event
    assert state.phase == PHASE_ABORTED and state.restarts == 0
    assert set(abort.delete) == {m.uid for m in members if not m.deleting}
    # Held: nothing more happens, whatever fails, until the PodGroup changes.
    assert run(pol, state, members, spec_generation=4) == []
    released = run(pol, state, members, spec_generation=5)
    assert any(isinstance(e, Released) for e in released) and state.phase == ""
    # The aborted run's members, still going away, never abort the released group again.
    assert not [e for e in released if isinstance(e, Abort)]
    assert run(pol, state, members, spec_generation=5) == []


@pytest.mark.parametrize("event", list(Event))
@pytest.mark.parametrize("other", list(Event))
def test_an_event_without_a_policy_does_nothing(event: Event, other: Event) -> None:
    if event is other:
        return
    members, _ = failing(event)
    pol = policy(other, Action.RESTART_JOB, pods_ready_timeout_seconds=READY_TIMEOUT)
    state = LifecycleState()
    effects = run(pol, state, members)
    assert not [e for e in effects if isinstance(e, Restart | Abort | RetriesExhausted)]
    assert state.restarts == 0


def test_no_policy_at_all_does_nothing_as_today() -> None:
    members, _ = failing(Event.POD_FAILED)
    assert run(LifecyclePolicy(), LifecycleState(), members) == []


# --------------------------------------------------------------- failures
def test_owner_delete_without_disruption_is_not_a_failure() -> None:
    members = gang(3)
    members[0] = replace(members[0], gone=True, deleting=True)  # a Job scale-down, a user delete
    members[1] = replace(members[1], deleting=True, phase="Failed")  # killed on the way out
    pol = policy(Event.POD_EVICTED, Action.RESTART_JOB)
    pol = replace(
        pol, rules={Event.POD_EVICTED: Action.RESTART_JOB, Event.POD_FAILED: Action.RESTART_JOB}
    )
    assert run(pol, LifecycleState(), members) == []


def test_an_unbound_member_never_fails_the_gang() -> None:
    members = gang(3)
    members[2] = replace(members[2], bound=False, disruption="PreemptionByScheduler", gone=True)
    assert run(policy(Event.POD_EVICTED, Action.RESTART_JOB), LifecycleState(), members) == []


def test_pods_not_ready_waits_for_the_timeout_and_says_when_to_look_again() -> None:
    members, _ = failing(Event.PODS_NOT_READY)
    pol = policy(Event.PODS_NOT_READY, Action.RESTART_JOB, pods_ready_timeout_seconds=300)
    state = LifecycleState()
    decision = decide("ns/g", pol, state, members, min_member=3, now=NOW)
    assert decision.effects == [] and decision.next_check == NOW - 100 + 300
    later = decide("ns/g", pol, state, members, min_member=3, now=NOW + 200)
    assert any(isinstance(e, Restart) for e in later.effects)


def test_pods_not_ready_is_once_per_generation_after_all_were_ready() -> None:
    pol = policy(Event.PODS_NOT_READY, Action.RESTART_JOB, pods_ready_timeout_seconds=10)
    state = LifecycleState()
    assert run(pol, state, gang(3)) == []  # all Ready: the clock stops
    flapping = gang(3)
    flapping[0] = replace(flapping[0], ready=False)
    assert run(pol, state, flapping, now=NOW + 1000) == []


def test_broken_gang_from_the_core_feeds_the_policy() -> None:
    pol = policy(Event.POD_FAILED, Action.RESTART_JOB)
    state = LifecycleState()
    lost = Failure(Event.POD_FAILED, "ns/m2", "lost (member ns/m2 was deleted)")
    effects = run(pol, state, gang(3), broken=[lost])
    (restart,) = [e for e in effects if isinstance(e, Restart)]
    assert restart.failure is lost


def test_max_retry_reached_leaves_the_group_failed_and_nothing_restarts() -> None:
    pol = policy(Event.POD_FAILED, Action.RESTART_JOB, max_retry=1)
    state = LifecycleState(restarts=1, restarted_at=NOW - 500)
    members, _ = failing(Event.POD_FAILED)
    members = [replace(m, generation=1) for m in members]
    effects = run(pol, state, members)
    (failed,) = [e for e in effects if isinstance(e, RetriesExhausted)]
    assert "maxRetry 1" in failed.message and "ns/m1" in failed.message
    assert state.phase == PHASE_FAILED and state.restarts == 1
    assert run(pol, state, members) == []


def test_new_members_after_a_restart_are_stamped_and_recovery_is_timed() -> None:
    pol = policy(Event.POD_EVICTED, Action.RESTART_JOB)
    state = LifecycleState()
    members, _ = failing(Event.POD_EVICTED)
    run(pol, state, members, now=NOW)
    old = [replace(m, deleting=True) for m in members]
    new = [member(f"n{i}", generation=0, created=NOW + 1, bound=True) for i in range(3)]
    effects = run(pol, state, old + new, now=NOW + 30)
    (stamp,) = [e for e in effects if isinstance(e, Stamp)]
    assert set(stamp.uids) == {m.uid for m in new} and stamp.generation == 1
    (recovered,) = [e for e in effects if isinstance(e, Recovered)]
    assert recovered.seconds == 30 and recovered.cause is Event.POD_EVICTED
    assert not [e for e in effects if isinstance(e, Restart)]


def test_state_adopts_restarts_and_held_phase_from_status() -> None:
    state = LifecycleState()
    state.adopt(
        {
            "restarts": 2,
            "lastRestartTime": "2026-01-01T00:00:00Z",
            "phase": PHASE_ABORTED,
            "conditions": [{"type": "Lifecycle", "reason": "Aborted", "message": "why"}],
        },
        7,
    )
    assert (state.restarts, state.phase, state.held_generation, state.message) == (
        2,
        PHASE_ABORTED,
        7,
        "why",
    )
    assert state.restarted_at is not None


# -------------------------------------------------------------- properties
observed = st.builds(
    member,
    st.sampled_from(["a", "b", "c", "d", "e"]),
    generation=st.one_of(st.none(), st.integers(0, 3)),
    bound=st.booleans(),
    phase=st.sampled_from(["Pending", "Running", "Succeeded", "Failed"]),
    reason=st.sampled_from(["", "OutOfnvidia.com/gpu", "Error"]),
    deleting=st.booleans(),
    disruption=st.one_of(
        st.none(), st.sampled_from(["EvictionByEvictionAPI", "PreemptionByScheduler"])
    ),
    ready=st.booleans(),
    scheduled_at=st.one_of(st.none(), st.floats(NOW - 1000, NOW)),
    created=st.floats(NOW - 1000, NOW),
    gone=st.booleans(),
)
rules = st.dictionaries(st.sampled_from(list(Event)), st.sampled_from(list(Action)), min_size=1)


@settings(max_examples=1000, deadline=None)
@given(
    members=st.lists(observed, max_size=6, unique_by=lambda m: m.uid),
    ruled=rules,
    max_retry=st.integers(0, 4),
    restarts=st.integers(0, 4),
    ticks=st.lists(st.floats(0, 500), min_size=1, max_size=5),
)
def test_one_failure_never_restarts_twice_and_max_retry_holds(
    members: list[Member],
    ruled: dict[Event, Action],
    max_retry: int,
    restarts: int,
    ticks: list[float],
) -> None:
    """Whatever the members look like, seen again and again (the same failure on each
    reconcile, the old members' own deletion on the way), at most one restart or abort
    happens until new members arrive, and restarts never exceed maxRetry."""
    pol = LifecyclePolicy(rules=ruled, max_retry=max_retry, pods_ready_timeout_seconds=60)
    state = LifecycleState(restarts=restarts, restarted_at=NOW - 2000 if restarts else None)
    acted = 0
    now = NOW
    seen = list(members)
    for tick in ticks:
        now += tick
        effects = decide("ns/g", pol, state, seen, min_member=2, now=now, spec_generation=1).effects
        for effect in effects:
            if isinstance(effect, Restart | Abort):
                acted += 1
                # What the controller does next: those members are deleted.
                seen = [replace(m, deleting=True) if m.uid in effect.delete else m for m in seen]
        labelled = [m.generation or 0 for m in members]
        assert state.restarts <= max(restarts, max_retry, *labelled)
        if state.phase:
            assert (
                not [e for e in effects if isinstance(e, Restart)] or state.phase == PHASE_ABORTED
            )
    assert acted <= 1


def test_the_restart_example_declares_the_seed_policy() -> None:
    path = (
        Path(__file__).resolve().parents[2]
        / "examples"
        / "horovod"
        / "horovod-job-restart-on-eviction.yaml"
    )
    podgroup = next(d for d in yaml.safe_load_all(path.read_text()) if d["kind"] == "PodGroup")
    parsed = policy_from_spec(podgroup["spec"])
    assert parsed.error is None
    assert parsed.rules[Event.POD_EVICTED] is Action.RESTART_JOB
    assert parsed.max_retry == 3


def test_members_of_a_later_generation_than_remembered_are_current() -> None:
    """The memory was lost (a service restart, a re-created PodGroup): the members'
    own labels say which generation runs, and its failures still count."""
    pol = policy(Event.POD_FAILED, Action.RESTART_JOB)
    state = LifecycleState()
    members = [replace(m, generation=2) for m in gang(3)]
    members[0] = replace(members[0], phase="Failed", reason="Error")
    (restart,) = [e for e in run(pol, state, members) if isinstance(e, Restart)]
    assert restart.generation == 3 == state.restarts
