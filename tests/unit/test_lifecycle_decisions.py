"""The lifecycle's decisions in the cases the first tests left open (domain/lifecycle/lifecycle.py):
the failure text, what the state keeps after each action, which members are stamped,
and when PodsNotReady starts counting."""

from __future__ import annotations

from dataclasses import replace

from extender.domain.lifecycle.lifecycle import (
    PHASE_ABORTED,
    LifecycleState,
    Member,
    Recovered,
    Released,
    Restart,
    RetriesExhausted,
    Stamp,
    decide,
)
from extender.domain.lifecycle.lifecycle_policy import Action, Event
from tests.unit.test_lifecycle_policy import NOW, failing, gang, member, policy, run


def restart_of(effects: list[object]) -> Restart:
    (restart,) = [e for e in effects if isinstance(e, Restart)]
    return restart


# ------------------------------------------------------------------ the failure text
def test_a_failed_member_without_a_reason_says_so_and_adds_its_message() -> None:
    pol = policy(Event.POD_FAILED, Action.RESTART_JOB)
    members = gang(3)
    members[1] = replace(members[1], phase="Failed", reason="", message="exit code 3")
    failure = restart_of(run(pol, LifecycleState(), members)).failure
    assert (failure.event, failure.member) == (Event.POD_FAILED, "ns/m1")
    assert failure.why == "Failed (no reason given: exit code 3)"


def test_a_failure_text_is_cut_at_200_characters() -> None:
    pol = policy(Event.POD_FAILED, Action.RESTART_JOB)
    members = gang(3)
    members[1] = replace(members[1], phase="Failed", reason="Error", message="x" * 400)
    why = restart_of(run(pol, LifecycleState(), members)).failure.why
    assert why == "Failed (" + ("Error: " + "x" * 400)[:200] + ")"


# ------------------------------------------------------------------ the state after
def test_a_restart_remembers_its_reason_and_message_and_waits_for_ready_again() -> None:
    pol = policy(Event.POD_EVICTED, Action.RESTART_JOB)
    state = LifecycleState(ready_seen=True)
    members, _ = failing(Event.POD_EVICTED)
    restart = restart_of(run(pol, state, members))
    assert state.reason == Event.POD_EVICTED.value
    assert state.message == restart.message
    assert state.ready_seen is False


def test_an_abort_and_exhausted_retries_set_their_condition_reasons() -> None:
    members, _ = failing(Event.POD_EVICTED)
    aborted = LifecycleState()
    run(policy(Event.POD_EVICTED, Action.ABORT_JOB), aborted, members)
    assert (aborted.phase, aborted.reason) == (PHASE_ABORTED, "Aborted")
    exhausted = LifecycleState()
    effects = run(policy(Event.POD_EVICTED, Action.RESTART_JOB, max_retry=0), exhausted, members)
    assert any(isinstance(e, RetriesExhausted) for e in effects)
    assert exhausted.reason == "RetriesExhausted"


def test_a_released_group_forgets_its_reason_and_message() -> None:
    state = LifecycleState(
        phase=PHASE_ABORTED, held_generation=1, reason="Aborted", message="gang aborted"
    )
    effects = run(policy(Event.POD_EVICTED, Action.ABORT_JOB), state, gang(3), spec_generation=2)
    assert any(isinstance(e, Released) for e in effects)
    assert (state.phase, state.reason, state.message) == ("", "", "")


def test_an_unruled_failure_leaves_no_time_to_look_again() -> None:
    members, _ = failing(Event.POD_FAILED)
    pol = policy(Event.POD_EVICTED, Action.RESTART_JOB)
    decision = decide("ns/g", pol, LifecycleState(), members, min_member=3, now=NOW)
    assert decision.effects == [] and decision.next_check is None


# ------------------------------------------------------------------ after a restart
def restarted() -> tuple[LifecycleState, list[Member]]:
    pol = policy(Event.POD_EVICTED, Action.RESTART_JOB)
    state = LifecycleState()
    members, _ = failing(Event.POD_EVICTED)
    run(pol, state, members, now=NOW)
    return state, [replace(m, deleting=True) for m in members]


def test_members_created_in_the_second_of_the_restart_are_stamped() -> None:
    state, old = restarted()
    new = [member(f"n{i}", generation=0, created=NOW, bound=True) for i in range(3)]
    effects = run(policy(Event.POD_EVICTED, Action.RESTART_JOB), state, old + new, now=NOW + 5)
    (stamp,) = [e for e in effects if isinstance(e, Stamp)]
    assert set(stamp.uids) == {m.uid for m in new}


def test_members_already_of_the_current_generation_are_not_stamped_again() -> None:
    state, old = restarted()
    new = [member(f"n{i}", generation=1, created=NOW + 1, bound=True) for i in range(3)]
    effects = run(policy(Event.POD_EVICTED, Action.RESTART_JOB), state, old + new, now=NOW + 5)
    assert not [e for e in effects if isinstance(e, Stamp)]
    (recovered,) = [e for e in effects if isinstance(e, Recovered)]
    assert recovered.seconds == 5


def test_stamped_members_join_those_already_labelled() -> None:
    # One replacement was labelled already, two not yet: the three are bound whole.
    state, old = restarted()
    labelled = [member("n0", generation=1, created=NOW + 1, bound=True)]
    unlabelled = [member(f"n{i}", generation=0, created=NOW + 1, bound=True) for i in (1, 2)]
    effects = run(
        policy(Event.POD_EVICTED, Action.RESTART_JOB),
        state,
        old + labelled + unlabelled,
        now=NOW + 5,
    )
    assert [e for e in effects if isinstance(e, Recovered)] == [Recovered(5, Event.POD_EVICTED)]


def test_recovery_needs_min_member_bound_and_live_and_is_reported_once() -> None:
    state, old = restarted()
    pol = policy(Event.POD_EVICTED, Action.RESTART_JOB)
    unbound = [member(f"n{i}", generation=1, created=NOW + 1, bound=False) for i in range(3)]
    effects = run(pol, state, old + unbound, now=NOW + 5)
    assert not [e for e in effects if isinstance(e, Recovered)]
    bound = [replace(m, bound=True) for m in unbound]
    effects = run(pol, state, old + bound, now=NOW)
    assert [e for e in effects if isinstance(e, Recovered)] == [Recovered(0.0, Event.POD_EVICTED)]
    effects = run(pol, state, old + bound, now=NOW + 9)
    assert not [e for e in effects if isinstance(e, Recovered)]


# ------------------------------------------------------------------ PodsNotReady
def test_not_ready_waits_until_every_live_member_is_bound() -> None:
    pol = policy(Event.PODS_NOT_READY, Action.RESTART_JOB, pods_ready_timeout_seconds=10)
    members = gang(3, ready=False)
    members[2] = replace(members[2], bound=False, scheduled_at=None)
    decision = decide("ns/g", pol, LifecycleState(), members, min_member=2, now=NOW + 1000)
    assert decision.effects == [] and decision.next_check is None


def test_not_ready_names_the_late_members_five_at_most() -> None:
    pol = policy(Event.PODS_NOT_READY, Action.RESTART_JOB, pods_ready_timeout_seconds=10)
    few = gang(3, ready=False)
    few[0] = replace(few[0], ready=True)
    why = restart_of(run(pol, LifecycleState(), few, now=NOW + 1000)).failure.why
    assert why == "2/3 bound members not Ready 10s after the gang was bound (ns/m1, ns/m2)"
    five = gang(5, ready=False)
    why = restart_of(run(pol, LifecycleState(), five, now=NOW + 1000)).failure.why
    assert why.endswith("(ns/m0, ns/m1, ns/m2, ns/m3, ns/m4)")
    six = gang(6, ready=False)
    why = restart_of(run(pol, LifecycleState(), six, now=NOW + 1000)).failure.why
    assert why == (
        "6/6 bound members not Ready 10s after the gang was bound "
        "(ns/m0, ns/m1, ns/m2, ns/m3, ns/m4, ...)"
    )
