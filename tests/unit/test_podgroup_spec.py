"""What a gang-extender PodGroup's spec gives the group, and what a bad field says (pure).

A table of specs as a user writes them: each field's default, its bounds, a value of
the wrong JSON type, and which error is shown when several fields are wrong.
"""

from __future__ import annotations

from typing import Any

import pytest

from extender.domain.objects.membership import GroupKey
from extender.domain.objects.model import HELD_PHASE, GroupSpec
from tests.builders import make_podgroup


def spec_of(**fields: Any) -> GroupSpec:
    obj = make_podgroup("train", 2, "team-a")
    obj["spec"] = fields
    return GroupSpec.from_podgroup(obj, source="PodGroup")


@pytest.mark.parametrize(
    ("fields", "min_member", "timeout", "error"),
    [
        pytest.param({}, 1, None, None, id="no minMember: a group of one"),
        pytest.param({"minMember": 4}, 4, None, None, id="minMember"),
        pytest.param(
            {"minMember": 0},
            1,
            None,
            "PodGroup spec.minMember=0 must be a whole number >= 1",
            id="minMember 0",
        ),
        pytest.param(
            {"minMember": True},
            1,
            None,
            "PodGroup spec.minMember=True must be a whole number >= 1",
            id="minMember a bool",
        ),
        pytest.param(
            {"minMember": 2, "scheduleTimeoutSeconds": 0.5}, 2, 0.5, None, id="a timeout under 1 s"
        ),
        pytest.param(
            {"minMember": 2, "scheduleTimeoutSeconds": 0},
            2,
            None,
            "PodGroup spec.scheduleTimeoutSeconds=0 must be > 0",
            id="timeout 0",
        ),
        pytest.param(
            {"minMember": 2, "scheduleTimeoutSeconds": "30"},
            2,
            None,
            "PodGroup spec.scheduleTimeoutSeconds='30' must be > 0",
            id="timeout a string",
        ),
        pytest.param(
            {"minMember": 2, "scheduleTimeoutSeconds": True},
            2,
            None,
            "PodGroup spec.scheduleTimeoutSeconds=True must be > 0",
            id="timeout a bool",
        ),
        pytest.param(
            {"minMember": 0, "scheduleTimeoutSeconds": 0},
            1,
            None,
            "PodGroup spec.minMember=0 must be a whole number >= 1",
            id="two bad fields: the first is shown",
        ),
    ],
)
def test_a_podgroup_spec_gives_the_size_and_timeout_or_says_what_to_fix(
    fields: dict[str, Any], min_member: int, timeout: float | None, error: str | None
) -> None:
    spec = spec_of(**fields)
    assert (spec.min_member, spec.schedule_timeout_seconds, spec.error) == (
        min_member,
        timeout,
        error,
    )


def test_a_podgroup_without_a_namespace_is_in_default() -> None:
    obj = make_podgroup("train", 2)
    del obj["metadata"]["namespace"]
    assert GroupSpec.from_podgroup(obj, source="PodGroup").key == GroupKey("default", "train")


@pytest.mark.parametrize(
    ("value", "seconds", "error"),
    [
        pytest.param(1, 1.0, None, id="1 s"),
        pytest.param(0.5, 0.5, None, id="under 1 s"),
        pytest.param(0, None, "PodGroup spec.starvationSeconds=0 must be > 0", id="0"),
        pytest.param(True, None, "PodGroup spec.starvationSeconds=True must be > 0", id="a bool"),
    ],
)
def test_starvation_seconds_is_a_positive_number(
    value: object, seconds: float | None, error: str | None
) -> None:
    spec = spec_of(minMember=2, starvationSeconds=value)
    assert (spec.starvation_seconds, spec.error) == (seconds, error)


@pytest.mark.parametrize(
    ("fields", "preemptible", "error"),
    [
        pytest.param({}, True, None, id="preemptible unless it says not"),
        pytest.param({"preemptible": False}, False, None, id="opted out"),
        pytest.param(
            {"preemptible": "no"},
            True,
            "PodGroup spec.preemptible='no' must be true or false",
            id="a string: preemptible, and held saying why",
        ),
    ],
)
def test_preemptible_is_true_or_false(
    fields: dict[str, Any], preemptible: bool, error: str | None
) -> None:
    spec = spec_of(minMember=2, **fields)
    assert (spec.preemptible, spec.error) == (preemptible, error)


def test_a_podgroup_its_lifecycle_policy_held_says_how_to_run_it_again() -> None:
    obj = make_podgroup("train", 2, "team-a")
    obj["status"] = {"phase": HELD_PHASE}
    assert GroupSpec.from_podgroup(obj, source="PodGroup").error == (
        f"PodGroup train is {HELD_PHASE} by its lifecycle policy; change or delete the "
        "PodGroup to run the gang again"
    )
