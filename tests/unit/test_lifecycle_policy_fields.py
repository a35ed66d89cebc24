"""The lifecycle policy's fields and their errors (domain/lifecycle/lifecycle_policy.py): maxRetry
and podsReadyTimeoutSeconds in a PodGroup spec and as annotations, and errors that name
the field or policy entry to fix."""

from __future__ import annotations

from typing import Any

from extender.domain.lifecycle.lifecycle_policy import (
    MAX_RETRY_ANNOTATION,
    PODS_READY_TIMEOUT_ANNOTATION,
    POLICIES_ANNOTATION,
    Action,
    Event,
    policy_from_annotations,
    policy_from_spec,
)

RESTART_ON_FAILED = [{"event": "PodFailed", "action": "RestartJob"}]


def spec(**fields: Any) -> dict[str, Any]:
    return {"policies": RESTART_ON_FAILED, **fields}


def test_pods_ready_timeout_is_read_from_the_spec_in_seconds() -> None:
    parsed = policy_from_spec(spec(podsReadyTimeoutSeconds=300))
    assert parsed.error is None and parsed.pods_ready_timeout_seconds == 300.0
    assert policy_from_spec(spec(podsReadyTimeoutSeconds=1)).pods_ready_timeout_seconds == 1.0
    assert policy_from_spec(spec()).pods_ready_timeout_seconds is None


def test_a_pods_ready_timeout_under_one_second_names_the_field() -> None:
    parsed = policy_from_spec(spec(podsReadyTimeoutSeconds=0))
    assert parsed.error == "PodGroup spec.podsReadyTimeoutSeconds=0 must be >= 1"


def test_max_retry_may_be_zero_but_not_negative_as_a_number_or_a_string() -> None:
    assert policy_from_spec(spec(maxRetry=0)).max_retry == 0
    assert policy_from_spec(spec(maxRetry=-1)).error == "PodGroup spec.maxRetry=-1 must be >= 0"
    assert policy_from_spec(spec(maxRetry="-1")).error == "PodGroup spec.maxRetry=-1 must be >= 0"
    assert policy_from_spec(spec(maxRetry="X1")).error == (
        "PodGroup spec.maxRetry='X1' is not a whole number"
    )


def test_a_policy_entry_that_is_not_an_object_is_named_by_its_index() -> None:
    parsed = policy_from_spec({"policies": ["PodFailed=RestartJob"]})
    assert parsed.error == (
        "PodGroup spec.policies[0]='PodFailed=RestartJob' must be an object {event, action}"
    )


def test_a_bad_or_repeated_policy_entry_is_named_by_its_index() -> None:
    bad = policy_from_spec({"policies": [*RESTART_ON_FAILED, {"event": "PodGone"}]})
    assert bad.error is not None and bad.error.startswith("PodGroup spec.policies[1]: event")
    twice = policy_from_spec(
        {"policies": [*RESTART_ON_FAILED, {"event": "PodFailed", "action": "AbortJob"}]}
    )
    assert twice.error is not None and "spec.policies[1]" in twice.error


def test_annotations_read_the_pods_ready_timeout_and_max_retry() -> None:
    parsed = policy_from_annotations(
        {
            POLICIES_ANNOTATION: "PodsNotReady=RestartJob",
            PODS_READY_TIMEOUT_ANNOTATION: "120",
            MAX_RETRY_ANNOTATION: "0",
        }
    )
    assert parsed.error is None
    assert parsed.rules == {Event.PODS_NOT_READY: Action.RESTART_JOB}
    assert (parsed.pods_ready_timeout_seconds, parsed.max_retry) == (120.0, 0)


def test_annotation_entries_skip_empty_parts_and_split_at_the_first_equals() -> None:
    parsed = policy_from_annotations(
        {POLICIES_ANNOTATION: "PodEvicted=RestartJob,,PodFailed=AbortJob"}
    )
    assert parsed.rules == {
        Event.POD_EVICTED: Action.RESTART_JOB,
        Event.POD_FAILED: Action.ABORT_JOB,
    }
    odd = policy_from_annotations({POLICIES_ANNOTATION: "PodEvicted=RestartJob=now"})
    assert odd.error is not None and "action 'RestartJob=now'" in odd.error


def test_annotation_errors_name_the_annotation() -> None:
    where = f"annotation {POLICIES_ANNOTATION}"
    empty = policy_from_annotations({POLICIES_ANNOTATION: ""})
    assert empty.error == f"{where}='' names no policy"
    not_text: dict[str, Any] = {POLICIES_ANNOTATION: 5}
    assert policy_from_annotations(not_text).error == (
        f"{where}=5 must be a string 'Event=Action,...'"
    )
    twice = policy_from_annotations(
        {POLICIES_ANNOTATION: "PodFailed=RestartJob,PodFailed=AbortJob"}
    )
    assert twice.error is not None and twice.error.startswith(where)
