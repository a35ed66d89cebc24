"""What each gang member with device choices (`firstAvailable`, `allocationMode: All`)
takes on the node a plan places it on: the planner chooses nodes, this resolves the
choices there, in the order the fill placed the members."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from extender.domain.cluster.snapshot import add_into
from extender.domain.devices.choices import requests_on
from extender.domain.objects.model import NodeInfo, PodInfo, Resources
from extender.domain.planning.node_fill import member_order


def chosen_requests(
    members: Sequence[PodInfo],
    placed: Mapping[str, str],
    free: Mapping[str, Resources],
    nodes: Mapping[str, NodeInfo],
    resource: str,
) -> dict[str, Resources]:
    """What each placed member with device choices takes on its node: on each node
    the fixed requests first, then the choices in the order they were placed
    (planned members first, then largest first in the gang's accelerator `resource`,
    the fill's order), as the fill resolved them."""
    choosers = [p for p in members if p.device_choices and p.uid in placed]
    if not choosers:
        return {}
    rooms: dict[str, Resources] = {}
    for pod in members:
        node = placed.get(pod.uid)
        if node is not None and not pod.device_choices:
            add_into(rooms.setdefault(node, dict(free[node])), pod.requests, -1)
    requests: dict[str, Resources] = {}
    first = [p for p in choosers if p.planned_node == placed[p.uid]]
    early = {p.uid for p in first}
    for pod in first + [p for p in member_order(choosers, resource) if p.uid not in early]:
        node = placed[pod.uid]
        room = rooms.setdefault(node, dict(free[node]))
        taken = requests_on(pod, room, nodes[node].device_totals)
        if taken is None:  # not seen: the fill found room in this order
            taken = requests_on(pod, free[node], nodes[node].device_totals) or pod.requests
        add_into(room, taken, -1)
        requests[pod.uid] = taken
    return requests
