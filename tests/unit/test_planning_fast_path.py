"""The planner's free capacity, kept incrementally, is what a fresh computation gives.

`GangCore.free_for_planning` reads the score board's per-node free capacity, updated
only where capacity or reservations changed; the plain form computes every node's
room from the snapshot and the ledger. Same map after any changes, so the same plans.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from extender.domain.gang import GangCore, Timeouts
from extender.domain.model import PodInfo
from extender.domain.planner import plan_gang
from extender.domain.policy import Policy, Strategy
from tests.builders import make_pod
from tests.strategies import apply_change, snapshot_changes


def fresh_free(core: GangCore) -> dict[str, dict[str, int]]:
    return {name: core.free_after_reservations(name) for name in core.snapshot.nodes}


@given(
    st.lists(snapshot_changes(max_size=30), min_size=1, max_size=5),
    st.sampled_from([Policy(), Policy(name="spread", strategy=Strategy.SPREAD)]),
    st.lists(st.integers(min_value=0, max_value=4), min_size=1, max_size=4),
)
@settings(max_examples=300, deadline=None)
def test_incremental_free_capacity_equals_a_fresh_one_and_plans_the_same(
    rounds, policy, gang_gpus
) -> None:
    core = GangCore(policy=policy, timeouts=Timeouts(60, 30, 2))
    members = [
        PodInfo.from_api(make_pod(f"probe-{i}").group("probe").gpus(g).obj())
        for i, g in enumerate(gang_gpus)
    ]
    step = 0
    for ops in rounds:
        for op, i, gpus in ops:
            step += 1
            apply_change(core, op, i, gpus, step)
            if op == "bind":  # prioritize in between, as kube-scheduler does
                core.prioritize(members[0], list(core.snapshot.nodes))
        kept = core.free_for_planning()
        fresh = fresh_free(core)
        assert kept == fresh
        assert plan_gang(members, kept, core.snapshot.nodes, policy) == plan_gang(
            members, fresh, core.snapshot.nodes, policy
        )
