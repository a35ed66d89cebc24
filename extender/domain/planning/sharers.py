"""Members that name the same ResourceClaim, not allocated yet, placed as one unit.

Pure. A claim named directly (`resourceClaimName`) is allocated once, on one node,
and every pod using it runs where its devices are (node-local devices). So the
planner places the members sharing such a claim (and, transitively, those sharing
another such claim with them) as one unit: a stand-in member asking the sum of
their requests plus each claim's devices once, on a node every one of them may
use (their nodeSelectors together, the tolerations they all have, kube-scheduler's
last word for each). Once placed, each member goes where its unit went; in the
plan the unit's first member by name (its carrier) reserves the claims' devices,
each other member its own requests.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from extender.domain.objects.model import PodInfo, Resources
from extender.domain.planning.node_fit import NodeRestriction

STAND_IN_PREFIX = "shared-claim:"
# A nodeSelector value no label can have (label values are [A-Za-z0-9_.-]): members
# of a unit whose nodeSelectors disagree fit no node together.
NO_NODE = "\x00members sharing a claim select different values"


@dataclass(frozen=True)
class Units:
    members: list[PodInfo]  # what the planner places: stand-ins and the other members
    units: dict[str, tuple[PodInfo, ...]]  # stand-in uid -> its members, carrier first
    allowed: dict[str, NodeRestriction]

    def members_of(self, uid: str) -> tuple[str, ...]:
        """The members' uids a placed uid stands for."""
        unit = self.units.get(uid)
        return tuple(m.uid for m in unit) if unit is not None else (uid,)

    def spread(
        self, nodes: Mapping[str, str], requests: Mapping[str, Resources]
    ) -> tuple[dict[str, str], dict[str, Resources]]:
        """Placements and chosen requests of the stand-ins, given to their members."""
        placed: dict[str, str] = {}
        chosen: dict[str, Resources] = {}
        for uid, node in nodes.items():
            unit = self.units.get(uid)
            if unit is None:
                placed[uid] = node
                if uid in requests:
                    chosen[uid] = requests[uid]
                continue
            stand_in = next(m for m in self.members if m.uid == uid)
            carrier = dict(requests.get(uid, stand_in.requests))
            for member in unit[1:]:
                placed[member.uid] = node
                chosen[member.uid] = dict(member.requests)
                for name, value in member.requests.items():
                    carrier[name] = carrier.get(name, 0) - value
            placed[unit[0].uid] = node
            chosen[unit[0].uid] = {k: v for k, v in carrier.items() if v}
        return placed, chosen


def units_of(members: Sequence[PodInfo], allowed: Mapping[str, NodeRestriction]) -> Units | None:
    """The gang with its claim sharers made units; None when no member shares one."""
    sharing = [m for m in members if m.shared_claims]
    if not sharing:
        return None
    # Union-find over claim keys: members linked by any claim not allocated yet.
    parent: dict[str, str] = {}

    def root(key: str) -> str:
        while parent.setdefault(key, key) != key:
            key = parent[key]
        return key

    for member in sharing:
        keys = [c.key for c in member.shared_claims]
        for key in keys[1:]:
            parent[root(key)] = root(keys[0])
    groups: dict[str, list[PodInfo]] = {}
    for member in sharing:
        groups.setdefault(root(member.shared_claims[0].key), []).append(member)
    planned: list[PodInfo] = [m for m in members if not m.shared_claims]
    units: dict[str, tuple[PodInfo, ...]] = {}
    restrictions = dict(allowed)
    for group in groups.values():
        unit = tuple(sorted(group, key=lambda m: (m.name, m.uid)))
        stand_in = _stand_in(unit)
        units[stand_in.uid] = unit
        planned.append(stand_in)
        meet = _meet([allowed.get(m.uid) for m in unit])
        if meet is not None:
            restrictions[stand_in.uid] = meet
    return Units(planned, units, restrictions)


def _stand_in(unit: tuple[PodInfo, ...]) -> PodInfo:
    carrier = unit[0]
    requests: dict[str, int] = {}
    for member in unit:
        for name, value in member.requests.items():
            requests[name] = requests.get(name, 0) + value
    claims = {c.key: c for m in unit for c in m.shared_claims}
    for claim in claims.values():
        for name, value in claim.requests:
            requests[name] = requests.get(name, 0) + value
    selector: dict[str, str] = {}
    for member in unit:
        for key, label in member.node_selector.items():
            selector[key] = label if selector.get(key, label) == label else NO_NODE
    tolerations = tuple(t for t in carrier.tolerations if all(t in m.tolerations for m in unit))
    planned = {m.planned_node for m in unit}
    return replace(
        carrier,
        uid=f"{STAND_IN_PREFIX}{carrier.uid}",
        name=f"{carrier.name} and the {len(unit) - 1} other members sharing "
        + ", ".join(f"ResourceClaim {k.partition('/')[2]}" for k in sorted(claims))
        + " (one node)",
        requests=requests,
        device_choices=tuple(c for m in unit for c in m.device_choices)
        + tuple(c for claim in claims.values() for c in claim.choices),
        node_selector=selector,
        tolerations=tolerations,
        planned_node=planned.pop() if len(planned) == 1 else None,
        shared_claims=(),
    )


def _meet(restrictions: Sequence[NodeRestriction | None]) -> NodeRestriction | None:
    """Nodes every restriction permits."""
    known = [r for r in restrictions if r is not None]
    if not known:
        return None
    allowed: frozenset[str] | None = None
    denied: frozenset[str] = frozenset()
    for restriction in known:
        if restriction.allowed is not None:
            allowed = restriction.allowed if allowed is None else allowed & restriction.allowed
        denied |= restriction.denied
    if allowed is not None:
        return NodeRestriction(allowed=allowed - denied)
    return NodeRestriction(denied=denied)
