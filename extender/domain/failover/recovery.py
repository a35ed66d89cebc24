"""Plans recovered from the API server when a replica takes over (or starts).

A plan lives in the leader's memory; on the objects it leaves only the
`gang-extender.io/planned-node` annotation on each planned member. A replica that
becomes leader rebuilds the plans from those annotations *before* it reports Ready,
so the capacity of a gang planned by the previous leader stays reserved through the
hand-over: without this, a plain pod filtered in the gap could take the GPUs the
gang's members are about to bind to.

Pure: reads a `ClusterSnapshot` and the capacity already reserved, returns what to
reserve and what it refused (with why). Decision order for one group:
 1. No unbound member carries a planned-node annotation -> nothing to recover.
 2. The group has no usable spec (no PodGroup / annotation, or a misdeclared one)
    -> refused: the gang is planned afresh once it is fixed.
 3. Bound members plus annotated unbound members are fewer than minMember
    -> refused as partial (a plan always covers enough members to reach it).
 4. An annotated member's node is gone, cordoned, tainted against it, outside its
    nodeSelector, or has no room left for it after bound pods, other plans and the
    members recovered before it -> refused as stale, the whole group (never half a
    plan).
 5. Otherwise -> a `RecoveredPlan` of the annotated unbound members on their nodes.
Groups are taken in key order, so the result does not depend on dict order.
Unannotated unbound members (created after the plan, or left out of a plan that
covered just minMember) are not part of it: they are scheduled after, as before.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from extender.domain.cluster.snapshot import ClusterSnapshot
from extender.domain.devices.choices import requests_on
from extender.domain.objects.membership import GroupKey
from extender.domain.planning.planner import node_accepts


@dataclass(frozen=True)
class RecoveredPlan:
    group: GroupKey
    placements: Mapping[str, str]  # pod uid -> planned node
    # What members with device choices take on their node (domain/devices/choices.py).
    requests: Mapping[str, Mapping[str, int]] = field(default_factory=dict)


@dataclass(frozen=True)
class Refused:
    group: GroupKey
    reason: str


@dataclass(frozen=True)
class Recovery:
    plans: tuple[RecoveredPlan, ...]
    refused: tuple[Refused, ...]


def recover_plans(
    snapshot: ClusterSnapshot,
    *,
    reserved: Mapping[str, Mapping[str, int]],
    planned: Collection[GroupKey] = (),
) -> Recovery:
    """Plans to reserve from the planned-node annotations in `snapshot`.

    `reserved`: node -> capacity already held by plans this replica has; `planned`:
    groups that already have a plan (left as they are).
    """
    taken: dict[str, dict[str, int]] = {node: dict(r) for node, r in reserved.items()}
    plans: list[RecoveredPlan] = []
    refused: list[Refused] = []
    for key in snapshot.group_keys():
        if key in planned:
            continue
        members = snapshot.members(key)
        annotated = [m for m in members if not m.is_bound and m.planned_node]
        if not annotated:
            continue  # 1
        spec = snapshot.group_spec(key)
        if spec is None or spec.error is not None:  # 2
            why = spec.error if spec is not None else "no PodGroup and no min-available"
            refused.append(Refused(key, f"gang {key}: {why}"))
            continue
        bound = sum(1 for m in members if m.is_bound)
        if bound + len(annotated) < spec.min_member:  # 3
            refused.append(
                Refused(
                    key,
                    f"gang {key}: partial plan: {len(annotated)} annotated + {bound} bound "
                    f"< minMember {spec.min_member}",
                )
            )
            continue
        trial = {node: dict(r) for node, r in taken.items()}
        chosen: dict[str, dict[str, int]] = {}
        problem = ""
        for pod in annotated:  # 4
            node = pod.planned_node
            assert node is not None
            info = snapshot.nodes.get(node)
            if info is None:
                problem = f"{pod.ref}: planned node {node} is gone"
                break
            if not node_accepts(info, pod):
                problem = f"{pod.ref}: planned node {node} no longer accepts it"
                break
            held = trial.setdefault(node, {})
            free = {n: v - held.get(n, 0) for n, v in snapshot.free(node).items()}
            takes = requests_on(pod, free, info.device_totals)
            if takes is None:
                problem = f"{pod.ref}: no room left on planned node {node}"
                break
            if pod.device_choices:
                chosen[pod.uid] = takes
            for name, value in takes.items():
                held[name] = held.get(name, 0) + value
        if problem:
            refused.append(Refused(key, f"gang {key}: stale plan: {problem}"))
            continue
        taken = trial
        plans.append(
            RecoveredPlan(key, {m.uid: m.planned_node or "" for m in annotated}, chosen)
        )  # 5
    return Recovery(tuple(plans), tuple(refused))
