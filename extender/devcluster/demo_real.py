"""`make demo-real`: the example gang jobs running for real on two local real nodes.

One after the other, each in its own injected namespace: the seed Horovod job
(examples/horovod/horovod-job.yaml), the DeepSpeed example (an Indexed Job
whose member 0 hands the injected ``host slots=2`` hostfile to mpirun) and the
MPI example (a scheduler-plugins PodGroup, a launcher Job and a worker
StatefulSet), each as written but for what :mod:`extender.devcluster.demo_jobs`
swaps (image, training program, DeepSpeed's CPU and memory). Every launcher's
``mpirun`` starts its ranks on the members over SSH with the injected keys,
the names resolved by CoreDNS; the demo prints each rank's host, each
member's node and the result, then deletes the namespace so the next job has
the GPUs.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from extender.devcluster.cluster import ClusterError, LocalCluster, new_namespace
from extender.devcluster.demo_jobs import JOBS, DemoJob
from extender.devcluster.node_commands import JOB_IMAGE
from extender.devcluster.realnode import RealNodes
from extender.devcluster.stack import REPO, GangStack
from extender.kube.rawapi import KubeError, RawApi, path_of

JOB_TIMEOUT_SECONDS = 300
GONE_TIMEOUT_SECONDS = 120
#: The DeepSpeed example asks 4 x 2 GPUs: 2 nodes with 4 each hold it.
DEMO_GPUS_PER_NODE = 4


@dataclass(frozen=True)
class JobResult:
    key: str
    ok: bool
    ranks: int
    nodes: int
    seconds: float


def run_real_demo(
    workdir: Path,
    *,
    nodes: int = 2,
    gpus: int = DEMO_GPUS_PER_NODE,
    jobs: tuple[str, ...] | None = None,
) -> int:
    workdir = workdir.resolve()
    chosen = [job for job in JOBS if jobs is None or job.key in jobs]
    started = time.monotonic()
    print(
        f"== starting a local control plane, the gang-extender stack and {nodes} real nodes "
        "(containerd + kubelet + fake GPU plugin each, CoreDNS)",
        flush=True,
    )
    cluster = LocalCluster(workdir / "cluster", kubelet_access=True)
    real: RealNodes | None = None
    results: list[JobResult] = []
    try:
        cluster.start()
        real = RealNodes(cluster, nodes, gpus=gpus)
        real.start()
        stack = GangStack(cluster)
        stack.start()
        assert real.layout is not None
        print(f"   up in {time.monotonic() - started:.1f}s", flush=True)
        for node in real.layout.nodes:
            print(
                f"   {node.name}: IP {node.node_ip}, pods {node.pod_cidr}, {node.gpus} fake GPUs",
                flush=True,
            )
        raw = RawApi(cluster.api_client())
        for number, job in enumerate(chosen, 1):
            print(f"\n== [{number}/{len(chosen)}] {job.title}", flush=True)
            results.append(_run_job(cluster, raw, workdir, job))
    except (ClusterError, KubeError, TimeoutError) as err:
        print(f"demo failed: {err}", file=sys.stderr)
        print(cluster.tail_logs(), file=sys.stderr)
        return 1
    finally:
        if real is not None:
            real.stop()
        cluster.stop()
    ok = len(results) == len(chosen) and all(r.ok for r in results)
    summary = "; ".join(
        f"{r.key} {'OK' if r.ok else 'FAILED'} ({r.ranks} ranks on {r.nodes} nodes, {r.seconds:.1f}s)"
        for r in results
    )
    print(
        f"\n== {'OK' if ok else 'FAILED'}: {summary}; demo {time.monotonic() - started:.1f}s in all",
        flush=True,
    )
    return 0 if ok else 1


def _run_job(cluster: LocalCluster, raw: RawApi, workdir: Path, job: DemoJob) -> JobResult:
    namespace = new_namespace(
        raw.api_client, job.key, labels={"gang-extender.io/inject": "enabled"}
    )
    manifest = workdir / f"{job.key}-real.yaml"
    docs = [d for d in yaml.safe_load_all(job.example.read_text()) if d]
    manifest.write_text(yaml.safe_dump_all(job.transform(docs), sort_keys=False))
    print(
        f"== kubectl apply -n {namespace} -f {job.example.relative_to(REPO)}\n"
        f"   (image {JOB_IMAGE}; {job.swapped})",
        flush=True,
    )
    print(
        "   "
        + cluster.kubectl("apply", "-n", namespace, "-f", str(manifest))
        .strip()
        .replace("\n", "\n   "),
        flush=True,
    )
    applied = time.monotonic()
    launcher, phase = _wait_launcher(raw, namespace, job)
    seconds = time.monotonic() - applied
    members = job_pods(raw, namespace, job.members)
    print(f"== members ({job.group}):")
    for pod in members:
        spec = pod["spec"]
        print(
            f"   {pod['metadata']['name']:<32} {pod['status'].get('phase', ''):<10}"
            f" node {spec.get('nodeName')}  pod IP {pod['status'].get('podIP', '')}"
            f"  ({spec.get('hostname', '')}.{spec.get('subdomain', '')})"
        )
    restarted = phase.startswith("Failed (")
    logs = cluster.kubectl(
        "logs", "-n", namespace, launcher, *(["--previous"] if restarted else []), check=False
    )
    print(f"== kubectl logs {launcher}  (mpirun over SSH, names from CoreDNS)")
    # Ranks print in whatever order they finish: sorted, after the rest of the log.
    ranks = sorted(line for line in logs.splitlines() if line.startswith("rank "))
    rest = [line for line in logs.strip().splitlines() if not line.startswith("rank ")]
    print("   " + "\n   ".join(rest + ranks))
    size = len(ranks)
    expected = size * (size + 1) // 2
    hosts = {line.split(" on ", 1)[1].split(":", 1)[0] for line in ranks}
    node_of = {p["spec"].get("hostname"): p["spec"].get("nodeName") for p in members}
    rank_nodes = {node_of.get(host) for host in hosts}
    ok = (
        phase == "Succeeded"
        and size > 1
        and all(line.endswith(f"= {expected}") for line in ranks)
        and None not in rank_nodes
    )
    print(
        f"== {'OK' if ok else 'FAILED'}: {size} ranks on {len(hosts)} members and "
        f"{len(rank_nodes)} nodes, allreduce = {expected if ok else '?'}; "
        f"launcher {phase} {seconds:.1f}s after apply",
        flush=True,
    )
    gone = delete_job_namespace(raw, namespace)
    print(f"== kubectl delete namespace {namespace}: its pods gone in {gone:.1f}s", flush=True)
    return JobResult(job.key, ok, size, len(rank_nodes), seconds)


def job_pods(raw: RawApi, namespace: str, selector: str) -> list[dict[str, Any]]:
    items = raw.call(
        "GET",
        path_of("api", "v1", "namespaces", namespace, "pods"),
        query={"labelSelector": selector},
    )["items"]
    return sorted(items, key=lambda p: p["metadata"]["name"])


def _wait_launcher(raw: RawApi, namespace: str, job: DemoJob) -> tuple[str, str]:
    """The launcher's name and final phase; a restart (mpirun failed) counts as failure."""
    deadline = time.monotonic() + JOB_TIMEOUT_SECONDS
    selector = f"{job.members},{job.launcher}"
    while time.monotonic() < deadline:
        for pod in job_pods(raw, namespace, selector):
            name = pod["metadata"]["name"]
            status = pod.get("status") or {}
            statuses = status.get("containerStatuses") or []
            if status.get("phase") in ("Succeeded", "Failed"):
                return name, str(status["phase"])
            if sum(c.get("restartCount", 0) for c in statuses):
                return name, "Failed (mpirun exited non-zero; the container restarted)"
        time.sleep(1)
    raise TimeoutError(f"{job.key}: the launcher did not finish within {JOB_TIMEOUT_SECONDS}s")


def delete_job_namespace(raw: RawApi, namespace: str) -> float:
    """Delete the job's namespace; the seconds until its pods are gone (their GPUs free).
    Also bench/time_to_running.py's, between runs."""
    raw.call("DELETE", path_of("api", "v1", "namespaces", namespace))
    started = time.monotonic()
    deadline = started + GONE_TIMEOUT_SECONDS
    while job_pods(raw, namespace, ""):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the pods of {namespace} were not gone in {GONE_TIMEOUT_SECONDS}s")
        time.sleep(1)
    return time.monotonic() - started
