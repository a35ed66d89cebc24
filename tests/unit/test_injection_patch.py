"""JSON Patch building blocks: RFC 6901 pointers, `add` vs `replace`, and the reference apply."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from extender.injection.patch import (
    JsonPatchOp,
    PatchError,
    append_items,
    apply_patch,
    escape_token,
    pointer,
    prepend_items,
    set_map_entry,
    set_member,
    unescape_token,
)


@pytest.mark.parametrize(
    ("token", "escaped"),
    [
        pytest.param("gang-extender.io/task-index", "gang-extender.io~1task-index", id="slash"),
        pytest.param("a~b", "a~0b", id="tilde"),
        pytest.param("~1", "~01", id="tilde before one is not a slash"),
    ],
)
def test_tokens_are_escaped_per_rfc_6901(token: str, escaped: str) -> None:
    assert escape_token(token) == escaped
    assert unescape_token(escaped) == token


@given(st.text())
def test_escaping_round_trips(token: str) -> None:
    assert unescape_token(escape_token(token)) == token


def test_pointer_joins_escaped_tokens() -> None:
    assert pointer("spec", "containers", 0, "env") == "/spec/containers/0/env"
    assert pointer("metadata", "labels", "a/b") == "/metadata/labels/a~1b"


class TestSetMapEntry:
    def test_a_missing_map_is_added_whole(self) -> None:
        assert set_map_entry({}, "/metadata", "annotations", "a/b", "1") == [
            {"op": "add", "path": "/metadata/annotations", "value": {"a/b": "1"}}
        ]

    def test_a_missing_key_is_added_with_an_escaped_path(self) -> None:
        owner = {"annotations": {"x": "y"}}
        assert set_map_entry(owner, "/metadata", "annotations", "a/b", "1") == [
            {"op": "add", "path": "/metadata/annotations/a~1b", "value": "1"}
        ]

    def test_a_different_value_is_replaced(self) -> None:
        owner = {"annotations": {"a/b": "0"}}
        assert set_map_entry(owner, "/metadata", "annotations", "a/b", "1") == [
            {"op": "replace", "path": "/metadata/annotations/a~1b", "value": "1"}
        ]

    def test_an_equal_value_needs_no_op(self) -> None:
        assert set_map_entry({"labels": {"k": "v"}}, "/metadata", "labels", "k", "v") == []


def test_set_member_adds_or_replaces() -> None:
    assert set_member({}, "/spec", "hostname", "h") == [
        {"op": "add", "path": "/spec/hostname", "value": "h"}
    ]
    assert set_member({"hostname": "x"}, "/spec", "hostname", "h") == [
        {"op": "replace", "path": "/spec/hostname", "value": "h"}
    ]


def test_append_creates_a_missing_list_and_appends_to_an_existing_one() -> None:
    assert append_items({}, "/spec", "volumes", [1, 2]) == [
        {"op": "add", "path": "/spec/volumes", "value": [1, 2]}
    ]
    assert append_items({"volumes": [0]}, "/spec", "volumes", [1]) == [
        {"op": "add", "path": "/spec/volumes/-", "value": 1}
    ]
    assert append_items({}, "/spec", "volumes", []) == []


def test_prepend_keeps_the_order_of_the_new_items_before_the_old_ones() -> None:
    owner = {"env": ["user"]}
    ops = prepend_items(owner, "", "env", ["a", "b"])
    assert apply_patch(owner, ops) == {"env": ["a", "b", "user"]}


class TestApplyPatch:
    def test_add_cannot_create_a_missing_parent(self) -> None:
        with pytest.raises(PatchError, match="does not exist"):
            apply_patch({}, [{"op": "add", "path": "/metadata/labels/a", "value": "1"}])

    def test_replace_of_a_missing_member_fails(self) -> None:
        with pytest.raises(PatchError, match="does not exist"):
            apply_patch({}, [{"op": "replace", "path": "/a", "value": 1}])

    def test_add_on_an_existing_member_sets_it(self) -> None:
        assert apply_patch({"a": 1}, [{"op": "add", "path": "/a", "value": 2}]) == {"a": 2}

    def test_array_indexes_are_checked(self) -> None:
        with pytest.raises(PatchError, match="out of range"):
            apply_patch({"l": []}, [{"op": "replace", "path": "/l/0", "value": 1}])
        with pytest.raises(PatchError, match="not an array index"):
            apply_patch({"l": [1]}, [{"op": "replace", "path": "/l/01", "value": 1}])

    def test_the_input_is_not_modified(self) -> None:
        document: dict[str, Any] = {"a": {"b": 1}}
        ops: list[JsonPatchOp] = [{"op": "remove", "path": "/a/b"}]
        assert apply_patch(document, ops) == {"a": {}}
        assert document == {"a": {"b": 1}}

    def test_test_op_checks_the_value(self) -> None:
        with pytest.raises(PatchError, match="failed"):
            apply_patch({"a": 1}, [{"op": "test", "path": "/a", "value": 2}])


@given(
    st.dictionaries(st.text(min_size=1), st.text(), max_size=5),
    st.text(min_size=1),
    st.text(),
)
def test_set_map_entry_always_applies_and_sets_the_value(
    existing: dict[str, str], key: str, value: str
) -> None:
    for owner in ({}, {"annotations": existing}):
        ops = set_map_entry(owner, "", "annotations", key, value)
        assert apply_patch(owner, ops)["annotations"][key] == value


def test_the_injection_package_stays_pure() -> None:
    """The renders never import an I/O library (STYLE: pure core, thin edges)."""
    import subprocess
    import sys

    code = (
        "import sys, pkgutil, importlib, extender.injection as p\n"
        "for m in pkgutil.iter_modules(p.__path__): importlib.import_module(f'{p.__name__}.{m.name}')\n"
        "print(' '.join(n for n in ('kubernetes', 'fastapi', 'httpx', 'prometheus_client', 'urllib3')"
        " if n in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == ""
