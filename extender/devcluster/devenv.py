"""`gang-extender dev up|down` and `gang-extender demo`: the local cluster for humans.

`dev up` starts a supervisor process in the background that owns the cluster
(its children die with it), waits until it is ready and prints how to use it;
`dev down` asks the supervisor to stop and waits until everything is gone.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from extender.devcluster.cluster import ClusterError, LocalCluster, new_namespace
from extender.devcluster.kueue import KueueManager, create_dev_queues, ensure_kueue
from extender.devcluster.node_commands import JOB_IMAGE
from extender.devcluster.nodes import add_gpu_nodes, wait_for_nodes_ready
from extender.devcluster.realnode import RealNodes, cannot_run_containers, teardown_workdir
from extender.devcluster.stack import REPO, GangStack
from extender.kube.rawapi import KubeError, RawApi, path_of
from extender.kube.writers import podgroup_path

READY_FILE = "ready.json"
PID_FILE = "supervisor.pid"
START_TIMEOUT_SECONDS = 900  # a first run builds the control plane
DEMO_TIMEOUT_SECONDS = 120
REAL_NODES_BUILD_SECONDS = 1500  # hack/build-node.sh, first run
KUEUE_BUILD_SECONDS = 1800  # hack/build-kueue.sh, first run (150 s idle, 26 min loaded)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _read_pid(workdir: Path) -> int | None:
    try:
        return int((workdir / PID_FILE).read_text().strip())
    except (OSError, ValueError):
        return None


def dev_up(
    workdir: Path,
    *,
    nodes: int,
    gpus: int,
    with_stack: bool,
    foreground: bool = False,
    real_nodes: int = 0,
    real_gpus: int = 2,
    real_gpus_by: str = "device-plugin",
    kueue: bool = False,
) -> int:
    workdir = workdir.resolve()
    if real_nodes:
        problem = real_nodes_problem(real_nodes)
        if problem:
            print(f"error: {problem}", file=sys.stderr)
            return 2
    if foreground:
        return _supervise(
            workdir,
            nodes=nodes,
            gpus=gpus,
            with_stack=with_stack,
            real_nodes=real_nodes,
            real_gpus=real_gpus,
            real_gpus_by=real_gpus_by,
            kueue=kueue,
        )
    pid = _read_pid(workdir)
    if pid is not None and _alive(pid):
        print(
            f"already running (supervisor pid {pid}); `gang-extender dev down --workdir {workdir}` first"
        )
        return 1
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / READY_FILE).unlink(missing_ok=True)
    log_path = workdir / "supervisor.log"
    argv = [
        sys.executable,
        "-m",
        "extender",
        "dev",
        "up",
        "--foreground",
        "--workdir",
        str(workdir),
        "--nodes",
        str(nodes),
        "--gpus",
        str(gpus),
        "--real-nodes",
        str(real_nodes),
        "--real-gpus",
        str(real_gpus),
        "--real-gpus-by",
        real_gpus_by,
    ]
    if not with_stack:
        argv.append("--cluster-only")
    if kueue:
        argv.append("--kueue")
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=REPO,
        )
    print(f"starting local cluster in {workdir} (log: {log_path}) ...", flush=True)
    # A first run with real nodes builds kubelet, containerd, CoreDNS and the images too.
    limit = (
        START_TIMEOUT_SECONDS
        + (REAL_NODES_BUILD_SECONDS if real_nodes else 0)
        + (KUEUE_BUILD_SECONDS if kueue else 0)
    )
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if (workdir / READY_FILE).exists():
            info = json.loads((workdir / READY_FILE).read_text())
            _print_usage(info)
            return 0
        if proc.poll() is not None:
            print(f"local cluster failed to start; last lines of {log_path}:", file=sys.stderr)
            print(_tail(log_path, 40), file=sys.stderr)
            return 1
        time.sleep(0.5)
    print(f"local cluster not ready after {limit}s; see {log_path}", file=sys.stderr)
    return 1


def _tail(path: Path, lines: int) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def cli_dir() -> Path | None:
    """The directory of the `gang-extender` command running now, or None.

    `gang-extender ...` runs a console script whose path is sys.argv[0];
    `python -m extender ...` runs from a venv whose bin holds that script (when
    the package is installed there). What `dev up` puts on the printed PATH, so
    the `gang-extender status` the READMEs show is found in a fresh shell.
    """
    script = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if script is not None and script.name == "gang-extender" and script.is_file():
        return script.absolute().parent
    beside_python = Path(sys.executable).parent / "gang-extender"
    if beside_python.is_file():
        return beside_python.parent
    return None


def usage_lines(info: dict[str, Any], cli: Path | None) -> list[str]:
    """What `dev up` prints: the exports that put kubectl and gang-extender on PATH."""
    path = [str(info["bin_dir"])]
    if cli is not None and str(cli) not in path:
        path.append(str(cli))
    what = "kubectl and gang-extender" if cli is not None else "kubectl"
    lines = [
        "local cluster is up:",
        f"  export KUBECONFIG={info['kubeconfig']}",
        f"  export PATH={':'.join(path)}:$PATH      # {what}",
    ]
    if cli is None:
        lines.append(
            "  # gang-extender is not installed as a command here: `pip install .` "
            "from the repository (or `make`, then .venv/bin/gang-extender)"
        )
    lines.append("  kubectl get nodes")
    if info.get("real_nodes"):
        lines.append(
            f"  # real nodes {', '.join(info['real_nodes'])}: image {JOB_IMAGE} "
            "(imagePullPolicy: IfNotPresent); docs/real-nodes.md"
        )
        if info.get("real_gpus_by") in ("dra", "both"):
            lines.append(
                "  # their GPUs are DRA devices: a ResourceClaim(Template) of DeviceClass "
                "gpu.example.com; docs/dra.md"
            )
    if info.get("kueue"):
        queues = info["kueue"]
        lines.append(
            f"  # Kueue: label a Job kueue.x-k8s.io/queue-name={queues['local_queue']} in "
            f"namespace {queues['namespace']} (ClusterQueue {queues['cluster_queue']}, "
            f'{queues["gpus"]} nvidia.com/gpu); docs/deploy.md "With Kueue"'
        )
    if info.get("metrics_url"):
        lines.append(f"  curl {info['metrics_url']}/metrics     # gang-extender metrics")
        lines.append("  gang-extender status                        # pod groups")
    else:
        lines.append(
            "  kubectl apply -k deploy/                    # try the manifests: docs/deploy.md"
        )
    lines.append(f"stop it with: gang-extender dev down --workdir {info['workdir']}")
    return lines


def _print_usage(info: dict[str, Any]) -> None:
    print("\n".join(usage_lines(info, cli_dir())))


def real_nodes_problem(count: int) -> str | None:
    """Why `--real-nodes count` cannot run here, or None."""
    if count < 2:
        return f"--real-nodes takes at least 2 nodes (a gang spans nodes), not {count}"
    return cannot_run_containers()


def _supervise(
    workdir: Path,
    *,
    nodes: int,
    gpus: int,
    with_stack: bool,
    real_nodes: int = 0,
    real_gpus: int = 2,
    real_gpus_by: str = "device-plugin",
    kueue: bool = False,
) -> int:
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / PID_FILE).write_text(str(os.getpid()))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    cluster = LocalCluster(workdir / "cluster", kubelet_access=real_nodes > 0)
    real: RealNodes | None = None
    queue_manager: KueueManager | None = None
    try:
        t0 = time.monotonic()
        cluster.start()
        api = cluster.api_client()
        names = add_gpu_nodes(api, nodes, gpus=gpus)
        wait_for_nodes_ready(api, names)
        info: dict[str, Any] = {
            "workdir": str(workdir),
            "kubeconfig": str(cluster.kubeconfig),
            "bin_dir": str(cluster.bin_dir),
            "nodes": names,
        }
        if real_nodes:
            real = RealNodes(cluster, real_nodes, gpus=real_gpus, gpus_by=real_gpus_by)
            info["real_nodes"] = real.start()
            info["real_gpus_by"] = real_gpus_by
            info["real_node_timings"] = {k: round(v, 1) for k, v in real.timings.items()}
        if with_stack:
            stack = GangStack(cluster)
            stack.start()
            info["metrics_url"] = stack.metrics_url
            info["extender_url"] = stack.extender_url
            # The extender answers only mutual TLS: what curl needs to call it by hand.
            info["extender_ca"] = str(stack.ca_path)
            info["extender_client_cert"] = str(stack.client_cert_path)
            info["extender_client_key"] = str(stack.client_key_path)
        if kueue:
            queue_manager = KueueManager(cluster, ensure_kueue())
            queue_manager.start()
            queues = create_dev_queues(RawApi(api), gpus=nodes * gpus + real_nodes * real_gpus)
            info["kueue"] = dataclasses.asdict(queues)
        info["seconds_to_ready"] = round(time.monotonic() - t0, 1)
        (workdir / READY_FILE).write_text(json.dumps(info, indent=2))
        print("ready", flush=True)
        while not stop.wait(1.0):
            pass
        return 0
    except ClusterError as err:
        print(f"error: {err}", file=sys.stderr, flush=True)
        return 1
    finally:
        if queue_manager is not None:
            queue_manager.stop()
        if real is not None:
            real.stop()
        cluster.stop()
        (workdir / READY_FILE).unlink(missing_ok=True)
        (workdir / PID_FILE).unlink(missing_ok=True)


def dev_down(workdir: Path) -> int:
    workdir = workdir.resolve()
    pid = _read_pid(workdir)
    if pid is None or not _alive(pid):
        (workdir / PID_FILE).unlink(missing_ok=True)
        if teardown_workdir(workdir / "cluster"):
            print(f"removed what real nodes left on this host from {workdir}")
        else:
            print(f"nothing running in {workdir}")
        return 0
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.2)
    if _alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        teardown_workdir(workdir / "cluster")
        print(f"supervisor {pid} did not stop in 60s; killed its process group")
        return 1
    print("local cluster stopped")
    return 0


# ---------------------------------------------------------------- the demo
def _podgroup(raw: RawApi, namespace: str, name: str) -> dict[str, Any]:
    return raw.call("GET", podgroup_path(namespace, name))


def _condition(pg: dict[str, Any]) -> str:
    for c in (pg.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Scheduled":
            return str(c.get("message", ""))
    return ""


def _pods(raw: RawApi, namespace: str, group: str) -> list[dict[str, Any]]:
    pods = raw.call(
        "GET",
        path_of("api", "v1", "namespaces", namespace, "pods"),
        query={"labelSelector": f"gang-extender.io/group={group}"},
    )["items"]
    return sorted(pods, key=lambda p: p["metadata"]["name"])


def run_demo(workdir: Path, *, keep: bool) -> int:
    """Seed Horovod job: held on a 2-GPU cluster, placed when a GPU node joins."""
    workdir = workdir.resolve()
    group, example = "lm-horovod-job", REPO / "examples" / "horovod" / "horovod-job.yaml"
    print(
        "== starting a local control plane (etcd, kube-apiserver, controller-manager, "
        "kube-scheduler, kwok) with the gang-extender service and gang scheduler",
        flush=True,
    )
    cluster = LocalCluster(workdir / "cluster")
    started = time.monotonic()
    try:
        cluster.start()
        api = cluster.api_client()
        raw = RawApi(api)
        first = add_gpu_nodes(api, 1, gpus=2, name_prefix="gpu-small")
        wait_for_nodes_ready(api, first)
        stack = GangStack(cluster)
        stack.start()
        print(f"   up in {time.monotonic() - started:.1f}s; 1 node with 2 GPUs", flush=True)
        namespace = new_namespace(api, "horovod", labels={"gang-extender.io/inject": "enabled"})
        print(f"== kubectl apply -n {namespace} -f {example.relative_to(REPO)}", flush=True)
        print(cluster.kubectl("apply", "-n", namespace, "-f", str(example)).rstrip(), flush=True)

        message = _wait_for(lambda: _held_message(raw, namespace, group), DEMO_TIMEOUT_SECONDS)
        min_member = int(_podgroup(raw, namespace, group)["spec"]["minMember"])
        pods = _pods(raw, namespace, group)
        bound = [p["metadata"]["name"] for p in pods if p["spec"].get("nodeName")]
        print(f"== held: {message}")
        print(
            f"   members: {len(pods)} created, {len(bound)} bound "
            f"(gang-extender binds none until all {min_member} fit)",
            flush=True,
        )
        if bound:
            raise ClusterError(f"members {', '.join(bound)} were bound while the gang was held")

        print("== adding a node with 4 GPUs", flush=True)
        second = add_gpu_nodes(api, 1, gpus=4, name_prefix="gpu-big")
        wait_for_nodes_ready(api, second)
        _wait_for(lambda: _all_bound(raw, namespace, group, min_member), DEMO_TIMEOUT_SECONDS)
        pg = _wait_for(lambda: _placed_podgroup(raw, namespace, group), DEMO_TIMEOUT_SECONDS)
        print(f"== placed: {_condition(pg)} (phase {pg['status'].get('phase')})")
        for pod in _pods(raw, namespace, group):
            spec = pod["spec"]
            host = f"{spec.get('hostname', '')}.{spec.get('subdomain', '')}"
            print(f"   {pod['metadata']['name']:<40} -> {spec.get('nodeName')}   ({host})")
        cm = _wait_for(lambda: _configmap(raw, namespace, f"{group}-svc"), DEMO_TIMEOUT_SECONDS)
        print("== /etc/volcano/hostfile (what mpiexec/deepspeed read):")
        print("   " + cm["data"].get("hostfile", "").strip().replace("\n", "\n   "))
        print("== /etc/volcano/worker.host:")
        print("   " + cm["data"].get("worker.host", "").strip().replace("\n", "\n   "))
        if keep:
            print(
                f"cluster left running: export KUBECONFIG={cluster.kubeconfig}; "
                f"stop with: kill {os.getpid()} (Ctrl-C)"
            )
            with contextlib.suppress(KeyboardInterrupt):
                while True:
                    time.sleep(3600)
        return 0
    except (ClusterError, KubeError, TimeoutError) as err:
        print(f"demo failed: {err}", file=sys.stderr)
        print(cluster.tail_logs(), file=sys.stderr)
        return 1
    finally:
        cluster.stop()


def _wait_for(probe: Any, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.5)
    raise TimeoutError(f"gave up after {timeout}s waiting for {getattr(probe, '__name__', probe)}")


def _held_message(raw: RawApi, namespace: str, group: str) -> str | None:
    try:
        pg = _podgroup(raw, namespace, group)
    except KubeError:
        return None
    message = _condition(pg)
    return message if "placeable" in message else None


def _placed_podgroup(raw: RawApi, namespace: str, group: str) -> dict[str, Any] | None:
    """The PodGroup once Running: kwok starts the bound pods at once, so waiting for it
    (not for Scheduled too) makes the demo print the same phase every run."""
    pg = _podgroup(raw, namespace, group)
    return pg if (pg.get("status") or {}).get("phase") == "Running" else None


def _all_bound(raw: RawApi, namespace: str, group: str, min_member: int) -> bool:
    pods = _pods(raw, namespace, group)
    return len(pods) >= min_member and all(p["spec"].get("nodeName") for p in pods)


def _configmap(raw: RawApi, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        return raw.call("GET", path_of("api", "v1", "namespaces", namespace, "configmaps", name))
    except KubeError:
        return None
