"""Cutting a list's JSON answer into items as it arrives (extender/kube/list_split.py):
the same items and envelope as parsing the whole answer, however the bytes are cut,
and a ListSplitError, never a wrong item, for what is not such a list."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from extender.kube.list_split import ListSplitError, ListSplitter

# kube-apiserver's field order for a built-in kind's list; a custom resource's list
# comes with its keys sorted (items before kind and metadata).
TYPED_ORDER = ("kind", "apiVersion", "metadata", "items")
SORTED_ORDER = ("apiVersion", "items", "kind", "metadata")


def list_answer(items: list[Any], order: tuple[str, ...] = TYPED_ORDER) -> bytes:
    fields = {
        "kind": "PodList",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": "81085"},
        "items": items,
    }
    return orjson.dumps({key: fields[key] for key in order})


def split(answer: bytes, piece_size: int) -> tuple[dict[str, Any] | None, list[Any]]:
    splitter = ListSplitter()
    items: list[Any] = []
    for at in range(0, len(answer), piece_size):
        items += splitter.feed(answer[at : at + piece_size])
    items += splitter.finish()
    return splitter.envelope, items


def pod(name: str, **more: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns"}, "spec": {"nodeName": ""}, **more}


ENVELOPE = {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "81085"}}


@pytest.mark.parametrize(
    ("case", "items"),
    [
        ("no items", []),
        ("one item", [pod("a")]),
        ("three items", [pod("a"), pod("b"), pod("c")]),
        (
            "the separator's bytes in a string",
            [pod("a", note='},{"metadata":{'), pod("b")],
        ),
        (
            "the separator's bytes in the structure (an array of objects led by metadata)",
            [pod("a", parts=[{"metadata": 1}, {"metadata": 2}]), pod("b")],
        ),
        ("an array closing inside the last item", [pod("a"), pod("b", c=[{"x": [{"y": 1}]}])]),
        ("unicode", [pod("ä-名前"), pod("b")]),
    ],
)
@pytest.mark.parametrize("order", [TYPED_ORDER, SORTED_ORDER], ids=["typed", "sorted"])
@pytest.mark.parametrize("piece_size", [1, 7, 64 * 1024])
def test_items_and_envelope_are_those_of_the_whole_answer(
    case: str, items: list[Any], order: tuple[str, ...], piece_size: int
) -> None:
    envelope, got = split(list_answer(items, order), piece_size)
    assert got == items, case
    assert envelope == ENVELOPE


def test_items_whose_first_field_is_not_metadata_are_cut_at_their_own_first_field() -> None:
    """A custom resource's items come with sorted keys: apiVersion first; its
    managedFields entries (also led by apiVersion) are not taken for items."""
    fields = [{"apiVersion": "a/v1", "manager": "m"}, {"apiVersion": "a/v1", "manager": "n"}]
    items = [
        {"apiVersion": "x/v1", "kind": "P", "metadata": {"name": n, "managedFields": fields}}
        for n in "abc"
    ]
    splitter = ListSplitter()
    answer = list_answer(items, SORTED_ORDER)
    got = splitter.feed(answer)
    assert got == items[:2]  # the last one waits for the end of the answer
    assert splitter.finish() == items[2:]


def test_items_are_handed_out_as_soon_as_the_next_one_begins() -> None:
    answer = list_answer([pod("a"), pod("b"), pod("c")])
    second = answer.index(b'{"metadata":{"name":"b"')
    splitter = ListSplitter()
    assert splitter.feed(answer[: second + len(b'{"metadata":') - 1]) == []  # not yet whole
    assert splitter.feed(b":") == [pod("a")]
    assert splitter.envelope == ENVELOPE


def test_the_fields_after_the_items_complete_the_envelope_at_the_end() -> None:
    splitter = ListSplitter()
    splitter.feed(list_answer([pod("a")], SORTED_ORDER))
    assert splitter.envelope == {"apiVersion": "v1"}  # kind and metadata come after
    splitter.finish()
    assert splitter.envelope == ENVELOPE


NO_ITEMS = "the answer has no items array"
NOT_OBJECTS = "the list's items are not objects written compactly"
NOT_CUT = "the answer's items could not be cut apart"
BAD_END = "the answer does not end like a list"
BAD_START = "the answer does not begin like a list"


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (b'{"kind":"Status","status":"Failure"}', NO_ITEMS),
        (b'{"kind":"PodList","items":null}', NO_ITEMS),
        (b'{"kind":"PodList","items":["a","b"]}', NOT_OBJECTS),
        (b'{"kind":"PodList","items":[ {"metadata":{}}]}', NOT_OBJECTS),
        (b'{"kind":"PodList","items":[{"metadata":{}},{"metadata":{}}', NOT_CUT),
        (b'{"kind":"PodList","items":[{"metadata":{}}]', BAD_END),
        (b'{"kind":"PodList","items":[{"metadata":{}},{"metadata":', NOT_CUT),
        (b'{"kind":"PodList","items":[{"metadata":{}}],"x"}', BAD_END),
        (b'{"kind":"PodList","items":[{"metadata":{}}]]', BAD_END),
        (b'{"kind":"PodList","items":[{"metadata":{}}]x}', BAD_END),
        (b'{"kind":"PodList" "items":[{"metadata":{}}]}', BAD_START),
        (b'["items":[{"metadata":{}}]}', BAD_START),
        (b'"a","items":[{"metadata":{}}]}', BAD_START),
    ],
)
def test_an_answer_that_is_not_such_a_list_is_a_split_error(answer: bytes, message: str) -> None:
    splitter = ListSplitter()
    with pytest.raises(ListSplitError) as caught:
        splitter.feed(answer)
        splitter.finish()
    assert str(caught.value) == message


@pytest.mark.parametrize("ending", [b"\n", b" \r\n"])
def test_an_answer_may_end_in_white_space(ending: bytes) -> None:
    items = [pod("a"), pod("b")]
    assert split(list_answer(items) + ending, 5)[1] == items


def test_an_item_may_reach_the_bound_but_not_pass_it() -> None:
    head = b'{"kind":"PodList","items":['
    partial = b'{"a":"123456"'  # an item begun, its end not yet come
    ListSplitter(max_item_bytes=len(partial)).feed(head + partial)
    with pytest.raises(ListSplitError):
        ListSplitter(max_item_bytes=len(partial) - 1).feed(head + partial)


def test_an_item_larger_than_the_bound_gives_up_instead_of_holding_the_answer() -> None:
    items = [pod("a", blob="x" * 500), pod("b")]
    splitter = ListSplitter(max_item_bytes=400)
    with pytest.raises(ListSplitError, match="no item boundary in"):
        for at in range(0, 2_000, 100):
            splitter.feed(list_answer(items)[at : at + 100])
    # within the bound, the same answer splits
    assert split(list_answer(items), 100)[1] == items


# Strings and keys that put the cutting bytes where they must not be taken for a cut.
TRICKY = st.sampled_from(
    ['},{"metadata":', "}]", '"items":[', "]}", ",", "{", "}", "\\", '"', "ä", "metadata"]
)
JSON_TEXT = st.lists(st.one_of(TRICKY, st.text(max_size=4)), max_size=4).map("".join)
VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | JSON_TEXT,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(["metadata", "items", "a", "apiVersion"]), inner, max_size=3
        )
    ),
    max_leaves=12,
)
ITEMS = st.lists(
    st.builds(
        lambda first, rest: {"metadata": first, **rest},
        VALUES,
        st.dictionaries(st.sampled_from(["spec", "status", "x"]), VALUES, max_size=3),
    ),
    max_size=6,
)


@settings(max_examples=300, deadline=None)
@given(
    items=ITEMS,
    order=st.sampled_from([TYPED_ORDER, SORTED_ORDER]),
    piece_size=st.integers(min_value=1, max_value=300),
)
def test_any_list_cut_into_any_pieces_gives_the_items_of_the_whole_answer(
    items: list[Any], order: tuple[str, ...], piece_size: int
) -> None:
    envelope, got = split(list_answer(items, order), piece_size)
    assert got == items
    assert envelope == ENVELOPE
