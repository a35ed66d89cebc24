"""A held gang is not re-planned while its planning inputs did not change.

The memo (`GroupState.shortfall_generation`, keyed on `GangCore._planning_inputs`)
skips re-planning a gang that did not fit until a node, capacity, a group's members,
a PodGroup or a plan changed. Events that change none of these (a node's status
heartbeat, a plain pod's status) leave every held gang's memo valid: O(1) per held
gang. The property: whenever the memo says "still does not fit", planning afresh
says the same, with the same message.
"""

from __future__ import annotations

import copy

from hypothesis import given, settings
from hypothesis import strategies as st

from extender.domain.gang.gang import GangCore
from extender.domain.objects.model import NodeInfo, PodInfo
from tests.builders import make_node, make_pod
from tests.core_builder import make_core

NODE_GPUS = [4, 4, 2]

events = st.lists(
    st.tuples(
        st.sampled_from(
            [
                "heartbeat",  # a node's status update: same NodeInfo
                "resize",  # a node's allocatable changed
                "bind-plain",  # a plain pod bound (takes capacity)
                "plain-status",  # a bound plain pod's status changed (Running, then back)
                "pending-plain",  # a plain pod created, not bound
                "finish-plain",  # a bound plain pod Succeeded (gives capacity back)
                "member",  # one more member of a held gang
                "filter",  # kube-scheduler asks about a held member
            ]
        ),
        st.integers(min_value=0, max_value=2),
        st.integers(min_value=1, max_value=4),
    ),
    max_size=25,
)


def held_core() -> GangCore:
    core = make_core()
    for i, gpus in enumerate(NODE_GPUS):
        core.apply_node(NodeInfo.from_api(make_node(f"n{i}").gpus(gpus).obj()))
    return core


def member(group: int, index: int, gpus: int) -> PodInfo:
    pod = make_pod(f"g{group}-{index}").group(f"g{group}").min_available(2).gpus(gpus)
    pod = pod.priority(10 * group)  # g2 goes first: gangs wait behind others
    return PodInfo.from_api(pod.obj())


class Replay:
    """Applies the `events` ops to a held core, one by one."""

    def __init__(self) -> None:
        self.core = held_core()
        self.now = 0.0
        self.plain: list[PodInfo] = []
        self.sizes = {g: 0 for g in range(3)}

    def apply(self, step: int, op: str, i: int, n: int) -> None:
        core = self.core
        self.now += 1.0
        now, plain, sizes = self.now, self.plain, self.sizes
        if op == "heartbeat":
            core.apply_node(NodeInfo.from_api(make_node(f"n{i}").gpus(NODE_GPUS[i]).obj()))
        elif op == "resize":
            core.apply_node(NodeInfo.from_api(make_node(f"n{i}").gpus(n).obj()))
        elif op == "bind-plain":
            pod = PodInfo.from_api(make_pod(f"p{step}").gpus(1).node(f"n{i}").obj())
            plain.append(pod)
            core.observe_pod(pod, now)
        elif op == "pending-plain":
            core.observe_pod(PodInfo.from_api(make_pod(f"q{step}").gpus(n).obj()), now)
        elif op in ("plain-status", "finish-plain") and plain:
            pod = plain[n % len(plain)]
            phase = "Succeeded" if op == "finish-plain" else ("Running", "Pending")[step % 2]
            core.observe_pod(
                PodInfo.from_api(
                    make_pod(pod.name).gpus(1).node(pod.node_name or "").phase(phase).obj()
                ),
                now,
            )
        elif op == "member":
            core.observe_pod(member(i, sizes[i], n), now)
            sizes[i] += 1
        elif op == "filter" and sizes[i]:
            asked = core.snapshot.pods.get(member(i, 0, 1).uid)
            if asked is not None:
                core.filter(asked, list(core.snapshot.nodes), now)


@given(events)
@settings(max_examples=300, deadline=None)
def test_a_memoised_shortfall_is_what_a_fresh_plan_says(ops) -> None:
    replay = Replay()
    core = replay.core
    for step, (op, i, n) in enumerate(ops):
        replay.apply(step, op, i, n)
        now = replay.now
        for key, state in core.groups.items():
            if not state.waiting or key in core.ledger.plans:
                continue
            if state.shortfall_generation != core.room.planning_inputs():
                continue
            # The memo holds: a fresh attempt must agree.
            fresh = copy.deepcopy(core)
            fresh.groups[key].shortfall_generation = None
            fresh.group_changed(key, now)
            assert key not in fresh.ledger.plans, (step, op, state.message)
            assert fresh.groups[key].message == state.message


def test_heartbeats_and_plain_pod_status_leave_held_gangs_memoised() -> None:
    core = held_core()
    bound = PodInfo.from_api(make_pod("busy").gpus(1).node("n0").obj())
    core.observe_pod(bound, 0.0)
    for m in range(3):  # 3 x 4 GPUs cannot fit on 4 + 4 + 2 with one taken
        core.observe_pod(member(0, m, 4), 0.0)
    first = core.snapshot.pods[member(0, 0, 4).uid]
    held = core.filter(first, list(core.snapshot.nodes), 1.0)
    assert held.nodes == []
    inputs = core.room.planning_inputs()
    core.apply_node(NodeInfo.from_api(make_node("n1").gpus(4).obj()))  # heartbeat
    running = make_pod("busy").gpus(1).node("n0").phase("Running").obj()
    core.observe_pod(PodInfo.from_api(running), 2.0)  # status of a bound plain pod
    core.observe_pod(PodInfo.from_api(make_pod("later").gpus(1).obj()), 2.0)  # pending plain
    assert core.room.planning_inputs() == inputs
    # A change that can help is not memoised away: the busy pod finishes, n0 frees up.
    done = make_pod("busy").gpus(1).node("n0").phase("Succeeded").obj()
    core.observe_pod(PodInfo.from_api(done), 3.0)
    assert core.room.planning_inputs() != inputs


@given(events)
@settings(max_examples=200, deadline=None)
def test_the_kept_answer_to_which_gang_is_ahead_is_a_fresh_ones(ops) -> None:
    """gang_ahead_of keeps, per group, whether it would fit on the empty nodes it
    wants; after any events its answer is what a core without that memo says."""
    replay = Replay()
    for step, (op, i, n) in enumerate(ops):
        replay.apply(step, op, i, n)
        for key in list(replay.core.groups):
            kept = replay.core.gang_ahead_of(key)
            fresh = copy.deepcopy(replay.core)
            fresh.queue.fits_when_empty.clear()
            assert fresh.gang_ahead_of(key) == kept, (step, op, key)
