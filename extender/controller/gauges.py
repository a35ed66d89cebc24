"""The gauges drawn from the core's state: groups per phase, GPUs per pool, resource and state.

Recomputed from scratch before each /metrics scrape (`Gauges.update`, called by
`GangService.update_gauges`: O(groups + nodes), too much for every tick); a pool whose
last GPU node is gone has its series removed rather than left at a stale value. "GPUs"
are each accelerator resource a node offers (the snapshot's matcher), one series each.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict

from extender.domain.gang.core_api import SchedulingCore
from extender.domain.status.status import group_status
from extender.metrics import Metrics

POOL_LABEL = "gang-extender.io/pool"
GPU_STATES = ("bound", "reserved", "free")


class Gauges:
    def __init__(self, core: SchedulingCore, metrics: Metrics) -> None:
        self.core = core
        self.metrics = metrics
        self._gpu_pools: set[tuple[str, str]] = set()  # (pool, resource)

    def update(self) -> None:
        phases: dict[str, int] = defaultdict(int)
        for key in self.core.snapshot.group_keys():
            status = group_status(self.core, key)
            # A group nothing sizes (no PodGroup, no min-available) is Pending, as
            # `gang-extender status` shows it (`0/?`): the commonest first mistake,
            # and GangExtenderGangsStuckPending must see it.
            phases[status.phase if status is not None else "Pending"] += 1
        for phase in ("Pending", "Scheduling", "Scheduled", "Running", "Succeeded", "Failed"):
            self.metrics.groups.labels(phase=phase).set(phases.get(phase, 0))
        snapshot = self.core.snapshot
        pools: dict[tuple[str, str], dict[str, int]] = defaultdict(lambda: defaultdict(int))
        for name, node in snapshot.nodes.items():
            pool = node.labels.get(POOL_LABEL, "default")
            used, reserved_here = snapshot.used(name), self.core.ledger.reserved(name)
            for resource in snapshot.accelerators.offered(node.allocatable):
                total = node.allocatable[resource]
                bound = used.get(resource, 0)
                reserved = reserved_here.get(resource, 0)
                states = pools[(pool, resource)]
                states["bound"] += bound
                states["reserved"] += reserved
                states["free"] += max(0, total - bound - reserved)
        for (pool, resource), states in pools.items():
            for state, value in states.items():
                self.metrics.gpus.labels(pool=pool, resource=resource, state=state).set(value)
        for pool, resource in self._gpu_pools - pools.keys():  # its last node is gone
            for state in GPU_STATES:
                with contextlib.suppress(KeyError):
                    self.metrics.gpus.remove(pool, resource, state)
        self._gpu_pools = set(pools)
