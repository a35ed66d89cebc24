"""The gang planner: can every member be placed at once on free capacity, and where.

`plan_gang` is a pure function of members, free capacity, policy and the group's
topology. Binpack puts a gang on the fewest nodes that hold it, then the
tightest (`place_together`), and never spans more nodes than best-fit decreasing
(`place_best_fit`, also spread's planner), which it falls back to. Topology (`_Planner`):
inside one value of a required node label, on as few values of each preferred
label as fit, coarsest first. It can miss a packing that exists; it never returns
one that over-commits. "GPUs" are the gang's accelerator resource: the one its
members ask most of (domain/objects/accelerators.py); every other resource,
another accelerator too, is checked for fit on its own.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from extender.domain.devices.choices import choice_shortfall
from extender.domain.devices.claims import device_shortfall
from extender.domain.devices.nodes import unreadable_note
from extender.domain.objects.accelerators import (
    DEFAULT_ACCELERATORS,
    DEVICE_CLASS_PREFIX,
    Accelerators,
)
from extender.domain.objects.limits import MAX_TOPOLOGY_LABELS, PLANNER_STEP_BUDGET, listing
from extender.domain.objects.model import NodeInfo, PodInfo, Resources
from extender.domain.objects.policy import GroupTopology, Policy, Strategy, default_topology
from extender.domain.objects.quantity import CPU, GPU, MEMORY, shown_units
from extender.domain.planning.device_requests import chosen_requests
from extender.domain.planning.node_fill import (
    gpus_of,
    member_order,
    min_nodes_for,
    place_best_fit,
    place_together,
)
from extender.domain.planning.node_fit import NodeRestriction, node_accepts, node_admits
from extender.domain.planning.node_order import NodeOrder
from extender.domain.planning.sharers import units_of

# Domains that hold a gang are compared, tightest first, up to this many: the plan
# stays a few placements' work however many racks or zones a cluster has.
COMPARED_DOMAINS = 4

# Found here by the core's other modules (domain/planning/node_fit.py, domain/planning/node_fill.py).
__all__ = [
    "COMPARED_DOMAINS",
    "NodeRestriction",
    "Placement",
    "Shortfall",
    "member_order",
    "node_accepts",
    "node_admits",
    "plan_gang",
]


@dataclass(frozen=True)
class Placement:
    nodes: dict[str, str]  # pod uid -> node
    # What members with device choices (domain/devices/choices.py) take on their
    # node, by uid; the others take their requests.
    requests: dict[str, Resources] = field(default_factory=dict)


@dataclass(frozen=True)
class Shortfall:
    placeable: int
    total: int
    message: str
    # Uids of the members the greedy placement left out (empty when not known, as for
    # a required topology domain): the core says which tasks they belong to.
    unplaced: tuple[str, ...] = ()


@dataclass
class _Planner:
    """One gang's planning: its members, restrictions and topology levels."""

    members: Sequence[PodInfo]
    nodes: Mapping[str, NodeInfo]
    policy: Policy
    allowed: Mapping[str, NodeRestriction]
    gang_nodes: frozenset[str]
    preferred: tuple[str, ...]
    # Every node of `room` (the room plan_gang was given) in the policy's order, or None.
    room: Mapping[str, Resources] | None = None
    order: NodeOrder | None = None
    # The gang's accelerator resource: what "fewest nodes" and domain capacity count.
    resource: str = GPU

    demand: int = field(init=False)
    # Passes over a room so far (a placement, or grouping it by a label): once
    # PLANNER_STEP_BUDGET is spent, the levels left are not compared (`within`).
    steps: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self.demand = sum(gpus_of(p, self.resource) for p in self.members)
        # The readers refuse more labels (domain/objects/limits.py); the planner does not rely
        # on them: its recursion is two frames per label, so it plans the first ones.
        self.preferred = self.preferred[:MAX_TOPOLOGY_LABELS]

    @property
    def spent(self) -> bool:
        return self.steps >= PLANNER_STEP_BUDGET

    def _value(self, node: str, key: str) -> str:
        """The node's domain under `key`; an unlabelled node is a domain of its own."""
        value = self.nodes[node].labels.get(key)
        return f"={value}" if value is not None else f"/{node}"

    def score(self, placed: Mapping[str, str]) -> tuple[int, ...]:
        """Values of each preferred label the gang spans, coarsest first, then nodes."""
        used = set(placed.values()) | self.gang_nodes
        spans = [len({self._value(n, key) for n in used}) for key in self.preferred]
        return (*spans, len(used))

    def nodes_level(self, free: Mapping[str, Resources]) -> tuple[dict[str, str], PodInfo | None]:
        """Fewest nodes, then best fit; spread keeps its own order (fewest members per node).

        The locality heuristic is checked against best-fit decreasing (`place_best_fit`) unless
        it reached the lower bound: the planner never spans more nodes than that, nor
        misses a placement it finds.
        """
        self.steps += 1
        # The kept order is for the whole room only; a topology domain's nodes are sorted.
        order = self.order if free is self.room else None
        if self.policy.strategy is Strategy.SPREAD:
            return place_best_fit(
                self.members, free, self.nodes, self.policy, self.allowed, order, self.resource
            )
        placed, misfit, lower_bound = place_together(
            self.members, free, self.nodes, self.allowed, self.gang_nodes, order, self.resource
        )
        if misfit is None and len(set(placed.values())) <= lower_bound:
            return placed, misfit
        fallback, fallback_misfit = place_best_fit(
            self.members, free, self.nodes, self.policy, self.allowed, order, self.resource
        )
        if misfit is not None:
            if fallback_misfit is None or len(fallback) > len(placed):
                return fallback, fallback_misfit
            return placed, misfit
        if fallback_misfit is None and len(set(fallback.values())) < len(set(placed.values())):
            return fallback, None
        return placed, None

    def within(
        self, free: Mapping[str, Resources], level: int = 0
    ) -> tuple[dict[str, str], PodInfo | None]:
        """Place inside `free` using as few values of preferred[level:] as it can, in order.

        Levels where `free` is all one domain are passed over in a loop, not a call;
        once the step budget is spent the levels left are not compared (the placement
        is still one that fits: `nodes_level`'s).
        """
        domains: dict[str, list[str]] = {}
        while level < len(self.preferred) and not self.spent:
            self.steps += 1
            domains = _group_by(free, self.nodes, self.preferred[level])
            if len(domains) > 1:
                break
            level += 1
        if level >= len(self.preferred) or self.spent:
            return self.nodes_level(free)
        best = self.best_single(free, domains, level + 1)
        if best is not None:
            return best, None
        # No one domain holds the gang: the fewest whose GPUs add up to it, or all of
        # them, whichever spans fewer values (then nodes): fewest-by-capacity can still
        # lose, on nodes, to a placement over every domain.
        anywhere = self.within(free, level + 1)
        chosen = _cover(domains, free, self.demand, self.resource)
        if chosen is not None and 1 < len(chosen) < len(domains):
            union = {n: free[n] for d in chosen for n in domains[d]}
            placed, misfit = self.within(union, level + 1)
            if misfit is None and (
                anywhere[1] is not None or self.score(placed) <= self.score(anywhere[0])
            ):
                return placed, None
        return anywhere

    def best_single(
        self, free: Mapping[str, Resources], domains: Mapping[str, list[str]], level: int
    ) -> dict[str, str] | None:
        """The best placement inside one domain: fewest values below, fewest nodes, tightest.

        Compares the `COMPARED_DOMAINS` tightest domains that hold the gang (the
        emptiest first and only, for spread); None when none does.
        """
        resource = self.resource
        capacity = {d: sum(free[n].get(resource, 0) for n in names) for d, names in domains.items()}
        order = sorted(
            (d for d in domains if capacity[d] >= self.demand),
            key=lambda d: (capacity[d], d),
            reverse=self.policy.strategy is Strategy.SPREAD,
        )
        best: tuple[tuple[int, ...], dict[str, str]] | None = None
        # A score no domain can beat: one value of each label below, the fewest nodes.
        fewest = min_nodes_for(
            self.demand, sorted((r.get(resource, 0) for r in free.values()), reverse=True)
        )
        perfect = (1,) * len(self.preferred) + (fewest,)
        compared = 0
        for d in order:
            placed, misfit = self.within({n: free[n] for n in domains[d]}, level)
            if misfit is not None:
                continue
            score = self.score(placed)
            compared += 1
            if best is None or score < best[0]:
                best = (score, placed)
                if score[level:] <= perfect[level:] or self.policy.strategy is Strategy.SPREAD:
                    break
            if compared >= COMPARED_DOMAINS:
                break
        return best[1] if best is not None else None


def _group_by(
    free: Mapping[str, Resources], nodes: Mapping[str, NodeInfo], key: str
) -> dict[str, list[str]]:
    """Nodes by their value of `key`; each unlabelled node is a domain of its own."""
    by_value: dict[str, list[str]] = defaultdict(list)
    for name in free:
        value = nodes[name].labels.get(key)
        by_value[f"={value}" if value is not None else f"/{name}"].append(name)
    return by_value


def _cover(
    domains: Mapping[str, list[str]], free: Mapping[str, Resources], demand: int, resource: str
) -> list[str] | None:
    """The fewest domains whose free GPUs add up to `demand`, the last one the tightest.

    Largest domains first until the rest fits one; that one is the smallest that
    holds the rest, so bigger domains stay whole. None when all of them are short.
    """
    capacity = {d: sum(free[n].get(resource, 0) for n in names) for d, names in domains.items()}
    ascending = sorted(domains, key=lambda d: (capacity[d], d))
    capacities = [capacity[d] for d in ascending]
    chosen: list[str] = []
    rest = demand
    # The k chosen so far are the k largest: the last k of `ascending`.
    for taken, largest in enumerate(reversed(ascending)):
        tightest = bisect_left(capacities, rest)
        if tightest < len(ascending) - taken:
            chosen.append(ascending[tightest])
            return chosen
        chosen.append(largest)
        rest -= capacity[largest]
    return None


def _resolve_topology(
    members: Sequence[PodInfo], topology: GroupTopology | None, policy: Policy
) -> GroupTopology | str:
    """The group's topology: its PodGroup's, else its members' Kueue annotations, else the policy's.

    Members whose Kueue annotations disagree give a message instead.
    """
    if topology is not None:
        return topology
    annotated = {m.topology for m in members if m.topology is not None}
    if len(annotated) > 1:
        named = listing(
            f"{m.name}: {m.topology.describe()}" for m in members if m.topology is not None
        )
        return f"members disagree on their Kueue topology annotations ({named}); give every member the same"
    if annotated:
        return annotated.pop()
    return default_topology(policy)


def plan_gang(
    members: Sequence[PodInfo],
    free: Mapping[str, Resources],
    nodes: Mapping[str, NodeInfo],
    policy: Policy,
    *,
    allowed: Mapping[str, NodeRestriction] | None = None,
    topology: GroupTopology | None = None,
    bound: Sequence[PodInfo] = (),
    order: NodeOrder | None = None,
    accelerators: Accelerators = DEFAULT_ACCELERATORS,
    explain: bool = True,
) -> Placement | Shortfall:
    """Place every member at once, or say what is missing.

    `free` is free capacity per node after bound pods and other gangs' reservations.
    `allowed` optionally restricts members (by uid) to the nodes kube-scheduler's
    own filters left for them (affinity, host ports... that the planner does not model).
    `topology` is the group's own (PodGroup spec.topology); None falls back to the
    members' Kueue annotations, then to the policy's. `bound` are the gang's members
    already bound: the rest go beside them and stay in their required domain.
    `order`, when given, is every node of `free` sorted by `node_order.static_key`
    for the policy's strategy (kept by the score board instead of sorted per plan).
    `accelerators` tells which resources are accelerators (the snapshot's matcher):
    the gang is filled and worded by the one its members ask most of. Without
    `explain`, a shortfall of the plain case carries no message (wording it reads every
    node): for callers that only ask whether the gang fits (a victim search's trials).
    """
    allowed = allowed or {}
    units = units_of(members, allowed)
    if units is not None:  # members sharing a claim not allocated yet: one node each unit
        outcome = plan_gang(
            units.members,
            free,
            nodes,
            policy,
            allowed=units.allowed,
            topology=topology,
            bound=bound,
            order=order,
            accelerators=accelerators,
            explain=explain,
        )
        if isinstance(outcome, Placement):
            return Placement(*units.spread(outcome.nodes, outcome.requests))
        unplaced = tuple(u for uid in outcome.unplaced for u in units.members_of(uid))
        placeable = len(members) - len(unplaced) if outcome.unplaced else outcome.placeable
        # The head counts members, not units ("1/2 members placeable" of 2 units).
        head = f"{outcome.placeable}/{len(units.members)} members placeable"
        message = outcome.message
        if message.startswith(head):
            message = f"{placeable}/{len(members)} members placeable" + message[len(head) :]
        return replace(
            outcome,
            placeable=placeable,
            total=len(members),
            unplaced=unplaced,
            message=message,
        )
    resolved = _resolve_topology(members, topology, policy)
    if isinstance(resolved, str):
        return Shortfall(0, len(members), resolved)
    gang_nodes = frozenset(p.node_name for p in bound if p.node_name and p.node_name in nodes)
    resource = accelerators.main(m.requests for m in members)
    planner = _Planner(
        members,
        nodes,
        policy,
        allowed,
        gang_nodes,
        resolved.preferred,
        room=free,
        order=order,
        resource=resource,
    )
    if resolved.required is not None:
        return _plan_required(planner, free, resolved.required)
    placed, misfit = planner.within(free)
    if misfit is None:
        return Placement(placed, chosen_requests(members, placed, free, nodes, resource))
    unplaced = tuple(m.uid for m in members if m.uid not in placed)
    if not explain:
        return Shortfall(len(placed), len(members), "", unplaced=unplaced)
    return Shortfall(
        len(placed),
        len(members),
        _shortfall_text(
            members,
            placed,
            misfit,
            free,
            _room_for(misfit, free, nodes, allowed),
            accelerators.asked(misfit.requests),
        )
        + unreadable_note(misfit, nodes),
        unplaced=unplaced,
    )


def _plan_required(
    planner: _Planner, free: Mapping[str, Resources], key: str
) -> Placement | Shortfall:
    """Inside one value of `key` or not at all; the gang's bound members fix the value."""
    members, nodes = planner.members, planner.nodes
    labelled = {n: r for n, r in free.items() if nodes[n].labels.get(key) is not None}
    domains = _group_by(labelled, nodes, key)
    anchors = sorted({nodes[n].labels.get(key) or "(none)" for n in planner.gang_nodes})
    where = ""
    if anchors:
        domains = {d: names for d, names in domains.items() if d == f"={anchors[0]}"}
        where = f" {key}={anchors[0]}, where members are bound,"
        if len(anchors) > 1:
            domains = {}
            where = f" domain: bound members already span {key} {', '.join(anchors)};"
    best = planner.best_single(free, domains, 0)
    if best is not None:
        return Placement(best, chosen_requests(members, best, free, nodes, planner.resource))
    resource = planner.resource
    most = max(
        (sum(free[n].get(resource, 0) for n in names) for names in domains.values()), default=0
    )
    return Shortfall(
        0,
        len(members),
        f"no single {key} domain fits all {len(members)} members "
        f"({_need_text(members, resource)};{where} most free {resource} in one {key} domain: "
        f"{most})",
    )


def _need_text(members: Sequence[PodInfo], resource: str) -> str:
    gpus = sum(p.requests.get(resource, 0) for p in members)
    return f"needs {gpus} {resource} in all" if gpus else "needs cpu/memory for every member"


def _room_for(
    pod: PodInfo,
    free: Mapping[str, Resources],
    nodes: Mapping[str, NodeInfo],
    allowed: Mapping[str, NodeRestriction],
) -> dict[str, Resources]:
    """The free room of the nodes `pod` may use: a hold counts no node the member cannot go to."""
    choices = allowed.get(pod.uid)
    return {
        name: room
        for name, room in free.items()
        if node_accepts(nodes[name], pod) and (choices is None or choices.permits(name))
    }


def _shortfall_text(
    members: Sequence[PodInfo],
    placed: Mapping[str, str],
    misfit: PodInfo,
    cluster: Mapping[str, Resources],
    free: Mapping[str, Resources],
    asked: Mapping[str, int],
) -> str:
    """Why `misfit` found no room; `free` is only the room of the nodes it may use.

    `asked` are the misfit's accelerator resources: the first one short is named
    (else the first it asks); a DeviceClass's resource is worded by its class."""
    head = f"{len(placed)}/{len(members)} members placeable"
    if cluster and not free:
        return _no_eligible_node(head, misfit)
    worded: str | None = None
    for resource in sorted(asked):
        if resource.startswith(DEVICE_CLASS_PREFIX):
            continue
        want = asked[resource]
        need_gpus = sum(p.requests.get(resource, 0) for p in members)
        free_gpus = sum(max(0, r.get(resource, 0)) for r in free.values())
        largest = max((r.get(resource, 0) for r in free.values()), default=0)
        text = (
            f"{head}: needs {need_gpus} {resource} in all ({want} for {misfit.name}), "
            f"{free_gpus} free, largest free node has {largest}"
        )
        if want > largest or need_gpus > free_gpus:
            return text
        worded = worded or text
    devices = device_shortfall(head, members, misfit, free) or choice_shortfall(
        head, members, misfit, free
    )
    if devices is not None:
        return devices
    if worded is not None:
        return worded
    for resource in (CPU, MEMORY, "pods"):
        amount = misfit.requests.get(resource, 0)
        best = max((r.get(resource, 0) for r in free.values()), default=0)
        if amount > best:
            return (
                f"{head}: {misfit.name} needs {resource} {shown_units(resource, amount)}, "
                f"largest free node has {shown_units(resource, best)}"
            )
    return _no_eligible_node(head, misfit)


def _no_eligible_node(head: str, misfit: PodInfo) -> str:
    return (
        f"{head}: no eligible node left for {misfit.name} (taints, nodeSelector or cordoned nodes)"
    )
