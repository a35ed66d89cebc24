"""Prioritize's fast path gives the same answers as the plain one.

The fast path (`GangCore.priorities` + `HostPriorityEncoder`): only the nodes that
score, from wire bytes kept per node and caught up from the score board's journal.
The plain one: every candidate's score from `GangCore.prioritize`, dumped as JSON.
kube-scheduler adds nothing for a node an extender leaves out, so the fast answer
must be the plain answer without its zeros, byte for byte, after any changes.
"""

from __future__ import annotations

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from extender.api.extender import HostPriorityEncoder
from extender.domain.gang import GangCore, Timeouts
from extender.domain.model import NodeInfo, PodInfo
from extender.domain.policy import Policy, Strategy
from extender.domain.scoring import NodeScoreBoard
from tests.builders import make_node, make_pod
from tests.strategies import NODE_NAMES, apply_change, snapshot_changes

changes = snapshot_changes(max_size=30)
candidate_lists = st.lists(st.sampled_from([*NODE_NAMES, "unknown"]), unique=True, max_size=7)


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
    core = GangCore(policy=policy, timeouts=Timeouts(60, 30, 2))
    core.score_board = NodeScoreBoard(journal_min_limit=journal_limit)
    encoder = HostPriorityEncoder()
    plain = PodInfo.from_api(make_pod("probe").gpus(1).obj())
    step = 0
    for ops, candidates in rounds:
        for op, i, gpus in ops:
            step += 1
            apply_change(core, op, i, gpus, step)
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
    core = GangCore(policy=Policy(), timeouts=Timeouts(60, 30, 2))
    board = NodeScoreBoard(journal_min_limit=limit)
    core.score_board = board
    for name in NODE_NAMES:
        core.snapshot.upsert_node(NodeInfo.from_api(make_node(name).gpus(4).obj()))
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
