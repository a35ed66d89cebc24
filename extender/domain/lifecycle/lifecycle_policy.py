"""Lifecycle policies as a group declares them, parsed (docs/podgroup.md#lifecycle-policies).

Volcano's vocabulary on our PodGroup: `spec.policies` maps an event (PodEvicted,
PodFailed, PodsNotReady) to an action (RestartJob, AbortJob); `spec.maxRetry` bounds
the restarts (then phase Failed); `spec.podsReadyTimeoutSeconds` is how long bound
members may stay un-Ready. A group declared by annotation says the same with pod
annotations (`POLICIES_ANNOTATION`, `MAX_RETRY_ANNOTATION`,
`PODS_READY_TIMEOUT_ANNOTATION`).

Pure: `policy_from_spec` and `policy_from_annotations` turn a declaration into a
`LifecyclePolicy`; one that does not parse becomes a policy with `error` set (what to
fix), which acts on nothing. What the policy does when a member fails is
domain/lifecycle/lifecycle.py's `decide`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from extender.domain.objects.limits import MAX_POLICIES, MAX_RETRY, MAX_SECONDS, quoted

POLICIES_ANNOTATION = "gang-extender.io/policies"
MAX_RETRY_ANNOTATION = "gang-extender.io/max-retry"
PODS_READY_TIMEOUT_ANNOTATION = "gang-extender.io/pods-ready-timeout-seconds"
# The pod annotations a group declared by annotation gives its policy with.
POLICY_ANNOTATIONS = (POLICIES_ANNOTATION, MAX_RETRY_ANNOTATION, PODS_READY_TIMEOUT_ANNOTATION)

DEFAULT_MAX_RETRY = 3


class Event(Enum):
    POD_EVICTED = "PodEvicted"
    POD_FAILED = "PodFailed"
    PODS_NOT_READY = "PodsNotReady"


class Action(Enum):
    RESTART_JOB = "RestartJob"
    ABORT_JOB = "AbortJob"


EVENTS = ", ".join(e.value for e in Event)
ACTIONS = ", ".join(a.value for a in Action)


@dataclass(frozen=True)
class LifecyclePolicy:
    """What a group does when it fails; `rules` empty: nothing, as without a policy."""

    rules: Mapping[Event, Action] = field(default_factory=dict)
    max_retry: int = DEFAULT_MAX_RETRY
    pods_ready_timeout_seconds: float | None = None
    error: str | None = None  # what is wrong with the declaration; then nothing acts

    @property
    def active(self) -> bool:
        return bool(self.rules) and self.error is None


def _rule(event: object, action: object, where: str) -> tuple[Event, Action]:
    try:
        parsed_event = Event(event)
    except ValueError:
        raise ValueError(f"{where}: event {quoted(event)} is not one of {EVENTS}") from None
    try:
        parsed_action = Action(action)
    except ValueError:
        raise ValueError(f"{where}: action {quoted(action)} is not one of {ACTIONS}") from None
    return parsed_event, parsed_action


def _add(rules: dict[Event, Action], rule: tuple[Event, Action], where: str) -> None:
    event, action = rule
    if event in rules and rules[event] is not action:
        raise ValueError(
            f"{where}: event {event.value} is given two actions "
            f"({rules[event].value} and {action.value}); keep one"
        )
    rules[event] = action


def _whole(value: object, where: str, *, minimum: int, maximum: int) -> int:
    """`value` as a whole number in minimum..maximum, else a ValueError saying so.

    Never an OverflowError: a number is compared as the int it is (no float() of a
    400-digit value), and int() refuses a text of more than 4,300 digits with a
    ValueError, which says the same as any other bad text.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        text = value.strip() if isinstance(value, str) else ""
        if not text.lstrip("-").isdigit():
            raise ValueError(f"{where}={quoted(value)} is not a whole number")
        if len(text) > len(str(maximum)) + 1:  # past the maximum: int() may refuse it
            raise ValueError(f"{where}={quoted(value)} must be at most {maximum}")
        value = int(text)
    if value < minimum:
        raise ValueError(f"{where}={quoted(value)} must be >= {minimum}")
    if value > maximum:
        raise ValueError(f"{where}={quoted(value)} must be at most {maximum}")
    return value


def _policy(
    rules: dict[Event, Action], max_retry: object, timeout: object, names: tuple[str, str]
) -> LifecyclePolicy:
    retry = (
        DEFAULT_MAX_RETRY
        if max_retry is None
        else _whole(max_retry, names[0], minimum=0, maximum=MAX_RETRY)
    )
    ready = (
        None
        if timeout is None
        else float(_whole(timeout, names[1], minimum=1, maximum=MAX_SECONDS))
    )
    if Event.PODS_NOT_READY in rules and ready is None:
        raise ValueError(f"event PodsNotReady needs {names[1]} (seconds)")
    return LifecyclePolicy(rules=rules, max_retry=retry, pods_ready_timeout_seconds=ready)


def policy_from_spec(spec: Mapping[str, Any]) -> LifecyclePolicy:
    """The policy a PodGroup's spec declares (policies, maxRetry, podsReadyTimeoutSeconds)."""
    try:
        raw = spec.get("policies")
        rules: dict[Event, Action] = {}
        if raw is not None and not isinstance(raw, list):
            raise ValueError(f"spec.policies={quoted(raw)} must be a list of {{event, action}}")
        if raw is not None and len(raw) > MAX_POLICIES:
            raise ValueError(f"spec.policies lists {len(raw)} entries; at most {MAX_POLICIES}")
        for i, item in enumerate(raw or []):
            where = f"spec.policies[{i}]"
            if not isinstance(item, Mapping):
                raise ValueError(f"{where}={quoted(item)} must be an object {{event, action}}")
            _add(rules, _rule(item.get("event"), item.get("action"), where), where)
        return _policy(
            rules,
            spec.get("maxRetry"),
            spec.get("podsReadyTimeoutSeconds"),
            ("spec.maxRetry", "spec.podsReadyTimeoutSeconds"),
        )
    except ValueError as err:
        return LifecyclePolicy(error=f"PodGroup {err}")


def policy_from_annotations(annotations: Mapping[str, str]) -> LifecyclePolicy:
    """The policy of a group declared by annotation: "PodEvicted=RestartJob,PodFailed=AbortJob"."""
    try:
        text = annotations.get(POLICIES_ANNOTATION)
        rules: dict[Event, Action] = {}
        where = f"annotation {POLICIES_ANNOTATION}={quoted(text)}"
        if text is not None and not isinstance(text, str):
            raise ValueError(f"{where} must be a string 'Event=Action,...'")
        parts = [part for part in (text or "").split(",") if part.strip()]
        if len(parts) > MAX_POLICIES:
            raise ValueError(f"{where} names {len(parts)} policies; at most {MAX_POLICIES}")
        for part in parts:
            event, sep, action = part.partition("=")
            if not sep:
                raise ValueError(f"{where}: expected 'Event=Action', got {quoted(part.strip())}")
            _add(rules, _rule(event.strip(), action.strip(), where), where)
        if text is not None and not rules:
            raise ValueError(f"{where} names no policy")
        return _policy(
            rules,
            annotations.get(MAX_RETRY_ANNOTATION),
            annotations.get(PODS_READY_TIMEOUT_ANNOTATION),
            (f"annotation {MAX_RETRY_ANNOTATION}", f"annotation {PODS_READY_TIMEOUT_ANNOTATION}"),
        )
    except ValueError as err:
        return LifecyclePolicy(error=str(err))
