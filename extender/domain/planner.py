"""The gang planner: can every member be placed at once on free capacity, and where.

`plan_gang` is a pure function of members, free capacity and policy. Heuristic:
best-fit decreasing (largest members first, each onto the node the policy ranks
best among those it fits), optionally inside one topology domain. It can miss a
packing that exists; it never returns one that over-commits.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from extender.domain.model import NodeInfo, PodInfo, Resources
from extender.domain.policy import Policy, Strategy, TopologyMode
from extender.domain.quantity import CPU, GPU, MEMORY
from extender.domain.snapshot import add_into, fits


@dataclass(frozen=True)
class NodeRestriction:
    """Nodes a member may use, as kube-scheduler's own filters last said for it.

    Kept as whichever of allow-list or deny-list is smaller, so memory stays
    bounded on large clusters.
    """

    allowed: frozenset[str] | None = None
    denied: frozenset[str] = frozenset()

    def permits(self, node: str) -> bool:
        if self.allowed is not None:
            return node in self.allowed
        return node not in self.denied


@dataclass(frozen=True)
class Placement:
    nodes: dict[str, str]  # pod uid -> node


@dataclass(frozen=True)
class Shortfall:
    placeable: int
    total: int
    message: str
    # Uids of the members the greedy placement left out (empty when not known, as for
    # a required topology domain): the core says which tasks they belong to.
    unplaced: tuple[str, ...] = ()


def node_accepts(node: NodeInfo, pod: PodInfo) -> bool:
    """Static eligibility: cordon, taints and nodeSelector (affinity is left to kube-scheduler)."""
    if node.unschedulable:
        return False
    for taint in node.taints:
        if taint.effect not in ("NoSchedule", "NoExecute"):
            continue
        if not any(t.tolerates(taint) for t in pod.tolerations):
            return False
    return all(node.labels.get(k) == v for k, v in pod.node_selector.items())


def _size_key(pod: PodInfo) -> tuple[int, int, int, str]:
    r = pod.requests
    return (-r.get(GPU, 0), -r.get(CPU, 0), -r.get(MEMORY, 0), pod.name)


def _rank(strategy: Strategy, pod: PodInfo, node: str, free: Resources, on_node: int):  # type: ignore[no-untyped-def]
    gpu_left = free.get(GPU, 0) - pod.requests.get(GPU, 0)
    cpu_left = free.get(CPU, 0) - pod.requests.get(CPU, 0)
    if strategy is Strategy.SPREAD:
        return (-gpu_left, on_node, -cpu_left, node)
    # Binpack: the node whose free GPUs best match the request, so whole nodes stay free.
    return (gpu_left, cpu_left, node)


def _static_key(strategy: Strategy, node: str, free: Resources) -> tuple[int, int, str]:
    """Orders nodes no member was placed on yet exactly as `_rank` does, for any pod.

    On such a node `on_node` is 0 and `_rank` only shifts free GPU and cpu by the
    pod's (constant) request, so this order is the rank order: the first node in it
    that the pod fits and may use is its best untouched node. Keep in step with `_rank`.
    """
    gpu, cpu = free.get(GPU, 0), free.get(CPU, 0)
    if strategy is Strategy.SPREAD:
        return (-gpu, -cpu, node)
    return (gpu, cpu, node)


def _place(
    members: Sequence[PodInfo],
    free: Mapping[str, Resources],
    nodes: Mapping[str, NodeInfo],
    policy: Policy,
    allowed: Mapping[str, NodeRestriction],
) -> tuple[dict[str, str], PodInfo | None]:
    """Greedy placement inside `free` (not mutated). Returns placements and the first misfit.

    Placement goes on past a misfit so the count of placeable members is honest
    ("3/4 members placeable"); a plan is only used when there is no misfit.

    Cost: nodes are sorted once by `_static_key`; each member then takes the first
    node in that order it fits and may use (usually among the first looked at)
    and compares it with the few nodes members were already placed on. So a plan
    costs one sort of the cluster rather than members x nodes checks.
    """
    strategy = policy.strategy
    # Copy-on-write: a node's room is copied only once a member is placed on it.
    remaining: dict[str, Resources] = dict(free)
    touched: set[str] = set()
    on_node: dict[str, int] = defaultdict(int)
    placed: dict[str, str] = {}
    misfit: PodInfo | None = None

    def place(pod: PodInfo, node: str) -> None:
        if node not in touched:
            touched.add(node)
            remaining[node] = dict(remaining[node])
        placed[pod.uid] = node
        add_into(remaining[node], pod.requests, -1)
        on_node[node] += 1

    def usable(pod: PodInfo, node: str, choices: NodeRestriction | None) -> bool:
        return (
            (choices is None or choices.permits(node))
            and fits(pod.requests, remaining[node])
            and node_accepts(nodes[node], pod)
        )

    # Members that already carry a planned node (a plan from before a restart) keep it when it fits.
    for pod in members:
        node = pod.planned_node
        if node and node in remaining and usable(pod, node, allowed.get(pod.uid)):
            place(pod, node)
    order = sorted(remaining, key=lambda n: _static_key(strategy, n, remaining[n]))
    order_gpus = [free[n].get(GPU, 0) for n in order]  # ascending (binpack), descending (spread)
    for pod in sorted((p for p in members if p.uid not in placed), key=_size_key):
        choices = allowed.get(pod.uid)
        gpus = pod.requests.get(GPU, 0)
        best_node: str | None = None
        best_rank = None
        # The best untouched node: the first usable one in rank order. A pod asking
        # for GPUs fits no node with fewer free, which the order puts first (binpack,
        # skipped by bisection) or last (spread, where the scan stops).
        start = bisect_left(order_gpus, gpus) if gpus > 0 and strategy is not Strategy.SPREAD else 0
        for i in range(start, len(order)):
            name = order[i]
            if strategy is Strategy.SPREAD and gpus > 0 and order_gpus[i] < gpus:
                break
            if name in touched or not usable(pod, name, choices):
                continue
            best_node, best_rank = name, _rank(strategy, pod, name, remaining[name], 0)
            break
        # Nodes members were placed on rank by their new room (and member count).
        for name in touched:
            if not usable(pod, name, choices):
                continue
            rank = _rank(strategy, pod, name, remaining[name], on_node[name])
            if best_rank is None or rank < best_rank:
                best_node, best_rank = name, rank
        if best_node is None:
            misfit = misfit or pod
            continue
        place(pod, best_node)
    return placed, misfit


def _domains(
    free: Mapping[str, Resources], nodes: Mapping[str, NodeInfo], key: str, strategy: Strategy
) -> list[list[str]]:
    by_value: dict[str, list[str]] = defaultdict(list)
    for name in free:
        value = nodes[name].labels.get(key)
        if value is not None:
            by_value[value].append(name)

    def total_gpus(value: str) -> int:
        return sum(free[n].get(GPU, 0) for n in by_value[value])

    # Binpack tries the fullest domain that fits first; spread the emptiest.
    order = sorted(by_value, key=lambda v: (total_gpus(v), v))
    if strategy is Strategy.SPREAD:
        order.reverse()
    return [by_value[v] for v in order]


def plan_gang(
    members: Sequence[PodInfo],
    free: Mapping[str, Resources],
    nodes: Mapping[str, NodeInfo],
    policy: Policy,
    *,
    allowed: Mapping[str, NodeRestriction] | None = None,
) -> Placement | Shortfall:
    """Place every member at once, or say what is missing.

    `free` is free capacity per node after bound pods and other gangs' reservations.
    `allowed` optionally restricts members (by uid) to the nodes kube-scheduler's
    own filters left for them (affinity, host ports... that the planner does not model).
    """
    allowed = allowed or {}
    if policy.topology is not None:
        for domain in _domains(free, nodes, policy.topology.key, policy.strategy):
            subset = {n: free[n] for n in domain}
            placed, misfit = _place(members, subset, nodes, policy, allowed)
            if misfit is None:
                return Placement(placed)
        if policy.topology.mode is TopologyMode.REQUIRED:
            return Shortfall(
                0,
                len(members),
                f"no single {policy.topology.key} domain fits all {len(members)} members "
                f"({_need_text(members)})",
            )
    placed, misfit = _place(members, free, nodes, policy, allowed)
    if misfit is None:
        return Placement(placed)
    return Shortfall(
        len(placed),
        len(members),
        _shortfall_text(members, placed, misfit, free),
        unplaced=tuple(m.uid for m in members if m.uid not in placed),
    )


def _need_text(members: Sequence[PodInfo]) -> str:
    gpus = sum(p.requests.get(GPU, 0) for p in members)
    return f"needs {gpus} {GPU} in all" if gpus else "needs cpu/memory for every member"


def _shortfall_text(
    members: Sequence[PodInfo],
    placed: Mapping[str, str],
    misfit: PodInfo,
    free: Mapping[str, Resources],
) -> str:
    head = f"{len(placed)}/{len(members)} members placeable"
    need_gpus = sum(p.requests.get(GPU, 0) for p in members)
    free_gpus = sum(max(0, r.get(GPU, 0)) for r in free.values())
    largest = max((r.get(GPU, 0) for r in free.values()), default=0)
    want = misfit.requests.get(GPU, 0)
    if want:
        return (
            f"{head}: needs {need_gpus} {GPU} in all ({want} for {misfit.name}), "
            f"{free_gpus} free, largest free node has {largest}"
        )
    for resource in (CPU, MEMORY, "pods"):
        amount = misfit.requests.get(resource, 0)
        best = max((r.get(resource, 0) for r in free.values()), default=0)
        if amount > best:
            shown = f"{amount}m" if resource == CPU else str(amount)
            best_shown = f"{best}m" if resource == CPU else str(best)
            return f"{head}: {misfit.name} needs {resource} {shown}, largest free node has {best_shown}"
    return (
        f"{head}: no eligible node left for {misfit.name} (taints, nodeSelector or cordoned nodes)"
    )
