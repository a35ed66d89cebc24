"""The candidates' names parsed once per distinct list (extender/api/candidates.py):
whatever body comes, a recalled answer is the one a full parse gives, and a body it
cannot vouch for is parsed whole."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from extender.api.candidates import CandidateMemo

POD = {"metadata": {"name": "p", "uid": "u"}, "spec": {"schedulerName": "gang-extender"}}
NAMES = ["n-1", "n-2", "n-3"]


def args_body(pod: dict[str, Any] = POD, names: list[str] = NAMES) -> bytes:
    """ExtenderArgs as kube-scheduler writes them (Go field order, compact)."""
    return orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": names})


def remembered(body: bytes) -> CandidateMemo:
    memo = CandidateMemo()
    memo.remember(body, orjson.loads(body)["NodeNames"])
    return memo


def test_the_same_names_after_another_pod_are_recalled_with_that_pod() -> None:
    memo = remembered(args_body())
    other = {"metadata": {"name": "q", "uid": "v"}}
    head, names = memo.recall(args_body(pod=other)) or ({}, [])
    assert head == {"Pod": other, "Nodes": None}
    assert names == NAMES


def test_each_recall_hands_out_its_own_list() -> None:
    memo = remembered(args_body())
    first = memo.recall(args_body())
    assert first is not None
    first[1].append("mutated by a caller")
    second = memo.recall(args_body())
    assert second is not None and second[1] == NAMES


@pytest.mark.parametrize(
    ("case", "body"),
    [
        ("other names", args_body(names=["n-1", "n-2"])),
        ("one name more", args_body(names=[*NAMES, "n-4"])),
        ("nothing before the names", b'{,"NodeNames":["n-1","n-2","n-3"]}'),
        ("an empty object before them", b'{}  ,"NodeNames":["n-1","n-2","n-3"]}'),
        ("a head that is not JSON", b'{"Pod":{"a":1,"NodeNames":["n-1","n-2","n-3"]}'),
        ("the names inside the pod", b'{"Pod":{"x":1,"NodeNames":["n-1","n-2","n-3"]}}'),
        ("no comma before them", b'{"Pod":{} "NodeNames":["n-1","n-2","n-3"]}'),
        ("a head left open in a string", b'{"Pod":"x,"NodeNames":["n-1","n-2","n-3"]}'),
        ("a trailing comma before them", b'{"Pod":{},,"NodeNames":["n-1","n-2","n-3"]}'),
    ],
)
def test_a_body_the_memo_cannot_vouch_for_is_parsed_whole(case: str, body: bytes) -> None:
    assert remembered(args_body()).recall(body) is None, case


def test_an_earlier_member_of_the_same_name_gives_way_to_the_last() -> None:
    memo = remembered(args_body())
    body = b'{"NodeNames":["elsewhere"],"Pod":{},"NodeNames":["n-1","n-2","n-3"]}'
    assert orjson.loads(body)["NodeNames"] == NAMES  # what a full parse says
    assert memo.recall(body) == ({"Pod": {}}, NAMES)


@pytest.mark.parametrize(
    ("case", "body"),
    [
        ("names not last", orjson.dumps({"NodeNames": NAMES, "Pod": POD})),
        ("a newline after the body", args_body() + b"\n"),
        ("spaces in the list", b'{"Pod":{},"NodeNames":["n-1", "n-2", "n-3"]}'),
        ("the names in a nested object", b'{"Pod":{"NodeNames":["n-1","n-2","n-3"]}}'),
    ],
)
def test_only_names_written_last_and_compactly_are_kept(case: str, body: bytes) -> None:
    memo = CandidateMemo()
    memo.remember(body, NAMES)
    assert memo.recall(args_body()) is None, case


def test_no_names_keep_nothing_and_a_new_list_replaces_the_last() -> None:
    memo = remembered(args_body())
    memo.remember(args_body(names=["n-9"]), ["n-9"])
    assert memo.recall(args_body()) is None
    assert memo.recall(args_body(names=["n-9"])) is not None
    memo.remember(b'{"Pod":{},"NodeNames":null}', None)
    assert memo.recall(args_body(names=["n-9"])) is None


# Bodies built from pieces that may or may not make a JSON object: whenever the memo
# recalls, a full parse must succeed and say the same.
PIECES = st.sampled_from(
    [
        b"{",
        b"}",
        b",",
        b" ",
        b'"Pod"',
        b":",
        b'{"a":1}',
        b'"x"',
        b"[",
        b"]",
        b"1",
        b"null",
        b'"NodeNames"',
        b'\\"',
        b'"s,\\"NodeNames\\":["',
    ]
)
HEADS = st.one_of(
    st.lists(PIECES, max_size=8).map(b"".join),
    st.dictionaries(st.sampled_from(["Pod", "Nodes", "NodeNames", "x"]), st.integers(0, 99))
    .map(orjson.dumps)
    .map(lambda b: b[:-1]),
)


@settings(max_examples=1000, deadline=None)
@given(head=HEADS, names=st.sampled_from([NAMES, ["n-1"], ["n-1", "n-2", "n-3", "n-4"]]))
def test_whatever_comes_before_the_names_a_recall_is_what_a_full_parse_says(
    head: bytes, names: list[str]
) -> None:
    memo = remembered(args_body())
    body = head + b',"NodeNames":' + orjson.dumps(names) + b"}"
    recalled = memo.recall(body)
    if recalled is None:
        return
    full = orjson.loads(body)  # raises if the memo vouched for a body that is not JSON
    assert isinstance(full, dict)
    other, got = recalled
    assert got == full.pop("NodeNames") == NAMES
    assert other == full
