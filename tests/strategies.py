"""Hypothesis strategies shared by the property tests, and what they drive.

snapshot_changes(): sequences of changes to a GangCore's cluster (nodes come and go,
pods bind and unbind, gangs are planned and forgotten), each applied by
apply_change(core, op, index, gpus, step).
"""

from __future__ import annotations

from hypothesis import strategies as st

from extender.domain.gang.gang import GangCore
from extender.domain.objects.model import NodeInfo, PodInfo
from tests.builders import make_node, make_pod

CHANGE_OPS = ("node", "drop-node", "bind", "unbind", "gang", "forget-gang")
NODE_NAMES = tuple(f"n{i}" for i in range(6))  # the nodes the changes name


def snapshot_changes(max_size: int) -> st.SearchStrategy[list[tuple[str, int, int]]]:
    """Lists of (op, node index, GPUs) for apply_change."""
    return st.lists(
        st.tuples(
            st.sampled_from(CHANGE_OPS),
            st.integers(min_value=0, max_value=len(NODE_NAMES) - 1),
            st.integers(min_value=0, max_value=8),
        ),
        max_size=max_size,
    )


def apply_change(core: GangCore, op: str, i: int, gpus: int, step: int) -> None:
    """One change of snapshot_changes to `core`, at time `step` (also the new pods' names):
    node n<i> added or replaced with `gpus` GPUs, or dropped; a pod of `gpus` bound on
    it; one bound pod forgotten; a gang of two planned; the oldest plan's member forgotten.
    """
    node = f"n{i}"
    if op == "node":
        core.apply_node(NodeInfo.from_api(make_node(node).gpus(gpus).obj()))
    elif op == "drop-node":
        core.forget_node(node)
    elif op == "bind":
        pod = make_pod(f"p{step}").gpus(gpus).node(node).obj()
        core.observe_pod(PodInfo.from_api(pod), float(step))
    elif op == "unbind":
        bound = sorted(uid for uid, p in core.snapshot.pods.items() if p.node_name)
        if bound:
            core.forget_pod(bound[i % len(bound)], float(step))
    elif op == "gang":
        for m in range(2):
            builder = make_pod(f"g{step}-{m}").group(f"g{step}").min_available(2).gpus(gpus)
            core.observe_pod(PodInfo.from_api(builder.obj()), float(step))
        member = PodInfo.from_api(
            make_pod(f"g{step}-0").group(f"g{step}").min_available(2).gpus(gpus).obj()
        )
        core.filter(member, list(core.snapshot.nodes), float(step))
    elif op == "forget-gang" and core.ledger.plans:
        plan = sorted(core.ledger.plans.values(), key=lambda p: p.plan_id)[0]
        core.forget_pod(next(iter(sorted(plan.placements))), float(step))
