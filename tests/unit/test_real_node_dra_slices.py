"""Counting the devices the real nodes' DRA driver published (no I/O)."""

from __future__ import annotations

from typing import Any

from extender.devcluster.node_commands import DRA_DRIVER
from extender.devcluster.realnode import dra_devices_per_node


def _slice(node: str, generation: int, devices: int, driver: str = DRA_DRIVER) -> dict[str, Any]:
    return {
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
            "devices": [{"name": f"device-{i:02d}"} for i in range(devices)],
        }
    }


def test_only_the_newest_generation_of_our_drivers_slices_counts() -> None:
    slices = [
        _slice("a", 1, 4),
        _slice("a", 2, 2),
        _slice("b", 0, 2),
        _slice("b", 0, 1),
        _slice("c", 0, 8, driver="other.example.com"),
        {"spec": {"driver": DRA_DRIVER, "allNodes": True, "devices": [{"name": "x"}]}},
    ]
    assert dra_devices_per_node(slices) == {"a": 2, "b": 3}
