"""`make demo-real`: the seed Horovod job running for real on two local real nodes.

The job is examples/horovod/horovod-job.yaml as written (PodGroup, master Pod
with the depends-on wait, worker Deployment with 1 GPU each and a tcpSocket
readiness probe), with two things swapped for what this machine has: the image
(the locally built ``localhost/gang-mpi:bookworm``: sshd, Open MPI, mpi4py) and
the training script (an mpi4py allreduce). The master's ``mpirun --hostfile
/etc/volcano/hostfile`` starts a rank on every member over SSH with the
injected keys, the names resolved by CoreDNS; the demo prints each rank's
host, its node and the result.
"""

from __future__ import annotations

import copy
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from extender.devcluster.cluster import ClusterError, LocalCluster, new_namespace
from extender.devcluster.node_commands import JOB_IMAGE
from extender.devcluster.realnode import RealNodes
from extender.devcluster.stack import REPO, GangStack
from extender.kube.rawapi import KubeError, RawApi, path_of

SEED_JOB = REPO / "examples" / "horovod" / "horovod-job.yaml"
GROUP = "lm-horovod-job"
JOB_TIMEOUT_SECONDS = 300

#: Every rank adds rank + 1: with n ranks the allreduce is n (n + 1) / 2. One line, so
#: mpirun hands it to every rank as an argument (no file to copy to the workers).
ALLREDUCE = (
    "import socket; from mpi4py import MPI; c = MPI.COMM_WORLD; "
    "print(f'rank {c.rank} of {c.size} on {socket.gethostname()}: "
    "allreduce(rank + 1) = {c.allreduce(c.rank + 1)}', flush=True)"
)

#: Open MPI over the pod network only (eth0; lo must be up but carries no ranks' traffic).
MPIRUN = (
    "mpirun --allow-run-as-root --hostfile /etc/volcano/hostfile -np $GANG_NUM_SLOTS"
    " --mca btl tcp,self --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0"
    f' python3 -c "{ALLREDUCE}"'
)
#: The image's sshd as it is: the injected /root/.ssh is a directory its StrictModes accepts.
SSHD = "mkdir -p /run/sshd; exec /usr/sbin/sshd -D -e"


def real_node_job(documents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The seed job's objects for real nodes: the local image and an allreduce for training."""
    out = []
    for doc in documents:
        doc = copy.deepcopy(doc)
        kind = doc.get("kind")
        pod_spec = None
        if kind == "Pod":
            pod_spec = doc["spec"]
        elif kind == "Deployment":
            pod_spec = doc["spec"]["template"]["spec"]
        if pod_spec is not None:
            task = (doc.get("metadata", {}).get("labels") or {}).get(
                "gang-extender.io/task"
            ) or doc["spec"]["template"]["metadata"]["labels"]["gang-extender.io/task"]
            for container in pod_spec["containers"]:
                container["image"] = JOB_IMAGE
                container["imagePullPolicy"] = "IfNotPresent"
                if task == "master":
                    script = (
                        "mkdir -p /run/sshd; /usr/sbin/sshd -e; "
                        f"echo '== /etc/volcano/hostfile'; cat /etc/volcano/hostfile; {MPIRUN}"
                    )
                else:
                    script = SSHD
                container["command"] = ["/bin/sh", "-c", script]
        out.append(doc)
    return out


def run_real_demo(workdir: Path, *, nodes: int = 2, gpus: int = 2) -> int:
    workdir = workdir.resolve()
    started = time.monotonic()
    print(
        f"== starting a local control plane, the gang-extender stack and {nodes} real nodes "
        "(containerd + kubelet + fake GPU plugin each, CoreDNS)",
        flush=True,
    )
    cluster = LocalCluster(workdir / "cluster", kubelet_access=True)
    real: RealNodes | None = None
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
        api = cluster.api_client()
        raw = RawApi(api)
        namespace = new_namespace(api, "horovod", labels={"gang-extender.io/inject": "enabled"})
        job = workdir / "horovod-job-real.yaml"
        docs = [d for d in yaml.safe_load_all(SEED_JOB.read_text()) if d]
        job.write_text(yaml.safe_dump_all(real_node_job(docs), sort_keys=False))
        print(
            f"== kubectl apply -n {namespace} -f {SEED_JOB.relative_to(REPO)} "
            f"(image {JOB_IMAGE}, training script: an mpi4py allreduce)",
            flush=True,
        )
        print(cluster.kubectl("apply", "-n", namespace, "-f", str(job)).rstrip(), flush=True)
        job_start = time.monotonic()
        phase = _wait_master(raw, namespace)
        job_seconds = time.monotonic() - job_start
        print(f"== members ({GROUP}):")
        for pod in _pods(raw, namespace):
            spec = pod["spec"]
            print(
                f"   {pod['metadata']['name']:<40} {pod['status'].get('phase', ''):<10}"
                f" node {spec.get('nodeName')}  pod IP {pod['status'].get('podIP', '')}"
                f"  ({spec.get('hostname', '')}.{spec.get('subdomain', '')})"
            )
        restarted = phase.startswith("Failed (")
        logs = cluster.kubectl(
            "logs",
            "-n",
            namespace,
            f"{GROUP}-master",
            *(["--previous"] if restarted else []),
            check=False,
        )
        print(f"== kubectl logs {GROUP}-master  (mpirun over SSH, names from CoreDNS)")
        # Ranks print in whatever order they finish: sorted, after the rest of the log.
        ranks = sorted(line for line in logs.splitlines() if line.startswith("rank "))
        rest = [line for line in logs.strip().splitlines() if not line.startswith("rank ")]
        print("   " + "\n   ".join(rest + ranks))
        size = len(ranks)
        expected = size * (size + 1) // 2
        ok = (
            phase == "Succeeded"
            and size > 1
            and all(line.endswith(f"= {expected}") for line in ranks)
        )
        print(
            f"== {'OK' if ok else 'FAILED'}: {size} ranks, allreduce = {expected if ok else '?'}; "
            f"master {phase} {job_seconds:.1f}s after apply; "
            f"demo {time.monotonic() - started:.1f}s in all",
            flush=True,
        )
        return 0 if ok else 1
    except (ClusterError, KubeError, TimeoutError) as err:
        print(f"demo failed: {err}", file=sys.stderr)
        print(cluster.tail_logs(), file=sys.stderr)
        return 1
    finally:
        if real is not None:
            real.stop()
        cluster.stop()


def _pods(raw: RawApi, namespace: str) -> list[dict[str, Any]]:
    items = raw.call(
        "GET",
        path_of("api", "v1", "namespaces", namespace, "pods"),
        query={"labelSelector": f"gang-extender.io/group={GROUP}"},
    )["items"]
    return sorted(items, key=lambda p: p["metadata"]["name"])


def _wait_master(raw: RawApi, namespace: str) -> str:
    """The master's final phase; a restart (mpirun failed) counts as failure."""
    deadline = time.monotonic() + JOB_TIMEOUT_SECONDS
    path = path_of("api", "v1", "namespaces", namespace, "pods", f"{GROUP}-master")
    while time.monotonic() < deadline:
        try:
            pod = raw.call("GET", path)
        except KubeError:
            pod = {}
        status = pod.get("status") or {}
        restarts = sum(c.get("restartCount", 0) for c in status.get("containerStatuses") or [])
        if status.get("phase") in ("Succeeded", "Failed"):
            return str(status["phase"])
        if restarts:
            return "Failed (mpirun exited non-zero; the container restarted)"
        time.sleep(1)
    raise TimeoutError(f"the master did not finish within {JOB_TIMEOUT_SECONDS}s")
