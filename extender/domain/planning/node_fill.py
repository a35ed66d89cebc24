"""Placing members node by node: best-fit decreasing (spread's planner, binpack's
fallback) and binpack's fewest-nodes fill (`place_together`).

Pure; the planner's primitives (domain/planning/planner.py chooses between them and handles
topology domains). `free` is never mutated: a node's room is copied once a member
is placed on it. `resource` is the gang's accelerator resource
(domain/objects/accelerators.py): "GPUs" below are of that resource.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from functools import partial
from math import gcd

from extender.domain.cluster.snapshot import add_into, fits
from extender.domain.devices.choices import requests_on
from extender.domain.objects.model import NodeInfo, PodInfo, Resources
from extender.domain.objects.policy import Policy, Strategy
from extender.domain.objects.quantity import CPU, GPU, MEMORY
from extender.domain.planning.node_fit import NodeRestriction, node_accepts
from extender.domain.planning.node_order import NodeOrder, static_key


def _size_key(pod: PodInfo, resource: str) -> tuple[int, int, int, str]:
    r = pod.requests
    return (-r.get(resource, 0), -r.get(CPU, 0), -r.get(MEMORY, 0), pod.name)


def member_order(members: Iterable[PodInfo], resource: str = GPU) -> list[PodInfo]:
    """The order the planner places members in: largest first, then by name."""
    return sorted(members, key=lambda pod: _size_key(pod, resource))


def _rank(  # type: ignore[no-untyped-def]
    strategy: Strategy, pod: PodInfo, node: str, free: Resources, on_node: int, resource: str
):
    gpu_left = free.get(resource, 0) - pod.requests.get(resource, 0)
    cpu_left = free.get(CPU, 0) - pod.requests.get(CPU, 0)
    if strategy is Strategy.SPREAD:
        return (-gpu_left, on_node, -cpu_left, node)
    # Binpack: the node whose free GPUs best match the request, so whole nodes stay free.
    return (gpu_left, cpu_left, node)


def _usable(
    pod: PodInfo,
    node: str,
    choices: NodeRestriction | None,
    *,
    remaining: Mapping[str, Resources],
    nodes: Mapping[str, NodeInfo],
) -> bool:
    """`pod` may go to `node` (kube-scheduler's last word, its selector and taints) and
    fits in what is left there (`remaining`, the room as members are placed)."""
    return (
        (choices is None or choices.permits(node))
        and fits_on(pod, remaining[node], nodes[node])
        and node_accepts(nodes[node], pod)
    )


def fits_on(pod: PodInfo, room: Resources, node: NodeInfo) -> bool:
    """`pod` fits in `room` on `node`, its device choices resolved there."""
    if pod.device_choices:
        return requests_on(pod, room, node.device_totals) is not None
    return fits(pod.requests, room)


def take_on(pod: PodInfo, room: Resources, node: NodeInfo) -> Resources:
    """What `pod` takes of `room` on `node` (it fits: `fits_on`)."""
    if pod.device_choices:
        return requests_on(pod, room, node.device_totals) or pod.requests
    return pod.requests


def place_best_fit(
    members: Sequence[PodInfo],
    free: Mapping[str, Resources],
    nodes: Mapping[str, NodeInfo],
    policy: Policy,
    allowed: Mapping[str, NodeRestriction],
    order: NodeOrder | None = None,
    resource: str = GPU,
) -> tuple[dict[str, str], PodInfo | None]:
    """Greedy placement inside `free` (not mutated). Returns placements and the first misfit.

    Placement goes on past a misfit so the count of placeable members is honest
    ("3/4 members placeable"); a plan is only used when there is no misfit.

    Cost: nodes are sorted once by `static_key` (or come sorted: `order`, every node
    of `free` in the policy's order); each member then takes the first
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
        add_into(remaining[node], take_on(pod, remaining[node], nodes[node]), -1)
        on_node[node] += 1

    usable = partial(_usable, remaining=remaining, nodes=nodes)

    # Members that already carry a planned node (a plan from before a restart) keep it when it fits.
    for pod in members:
        node = pod.planned_node
        if node and node in remaining and usable(pod, node, allowed.get(pod.uid)):
            place(pod, node)
    if (
        order is not None
        and not touched
        and order.strategy is strategy
        and order.resource == resource
    ):
        names, order_gpus = order.names, order.gpus
    else:
        names = sorted(remaining, key=lambda n: static_key(strategy, n, remaining[n], resource))
        order_gpus = [
            free[n].get(resource, 0) for n in names
        ]  # ascending (binpack), descending (spread)
    for pod in member_order((p for p in members if p.uid not in placed), resource):
        choices = allowed.get(pod.uid)
        gpus = pod.requests.get(resource, 0)
        best_node: str | None = None
        best_rank = None
        # The best untouched node: the first usable one in rank order. A pod asking
        # for GPUs fits no node with fewer free, which the order puts first (binpack,
        # skipped by bisection) or last (spread, where the scan stops).
        start = bisect_left(order_gpus, gpus) if gpus > 0 and strategy is not Strategy.SPREAD else 0
        for i in range(start, len(names)):
            name = names[i]
            if strategy is Strategy.SPREAD and gpus > 0 and order_gpus[i] < gpus:
                break
            if name in touched or not usable(pod, name, choices):
                continue
            best_node, best_rank = name, _rank(strategy, pod, name, remaining[name], 0, resource)
            break
        # Nodes members were placed on rank by their new room (and member count).
        for name in touched:
            if not usable(pod, name, choices):
                continue
            rank = _rank(strategy, pod, name, remaining[name], on_node[name], resource)
            if best_rank is None or rank < best_rank:
                best_node, best_rank = name, rank
        if best_node is None:
            misfit = misfit or pod
            continue
        place(pod, best_node)
    return placed, misfit


def gpus_of(pod: PodInfo, resource: str = GPU) -> int:
    return pod.requests.get(resource, 0)


def min_nodes_for(gpus: int, free_gpus_descending: Iterable[int]) -> int:
    """Fewest nodes whose free GPUs add up to `gpus`: a lower bound for any placement."""
    total, count = 0, 0
    for have in free_gpus_descending:
        if total >= gpus:
            break
        total += max(0, have)
        count += 1
    return max(1, count)


def place_together(
    members: Sequence[PodInfo],
    free: Mapping[str, Resources],
    nodes: Mapping[str, NodeInfo],
    allowed: Mapping[str, NodeRestriction],
    gang_nodes: frozenset[str],
    order: NodeOrder | None = None,
    resource: str = GPU,
) -> tuple[dict[str, str], PodInfo | None, int]:
    """Binpack a gang onto as few nodes as it can: returns placements, first misfit, and
    a lower bound on the nodes its GPUs need (see `_Planner.nodes_level`).

    Largest members first. A member goes onto a node its gang already uses when it
    fits there (the best fit among them); otherwise it opens a node: the smallest
    one that holds every GPU still to be placed (so the rest of the gang follows it
    there and bigger nodes stay whole), or, when none holds that much, the largest
    free one (fewest nodes). Members without GPUs open the node with fewest free
    GPUs, as `place_best_fit` does.

    Cost: one sort of `free`, then per member a bisection, a scan that usually stops
    at its first node, and a look at the few nodes the gang uses.
    """
    remaining: dict[str, Resources] = dict(free)
    touched: set[str] = set()
    placed: dict[str, str] = {}
    misfit: PodInfo | None = None
    # Nodes the gang's bound members are on count as used: members go beside them.
    used = [n for n in sorted(gang_nodes) if n in remaining]

    def place(pod: PodInfo, node: str) -> None:
        if node not in touched:
            touched.add(node)
            remaining[node] = dict(remaining[node])
            if node not in gang_nodes:
                used.append(node)
        placed[pod.uid] = node
        add_into(remaining[node], take_on(pod, remaining[node], nodes[node]), -1)

    usable = partial(_usable, remaining=remaining, nodes=nodes)

    for pod in members:
        node = pod.planned_node
        if node and node in remaining and usable(pod, node, allowed.get(pod.uid)):
            place(pod, node)
    if order is not None and order.strategy is Strategy.BINPACK and order.resource == resource:
        names, order_gpus = order.names, order.gpus
    else:
        names = sorted(free, key=lambda n: static_key(Strategy.BINPACK, n, free[n], resource))
        order_gpus = [free[n].get(resource, 0) for n in names]  # ascending
    demand = sum(gpus_of(p, resource) for p in members)
    # A node gives the gang at most a multiple of the gcd of its GPU requests (two
    # 5-GPU members use 5 of 8 free GPUs, not 8): a tighter bound, so fewer fallbacks.
    step = gcd(*(gpus_of(p, resource) for p in members)) or 1
    lower_bound = min_nodes_for(demand, (g // step * step for g in reversed(order_gpus)))
    to_place = member_order((p for p in members if p.uid not in placed), resource)
    outstanding = sum(gpus_of(p, resource) for p in to_place)
    for pod in to_place:
        choices = allowed.get(pod.uid)
        gpus = gpus_of(pod, resource)
        best_node: str | None = None
        best_rank = None
        for name in used:
            if not usable(pod, name, choices):
                continue
            rank = _rank(Strategy.BINPACK, pod, name, remaining[name], 0, resource)
            if best_rank is None or rank < best_rank:
                best_node, best_rank = name, rank
        if best_node is None and gpus > 0:
            # The smallest untouched node that takes every GPU still to place...
            for i in range(bisect_left(order_gpus, outstanding), len(names)):
                name = names[i]
                if name not in touched and usable(pod, name, choices):
                    best_node = name
                    break
            # ...else the largest one this member fits (the scan stops below its request).
            if best_node is None:
                for i in range(len(names) - 1, -1, -1):
                    if order_gpus[i] < gpus:
                        break
                    name = names[i]
                    if name not in touched and usable(pod, name, choices):
                        best_node = name
                        break
        elif best_node is None:
            for name in names:
                if name not in touched and usable(pod, name, choices):
                    best_node = name
                    break
        outstanding -= gpus
        if best_node is None:
            misfit = misfit or pod
            continue
        place(pod, best_node)
    return placed, misfit, lower_bound
