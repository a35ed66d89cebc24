"""The task-index book kept from watch events answers as a list computed from scratch would.

`MemberIndex` (the fast path, O(1) per event) against `ListedGroup` (the plain path,
built from the final set of members): after any sequence of puts, removes and
relists (complete, or abandoned and started again), every question the allocator
asks gets the same answer from both.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from extender.kube.member_indexes import ListedGroup, Member, MemberIndex

NAMESPACES = ("team-a", "team-b")
GROUPS = ("g", "h")
NAMES = ("p0", "p1", "p2", "p3")
TASKS = ("worker", "master")
INDEXES = range(4)
UIDS = tuple(f"uid-{i}" for i in range(6))


def member(
    name: str,
    index: int | None,
    *,
    task: str = "worker",
    group: str = "g",
    namespace: str = "team-a",
    finished: bool = False,
    deleting: bool = False,
) -> Member:
    return Member(namespace, group, name, task, index, finished, deleting)


members = st.builds(
    Member,
    namespace=st.sampled_from(NAMESPACES),
    group=st.sampled_from(GROUPS),
    name=st.sampled_from(NAMES),
    task=st.sampled_from(TASKS),
    index=st.none() | st.sampled_from(INDEXES),
    finished=st.booleans(),
    deleting=st.booleans(),
)
puts = st.tuples(st.sampled_from(UIDS), st.none() | members)
events = st.one_of(
    st.tuples(st.just("put"), puts),
    st.tuples(st.just("remove"), st.sampled_from(UIDS)),
    # (abandoned pages, final pages): a relist that broke off is started again
    st.tuples(st.just("relist"), st.tuples(st.lists(puts, max_size=4), st.lists(puts, max_size=8))),
)


def replay(sequence: list[tuple[str, Any]]) -> tuple[MemberIndex, dict[str, Member]]:
    """The book after `sequence`, and the members it should hold (the model)."""
    book, model = MemberIndex(), {}
    for op, arg in sequence:
        if op == "put":
            uid, value = arg
            book.put(uid, value)
            _model_put(model, uid, value)
        elif op == "remove":
            book.remove(arg)
            model.pop(arg, None)
        else:
            abandoned, final = arg
            book.begin_relist()
            for uid, value in abandoned:
                book.put(uid, value)
            book.begin_relist()
            model = {}
            for uid, value in final:
                book.put(uid, value)
                _model_put(model, uid, value)
            book.end_relist()
    return book, model


def _model_put(model: dict[str, Member], uid: str, value: Member | None) -> None:
    if value is None:
        model.pop(uid, None)
    else:
        model[uid] = value


def answers(view: Any) -> list[Any]:
    """Every question the allocator can ask of one group, with its answer."""
    out: list[Any] = [("has_name", name, view.has_name(name)) for name in NAMES]
    for task in TASKS:
        for index in INDEXES:
            out.append(("live", task, index, view.live(task, index)))
            out.append(("taken", task, index, view.taken(task, index)))
            for other in ("", *NAMES):
                out.append(
                    ("holder", task, index, other, view.holder(task, index, other_than=other))
                )
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(events, max_size=25))
def test_after_any_events_the_book_answers_as_the_final_members_listed_from_scratch(
    sequence: list[tuple[str, Any]],
) -> None:
    book, model = replay(sequence)
    assert dict(book.members()) == model
    assert len(book) == len(model)
    for namespace in NAMESPACES:
        for group in GROUPS:
            listed = ListedGroup(
                m for m in model.values() if (m.namespace, m.group) == (namespace, group)
            )
            assert answers(book.group(namespace, group)) == answers(listed)


def test_a_pod_that_changes_group_or_index_leaves_its_old_slot() -> None:
    book = MemberIndex()
    book.put("u1", member("a", 0))
    book.put("u1", member("a", 1))
    assert not book.group("team-a", "g").taken("worker", 0)
    assert book.group("team-a", "g").taken("worker", 1)
    book.put("u1", member("a", 1, group="h"))
    assert not book.group("team-a", "g").has_name("a")
    assert book.group("team-a", "h").holder("worker", 1, other_than="") == "a"


def test_a_pod_that_leaves_every_group_is_forgotten() -> None:
    book = MemberIndex()
    book.put("u1", member("a", 0))
    book.put("u1", None)
    assert len(book) == 0
    assert not book.group("team-a", "g").has_name("a")


def test_a_terminating_member_keeps_its_index_taken_but_holds_no_claim() -> None:
    book = MemberIndex()
    book.put("u1", member("a", 0, deleting=True))
    view = book.group("team-a", "g")
    assert view.taken("worker", 0)
    assert not view.live("worker", 0)
    assert view.holder("worker", 0, other_than="") is None


def test_a_finished_member_frees_its_index_but_is_still_seen_by_name() -> None:
    book = MemberIndex()
    book.put("u1", member("a", 0, finished=True))
    view = book.group("team-a", "g")
    assert not view.taken("worker", 0)
    assert view.has_name("a")


def test_two_holders_name_the_smallest_and_the_claimant_is_never_its_own_holder() -> None:
    book = MemberIndex()
    book.put("u2", member("b", 0))
    book.put("u1", member("a", 0))
    view = book.group("team-a", "g")
    assert view.holder("worker", 0, other_than="") == "a"
    assert view.holder("worker", 0, other_than="a") == "b"
    book.remove("u2")
    assert book.group("team-a", "g").holder("worker", 0, other_than="a") is None


def test_a_relist_drops_what_it_did_not_show_and_keeps_what_it_did() -> None:
    book = MemberIndex()
    book.put("u1", member("a", 0))
    book.put("u2", member("b", 1))
    book.begin_relist()
    book.put("u2", member("b", 1))
    book.end_relist()
    assert dict(book.members()) == {"u2": member("b", 1)}
    assert not book.group("team-a", "g").taken("worker", 0)


def test_a_group_left_without_members_is_dropped() -> None:
    book = MemberIndex()
    book.put("u1", member("a", 0))
    book.remove("u1")
    book.remove("u1")  # a second delete (a relist after a missed one) is harmless
    assert book.group("team-a", "g").has_name("a") is False
    assert book.group_count() == 0
