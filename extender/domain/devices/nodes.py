"""A node as the planner sees it once DRA devices are counted: its allocatable plus
what its devices offer of each DRA-served resource it does not advertise."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from extender.domain.devices.choices import choice_resources
from extender.domain.devices.inventory import DeviceInventory, Holds
from extender.domain.objects.model import NodeInfo, PodInfo


def with_devices(node: NodeInfo, inventory: DeviceInventory, holds: Holds) -> NodeInfo:
    """`node` (as its Node object says) with its DRA-served resources added."""
    offered, unreadable = inventory.capacity(node.name, node.allocatable, holds)
    if not offered and not unreadable:
        return node
    return replace(
        node,
        allocatable={**node.allocatable, **offered},
        unreadable_devices=unreadable,
        device_totals=inventory.totals(node.name, node.allocatable),
    )


def unreadable_note(pod: PodInfo, nodes: Mapping[str, NodeInfo]) -> str:
    """For a hold: the DRA devices not counted for what `pod` requests (a DeviceClass
    selector that could not be evaluated), so the user sees why, not a silent 0."""
    found: dict[str, str] = {}
    for node in nodes.values():
        for resource, why in node.unreadable_devices.items():
            if pod.requests.get(resource, 0) > 0 or resource in choice_resources(pod):
                found.setdefault(resource, f"{why} (node {node.name})")
    if not found:
        return ""
    return "; devices not counted: " + "; ".join(found[r] for r in sorted(found))
