"""Time deleting N bound pods: DELETE collection vs one DELETE each (16 at a time).

Round 16 (docs/benchmarks.md): `PYTHONPATH=. .venv/bin/python
bench/results/round16-cleanup/delete_experiment.py 4000`; its log beside it.
"""

import logging
import sys
import time
from pathlib import Path

from bench.env import BenchEnv
from bench.kubeclient import (
    FastApi,
    bulk,
    count,
    delete_pods,
    delete_pods_each,
    pods_path,
    wait_for,
)
from bench.objects import pod_body
from extender.devcluster.binaries import ensure_binaries
from extender.devcluster.cluster import LocalCluster

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
N = int(sys.argv[1])
NODES = 500
cluster = LocalCluster(Path("/tmp/delexp/cluster"), ensure_binaries())
cluster.start()
try:
    env = BenchEnv(cluster, None, FastApi(cluster))
    nodes = env.add_nodes(NODES, "delexp", kwok=True, prefix="d", gpus=8)
    env.wait_nodes_ready("delexp", NODES, timeout=300)
    for method in ("collection", "each", "collection", "each"):
        ns = env.namespace("delexp")
        bodies = []
        for i in range(N):
            b = pod_body(f"p{i}", "delexp", scheduler="default-scheduler", gpus=1)
            b["spec"]["nodeName"] = nodes[i % NODES]
            bodies.append(b)
        r = bulk(bodies, lambda b, ns=ns: env.api.create(pods_path(ns), b))
        logging.info("created %d (%d errors) in %.1fs", r.done, r.errors, r.seconds)
        time.sleep(5)
        t = time.monotonic()
        if method == "collection":
            delete_pods(env.api, ns)
        else:
            delete_pods_each(env.api, ns)
        answered = time.monotonic() - t
        wait_for(
            lambda ns=ns: count(env.api, pods_path(ns)) == 0, timeout=900, what="gone", interval=0.5
        )
        logging.info(
            "%s: %d pods: answered %.1fs, gone %.1fs", method, N, answered, time.monotonic() - t
        )
finally:
    cluster.stop()
