"""Placeholder pods, the pure diff and names (domain/starvation/placeholders.py): every observed
placeholder is considered, effects come in a stable order, and names stay valid pod
names that are readable when they can be and hashed when they are too long."""

from __future__ import annotations

import re

from extender.domain.objects.membership import GroupKey
from extender.domain.starvation.placeholders import (
    MAX_NAME,
    ObservedPlaceholder,
    diff,
    placeholder_name,
)
from extender.domain.state.decisions import PlaceholderCreate, PlaceholderDelete

BIG = GroupKey("default", "big")
OTHER = GroupKey("default", "other")


def seen(
    name: str,
    node: str | None,
    gpus: int,
    *,
    group: GroupKey = BIG,
    active: bool = True,
    deleting: bool = False,
) -> ObservedPlaceholder:
    return ObservedPlaceholder(group, name, node, gpus, active=active, deleting=deleting)


def test_a_placeholder_being_deleted_does_not_hide_the_ones_after_it() -> None:
    observed = [
        seen("going", "n1", 1, deleting=True),
        seen("finished", "n1", 1, active=False),
        seen("unwanted", "n2", 1),
    ]
    assert diff({}, observed) == [
        PlaceholderDelete(BIG, "finished"),
        PlaceholderDelete(BIG, "unwanted"),
    ]


def test_a_finished_placeholder_does_not_hide_the_ones_after_it() -> None:
    observed = [
        seen("finished", "n1", 1, active=False),
        seen("unbound", None, 1),
        seen("unwanted", "n2", 1),
    ]
    assert diff({}, observed) == [
        PlaceholderDelete(BIG, "finished"),
        PlaceholderDelete(BIG, "unbound"),
        PlaceholderDelete(BIG, "unwanted"),
    ]


def test_a_finished_placeholder_before_a_held_one_leaves_the_held_one_counted() -> None:
    held = placeholder_name(BIG, "n1", 2)
    observed = [seen(placeholder_name(BIG, "n1", 1), "n1", 1, active=False), seen(held, "n1", 2)]
    # The held pod still holds the 2 wanted GPUs: only the finished one goes.
    assert diff({(BIG, "n1"): 2}, observed) == [
        PlaceholderDelete(BIG, placeholder_name(BIG, "n1", 1))
    ]


def test_effects_come_in_group_then_node_order() -> None:
    # Group "big" on node "z" comes before group "other" on node "a".
    wanted = {(OTHER, "a"): 1, (BIG, "z"): 1}
    assert diff(wanted, []) == [
        PlaceholderCreate(BIG, placeholder_name(BIG, "z", 1), "z", 1),
        PlaceholderCreate(OTHER, placeholder_name(OTHER, "a", 1), "a", 1),
    ]


def test_a_name_of_exactly_the_limit_is_kept_readable() -> None:
    node = "n" * (MAX_NAME - len("big-hold--1"))
    name = placeholder_name(BIG, node, 1)
    assert len(name) == MAX_NAME
    assert name == f"big-hold-{node}-1"


def test_a_long_name_is_the_group_prefix_a_ten_digit_hash_and_the_index() -> None:
    group = GroupKey("default", "abcdefghij" * 4)  # 40 characters
    name = placeholder_name(group, "node-" + "x" * 60, 7)
    assert re.fullmatch(r"abcdefghij" * 3 + r"-hold-[0-9a-f]{10}-7", name), name
    assert len(name) <= MAX_NAME


def test_a_truncated_group_prefix_does_not_end_in_a_dash_or_dot() -> None:
    # The first 30 characters end in "-.": a name part may not end there.
    group = GroupKey("default", "a" * 28 + "-.b" + "c" * 20)
    name = placeholder_name(group, "node-" + "x" * 60, 1)
    assert name.startswith("a" * 28 + "-hold-"), name
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name), name
