"""Prioritize's fast path gives the same answers as the plain one.

The fast path (`GangCore.priorities` + `HostPriorityEncoder`): only the nodes that
score, from wire bytes kept per node and caught up from the score board's journal.
The plain one: every candidate's score from `GangCore.prioritize`, dumped as JSON.
kube-scheduler adds nothing for a node an extender leaves out, so the fast answer
must be the plain answer without its zeros, byte for byte, after any changes.
"""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from extender.api.extender import HostPriorityEncoder
from extender.domain.gang.gang import GangCore
from extender.domain.objects.model import NodeInfo, PodInfo
from extender.domain.objects.policy import Policy, Strategy
from extender.domain.planning.scoring import NodeScoreBoard, Priorities
from tests.builders import make_node, make_pod
from tests.core_builder import make_core
from tests.strategies import NODE_NAMES, apply_change, snapshot_changes

changes = snapshot_changes(max_size=30)
candidate_lists = st.lists(st.sampled_from([*NODE_NAMES, "unknown"]), unique=True, max_size=7)


def scoring_core(
    policy: Policy, journal_limit: int
) -> tuple[GangCore, HostPriorityEncoder, PodInfo]:
    """A core whose board keeps a journal of `journal_limit`, an encoder, a plain pod."""
    core = make_core(policy=policy)
    core.room.score_board = NodeScoreBoard(journal_min_limit=journal_limit)
    return core, HostPriorityEncoder(), PodInfo.from_api(make_pod("probe").gpus(1).obj())


def apply_changes(core: GangCore, ops: list[tuple[str, int, int]], step: int) -> int:
    """snapshot_changes' ops applied in order; the step (time, pod names) reached."""
    for op, i, gpus in ops:
        step += 1
        apply_change(core, op, i, gpus, step)
    return step


def plain_answer(core: GangCore, pod: PodInfo, candidates: list[str]) -> bytes:
    scores = core.prioritize(pod, candidates)
    return orjson.dumps([{"Host": h, "Score": s} for h, s in scores.items() if s > 0])


@given(
    st.lists(st.tuples(changes, candidate_lists), min_size=1, max_size=6),
    st.sampled_from([Policy(), Policy(name="spread", strategy=Strategy.SPREAD)]),
    st.integers(min_value=0, max_value=8),
)
@settings(max_examples=300, deadline=None)
def test_fast_prioritize_is_the_plain_answer_without_zeros(rounds, policy, journal_limit) -> None:
    # One core and one encoder across rounds of changes, as in the service: the
    # encoder's per-node bytes must follow every change, also when the journal
    # started over (a small limit) before the encoder caught up.
    core, encoder, plain = scoring_core(policy, journal_limit)
    step = 0
    for ops, candidates in rounds:
        step = apply_changes(core, ops, step)
        fast = encoder.encode(core.priorities(plain), candidates)
        assert fast == plain_answer(core, plain, candidates), (ops, candidates)
        # A planned member: its node only, whatever the board holds.
        for plan in core.ledger.plans.values():
            for uid in plan.unbound:
                member = core.snapshot.pods[uid]
                fast = encoder.encode(core.priorities(member), candidates)
                assert fast == plain_answer(core, member, candidates)


@given(st.lists(st.sampled_from(NODE_NAMES), max_size=20), st.integers(min_value=0, max_value=4))
@settings(max_examples=200, deadline=None)
def test_the_journal_names_every_node_whose_score_changed(rescored, limit) -> None:
    # A reader that replays `changed_since` from its position, or re-reads everything
    # when told to (None), always ends with the board's scores.
    core = make_core()
    board = NodeScoreBoard(journal_min_limit=limit)
    core.room.score_board = board
    for name in NODE_NAMES:
        core.apply_node(NodeInfo.from_api(make_node(name).gpus(4).obj()))
    copy: dict[str, int] = {}
    position = board.position - 1  # before the start: the first read is a full one
    for step, name in enumerate(rescored):
        pod = make_pod(f"p{step}").gpus(1).node(name).obj()
        core.observe_pod(PodInfo.from_api(pod), float(step))
        board.refresh(core.snapshot, core.ledger, core.policy)
        changed = board.changed_since(position)
        if changed is None:
            copy = dict(board.scores)
        else:
            for node in changed:
                copy[node] = board.scores.get(node, 0)
            copy = {n: s for n, s in copy.items() if s}
        position = board.position
        assert copy == board.scores


def plain_answer_in_order(core: GangCore, pod: PodInfo, candidates: list[str]) -> bytes:
    """The plain answer, a candidate named twice answered twice (as the encoder does)."""
    scores = core.prioritize(pod, candidates)
    return orjson.dumps([{"Host": h, "Score": scores[h]} for h in candidates if scores[h] > 0])


# A few candidate lists asked again and again, as kube-scheduler asks pod after pod;
# one names a node twice (answered twice), one names a node no board has.
REPEATED_CANDIDATES = (
    list(NODE_NAMES),
    ["n3", "n0", "unknown", "n5"],
    ["n1", "n2", "n1"],
    [],
)


@given(
    st.lists(
        st.tuples(
            snapshot_changes(max_size=4),
            # Mostly the first list: the same candidates across changes, patched.
            st.lists(st.sampled_from([0, 0, 0, 1, 2, 2, 3]), min_size=1, max_size=3),
        ),
        min_size=1,
        max_size=12,
    ),
    # Mostly a journal long enough to patch from; sometimes one that starts over.
    st.sampled_from([1000, 1000, 1000, 2, 0]),
)
@settings(max_examples=600, deadline=None)
def test_the_same_candidates_asked_again_get_the_plain_answer_after_any_changes(
    rounds, journal_limit
) -> None:
    # The encoder keeps its last answer and patches it: after no change, a few, or a
    # journal that started over, and with other candidates asked in between.
    core, encoder, plain = scoring_core(Policy(), journal_limit)
    step = 0
    for ops, asks in rounds:
        step = apply_changes(core, ops, step)
        for ask in asks:
            # A fresh list each time, as each request parses its own.
            candidates = list(REPEATED_CANDIDATES[ask])
            fast = encoder.encode(core.priorities(plain), candidates)
            assert fast == plain_answer_in_order(core, plain, candidates), (ops, candidates)


def test_a_second_board_is_answered_from_its_own_scores() -> None:
    # A new core (a replica that became leader again rebuilds it) brings a new board:
    # the last answer, kept for the old one, is not reused even for the same names.
    encoder = HostPriorityEncoder()
    candidates = list(NODE_NAMES)
    answers = []
    for gpus in (2, 4):
        core = make_core()
        for name in NODE_NAMES[:2]:
            core.apply_node(NodeInfo.from_api(make_node(name).gpus(8).obj()))
            pod = make_pod(f"{name}-used").gpus(gpus).node(name).obj()
            core.observe_pod(PodInfo.from_api(pod), 1.0)
        probe = PodInfo.from_api(make_pod("probe").gpus(1).obj())
        answers.append(encoder.encode(core.priorities(probe), list(candidates)))
        assert answers[-1] == plain_answer(core, probe, candidates)
    assert answers[0] != answers[1]


def rescore(board: NodeScoreBoard, **scores: int) -> None:
    """Scores changed as the board's refresh records them: a journal entry per node."""
    for node, score in scores.items():
        if score:
            board.scores[node] = score
        else:
            board.scores.pop(node, None)
        board.journal.append(node)


def wire_answer(board: NodeScoreBoard, candidates: list[str]) -> bytes:
    return orjson.dumps(
        [{"Host": h, "Score": board.scores[h]} for h in candidates if board.scores.get(h)]
    )


@pytest.mark.parametrize(
    ("case", "scores", "names", "changes"),
    [
        (
            "each kind of change",
            {"a": 3, "b": 5, "c": 7},
            ["c", "a", "b", "d"],
            [
                {},  # nothing changed: the same answer
                {"a": 9},  # the first change: the kept entries are built
                {"b": 0},  # a node that stops scoring leaves the answer ...
                {"b": 2, "d": 4},  # ... and comes back; a node that starts scoring joins it
                {"z": 6},  # a node that is not a candidate changes nothing
            ],
        ),
        (
            "a name asked twice: both its entries follow",
            {"a": 3, "b": 5},
            ["a", "b", "a"],
            [{}, {"a": 4}, {"a": 8}, {"a": 0}],
        ),
    ],
)
def test_asked_again_the_last_answer_follows_each_change_of_score(
    case: str, scores: dict[str, int], names: list[str], changes: list[dict[str, int]]
) -> None:
    board = NodeScoreBoard(scores=dict(scores))
    encoder = HostPriorityEncoder()
    for change in changes:
        rescore(board, **change)
        answer = encoder.encode(Priorities(board.scores, board), list(names))
        assert answer == wire_answer(board, names), (case, change)


def test_a_journal_that_started_over_rebuilds_the_kept_entries() -> None:
    board = NodeScoreBoard(scores={"a": 3, "b": 5})
    encoder = HostPriorityEncoder()
    names = ["a", "b"]
    encoder.encode(Priorities(board.scores, board), list(names))
    rescore(board, a=4)
    encoder.encode(Priorities(board.scores, board), list(names))  # entries kept from here
    rescore(board, b=1)
    board.journal_start += len(board.journal)  # the journal starts over (too long)
    board.journal = []
    assert encoder.encode(Priorities(board.scores, board), list(names)) == wire_answer(board, names)


def test_other_candidates_asked_in_between_are_answered_from_the_table() -> None:
    board = NodeScoreBoard(scores={"a": 3, "b": 5, "c": 1})
    encoder = HostPriorityEncoder()
    for names in (["a", "b"], ["b", "c"], ["a", "b"], ["b", "c"]):
        rescore(board, b=board.scores["b"] + 1)
        assert encoder.encode(Priorities(board.scores, board), list(names)) == wire_answer(
            board, names
        )


def test_asked_again_with_no_score_changed_the_kept_answer_is_the_answer() -> None:
    # The reuse itself (no join, no lookups): the very bytes of the last answer.
    board = NodeScoreBoard(scores={"a": 3, "b": 5})
    encoder = HostPriorityEncoder()
    first = encoder.encode(Priorities(board.scores, board), ["a", "b"])
    assert encoder.encode(Priorities(board.scores, board), ["a", "b"]) is first
    rescore(board, b=6)
    second = encoder.encode(Priorities(board.scores, board), ["a", "b"])
    assert second == wire_answer(board, ["a", "b"])
    assert encoder.encode(Priorities(board.scores, board), ["a", "b"]) is second
