"""Filter's plain-pod fast path gives the same answers as the plain per-node loop.

The fast path looks only at the reserved nodes and passes the candidates through
C-level filters; the reference below is the loop it replaced: every candidate, in
order, checked against the reservations on it.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from extender.domain.cluster.snapshot import fits
from extender.domain.gang.gang import GangCore
from extender.domain.objects.model import PodInfo
from extender.domain.state.decisions import FilterDecision, Verdict
from tests.builders import make_pod
from tests.core_builder import make_core
from tests.strategies import NODE_NAMES, apply_change, snapshot_changes


def reference_filter_plain(core: GangCore, pod: PodInfo, candidates: list[str]) -> FilterDecision:
    reserved = set(core.ledger.reserved_nodes())
    nodes: list[str] = []
    failed: dict[str, str] = {}
    for name in candidates:
        if name in reserved and not fits(pod.requests, core.free_after_reservations(name)):
            owners = ", ".join(str(g) for g in core.ledger.owners(name))
            failed[name] = f"capacity on {name} is reserved for gang {owners}"
        else:
            nodes.append(name)
    return FilterDecision(Verdict.NOT_A_GANG, nodes, failed, {})


@given(
    snapshot_changes(max_size=30),
    st.lists(st.sampled_from([*NODE_NAMES, "unknown"]), max_size=9),
    st.integers(min_value=0, max_value=8),
)
@settings(max_examples=300, deadline=None)
def test_plain_pod_filter_equals_the_per_node_loop(ops, candidates, gpus) -> None:
    core = make_core()
    for step, (op, i, g) in enumerate(ops):
        apply_change(core, op, i, g, step)
    pod = PodInfo.from_api(make_pod("plain").gpus(gpus).obj())
    got = core.filter(pod, candidates, float(len(ops)))
    want = reference_filter_plain(core, pod, candidates)
    assert (got.verdict, got.nodes, got.failed, got.unresolvable) == (
        want.verdict,
        want.nodes,
        want.failed,
        want.unresolvable,
    )
    assert list(got.failed) == list(want.failed)  # same order on the wire
