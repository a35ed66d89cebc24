"""DRA in the service's core, in-process: what 40,000 DRA devices cost beside the
same GPUs served by a device plugin, without HTTP, the API server or the bench
client sharing the two cores (bench/README.md, "DRA").

For each way of serving 5,000 nodes x 8 GPUs: the time to fold the listed nodes,
DeviceClass and ResourceSlices into the service's cluster state (the part of a
start's ready time the devices add), the Python heap it holds then (tracemalloc),
and the core's filter of a plain 1-GPU pod with every node a candidate, and of the
first member of an 8 x 1-GPU gang (which plans the gang), p50 / p99.

    .venv/bin/python -m bench.dra_core --out bench/results/round12-dra/in-process.json
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import time
import tracemalloc
from pathlib import Path
from typing import Any

from bench.objects import DRA_DRIVER, dra_device_class, dra_slice
from bench.stats import summary_ms
from extender.domain.objects.model import PodInfo
from tests.builders import make_cluster_state, make_node, make_pod

NODES = 5000
DEVICES = 8
BOUND_PODS = 10000
FILTERS = 2000
PLANS = 50


def _state(dra: bool) -> tuple[Any, float, float]:
    """The cluster state with the nodes (and devices) and bound pods; seconds and MB."""
    nodes = []
    for i in range(NODES):
        body = make_node(f"n{i:05d}").gpus(DEVICES).obj()
        if dra:
            for part in ("capacity", "allocatable"):
                body["status"].get(part, {}).pop("nvidia.com/gpu", None)
        nodes.append(body)
    slices = [dra_slice(f"n{i:05d}", DEVICES) for i in range(NODES)] if dra else []
    pods = []
    for i in range(BOUND_PODS):
        pod = make_pod(f"bound-{i:06d}").gpus(1 if (i // NODES) % 5 == 0 else 0)
        body = pod.node(f"n{i % NODES:05d}").obj()
        body["status"]["phase"] = "Running"
        pods.append(body)
    gc.collect()
    tracemalloc.start()
    started = time.perf_counter()
    state = make_cluster_state()
    state.on_page("nodes", nodes, True, True)
    if dra:
        state.on_page("deviceclasses", [dra_device_class()], True, True)
        state.on_page("resourceslices", slices, True, True)
    state.on_page("pods", pods, True, True)
    took = time.perf_counter() - started
    gc.collect()
    heap = tracemalloc.get_traced_memory()[0] / 2**20
    tracemalloc.stop()
    return state, took, heap


def measure(dra: bool) -> dict[str, Any]:
    state, folded, heap = _state(dra)
    core = state.core
    names = sorted(core.snapshot.nodes)
    assert core.snapshot.free(names[0]).get("nvidia.com/gpu", 0) >= 6, "GPUs not counted"
    plain = PodInfo.from_api(make_pod("plain").gpus(1).obj())
    now = time.time()
    samples = []
    for _ in range(FILTERS):
        started = time.perf_counter()
        decision = core.filter(plain, names, now)
        samples.append(time.perf_counter() - started)
    assert len(decision.nodes) == NODES, "a plain pod fits every node"
    plans = []
    for g in range(PLANS):
        members = []
        for m in range(8):
            body = make_pod(f"g{g}-{m}").group(f"g{g}").min_available(8).gpus(1).obj()
            state.on_event("pods", "ADDED", body)
            members.append(core.snapshot.pods[body["metadata"]["uid"]])
        started = time.perf_counter()
        decision = core.filter(members[0], names, now)
        plans.append(time.perf_counter() - started)
        assert len(decision.nodes) == 1, decision
    return {
        "gpus_served_by": "DRA (ResourceSlices, a DeviceClass)" if dra else "device plugin",
        "nodes": NODES,
        "dra_devices": NODES * DEVICES if dra else 0,
        "bound_pods": BOUND_PODS,
        "fold_lists_s": round(folded, 2),
        "python_heap_mb": round(heap, 1),
        "filter_plain_pod": summary_ms(samples),
        "filter_plans_a_gang": summary_ms(plans),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    results = {
        "load_average_before": os.getloadavg(),
        "driver": DRA_DRIVER,
        "runs": [measure(dra=False), measure(dra=True)],
        "load_average_after": os.getloadavg(),
    }
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
