"""Real nodes beside the KWOK ones: containerd, kubelet and a GPU driver per node.

    with LocalCluster(workdir, kubelet_access=True) as cluster:
        nodes = RealNodes(cluster, 2, gpus=2)
        names = nodes.start()          # Ready, with 2 allocatable nvidia.com/gpu each
        ...
        nodes.stop()                   # leaves nothing on the host

A node's fake GPUs are served by a device plugin (``nvidia.com/gpu`` in its
allocatable), by a DRA kubelet plugin (a ResourceSlice of DeviceClass
``gpu.example.com``, prepared through CDI), or both: ``gpus_by``.

Each node is its own containerd (root, state, socket) and kubelet (root dir,
client certificate ``system:node:<name>`` from the cluster's CA), its own
bridge and pod /24, and a node IP on ``lo``; one CoreDNS process serves the
cluster's names to every pod. The layout is in
:mod:`extender.devcluster.node_commands`, the host resources and their
teardown in :mod:`extender.devcluster.nodehost`. The binaries and images
come from ``hack/build-node.sh`` (cached). KWOK manages only nodes annotated
``kwok.x-k8s.io/node: fake``, so it leaves these alone.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from extender.devcluster import node_commands as plan
from extender.devcluster import nodehost
from extender.devcluster.cluster import ClusterError, LocalCluster
from extender.devcluster.loopback import wait_for
from extender.devcluster.process import ManagedProcess, run_build_script
from extender.kube.rawapi import KubeError, RawApi, path_of

REPO = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO / "hack" / "build-node.sh"
#: A prebuilt node directory (bin/, images/), skipping hack/build-node.sh.
NODE_DIR_ENV = "GANG_NODE_DIR"
MANIFEST = "real-nodes.json"
REQUIRED = (
    "kubelet",
    "containerd",
    "containerd-shim-runc-v2",
    "ctr",
    "crictl",
    "coredns",
    "fake-gpu-plugin",
)
#: The DRA kubelet plugin (kubernetes' e2e test driver), needed only with DRA.
DRA_DRIVER_BINARY = "dra-test-driver"
#: How real nodes serve their GPUs: kubelet's device plugin API, DRA, or both at once.
GPUS_BY = ("device-plugin", "dra", "both")
IMAGES = {"pause.tar": "registry.k8s.io/pause", "mpi.tar": plan.JOB_IMAGE.rsplit(":", 1)[0]}
GPU_RESOURCE = "nvidia.com/gpu"
READY_TIMEOUT_SECONDS = 180
_STOP_GRACE_SECONDS = 10
_DEVICE_CLASSES = ("apis", "resource.k8s.io", "v1", "deviceclasses")
#: Stopped before crictl removes the pods (kubelet would start them again).
_NODE_AGENTS = ("-kubelet", "-fake-gpu-plugin", "-dra-driver")


def cannot_run_containers() -> str | None:
    """Why this machine cannot run real nodes, or None when it can."""
    if sys.platform != "linux":
        return f"real nodes need Linux, not {sys.platform}"
    if os.geteuid() != 0:
        return "real nodes need root (containerd, kubelet, bridges, lo addresses)"
    hierarchies = nodehost.cgroup_hierarchies()
    if not hierarchies:
        return "no cgroup filesystem is mounted"
    names = {p.name for p in hierarchies}
    unified = Path("/sys/fs/cgroup/cgroup.controllers").exists()
    if not unified and not {"memory", "cpu", "pids"} <= names:
        return f"the cgroup controllers kubelet needs are not mounted (found {sorted(names)})"
    return None


def ensure_node_pieces(*, dra: bool = False) -> Path:
    """The directory with bin/ and images/ for real nodes, built if needed.

    ``$GANG_NODE_DIR`` names a prebuilt one; otherwise hack/build-node.sh runs
    (a no-op when cached), its progress lines on our stderr.
    """
    override = os.environ.get(NODE_DIR_ENV)
    if override:
        pieces = Path(override).expanduser().resolve()
    else:
        run = run_build_script(["bash", str(BUILD_SCRIPT)], name="build-node")
        if run.code != 0 or run.last_line is None:
            raise ClusterError(f"{BUILD_SCRIPT} failed ({run.code}):\n" + run.stderr_tail)
        pieces = Path(run.last_line)
    wanted = (*REQUIRED, DRA_DRIVER_BINARY) if dra else REQUIRED
    missing = [b for b in wanted if not os.access(pieces / "bin" / b, os.X_OK)]
    missing += [i for i in IMAGES if not (pieces / "images" / i).is_file()]
    if missing:
        raise ClusterError(f"{pieces} lacks {', '.join(missing)}: run {BUILD_SCRIPT}")
    return pieces


def node_usable(node: dict[str, Any], gpus: int) -> bool:
    """Ready, ``gpus`` GPUs allocatable (the device plugin registered; 0 without one),
    no start-up taint."""
    status = node.get("status") or {}
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    allocatable = int((status.get("allocatable") or {}).get(GPU_RESOURCE, "0"))
    taints = (node.get("spec") or {}).get("taints") or []
    tainted = any(str(t.get("key", "")).startswith("node.kubernetes.io/") for t in taints)
    return ready and allocatable == gpus and not tainted


def dra_devices_per_node(slices: list[dict[str, Any]]) -> dict[str, int]:
    """The devices our DRA driver published, per node (its pool's newest generation)."""
    newest: dict[str, int] = {}
    for item in slices:
        spec = item.get("spec") or {}
        if spec.get("driver") == plan.DRA_DRIVER and spec.get("nodeName"):
            pool = spec.get("pool") or {}
            newest[spec["nodeName"]] = max(
                newest.get(spec["nodeName"], 0), int(pool.get("generation", 0))
            )
    devices: dict[str, int] = {}
    for item in slices:
        spec = item.get("spec") or {}
        node = spec.get("nodeName")
        if spec.get("driver") != plan.DRA_DRIVER or not node:
            continue
        if int((spec.get("pool") or {}).get("generation", 0)) == newest[node]:
            devices[node] = devices.get(node, 0) + len(spec.get("devices") or [])
    return devices


class RealNodes:
    """``count`` real nodes joined to ``cluster`` (started with ``kubelet_access=True``).

    ``gpus_by``: ``device-plugin`` (``gpus`` allocatable ``nvidia.com/gpu`` a node),
    ``dra`` (``gpus`` devices a node in a ResourceSlice of driver and DeviceClass
    ``gpu.example.com``, which also serves plain ``nvidia.com/gpu`` requests through
    its ``extendedResourceName``), or ``both`` (each node serves ``gpus`` each way;
    the class then maps no extended resource: the device plugin serves it).
    """

    def __init__(
        self,
        cluster: LocalCluster,
        count: int,
        *,
        gpus: int = 2,
        pieces: Path | None = None,
        gpus_by: str = "device-plugin",
    ) -> None:
        if count < 1:
            raise ClusterError(f"real nodes: count must be at least 1, not {count}")
        if gpus_by not in GPUS_BY:
            raise ClusterError(f"real nodes: gpus_by is one of {', '.join(GPUS_BY)}, not {gpus_by}")
        if not cluster.kubelet_access:
            raise ClusterError("real nodes need LocalCluster(..., kubelet_access=True)")
        self.cluster = cluster
        self.count = count
        self.gpus = gpus
        self.pieces = pieces
        self.device_plugin = gpus_by in ("device-plugin", "both")
        self.dra = gpus_by in ("dra", "both")
        self.manifest_path = cluster.workdir / MANIFEST
        self.layout: plan.Layout | None = None
        #: seconds per phase of start(): build, host, dns, nodes (containerd + images +
        #: kubelet), ready, total
        self.timings: dict[str, float] = {}
        self._procs: list[ManagedProcess] = []

    @property
    def names(self) -> list[str]:
        return [n.name for n in self.layout.nodes] if self.layout else []

    def _bin(self, name: str) -> str:
        assert self.pieces is not None
        return str(self.pieces / "bin" / name)

    # ------------------------------------------------------------------ start

    def start(self, timeout: float = READY_TIMEOUT_SECONDS) -> list[str]:
        """Start every node and wait until each is Ready with its GPUs allocatable."""
        reason = cannot_run_containers()
        if reason:
            raise ClusterError(reason)
        t0 = time.monotonic()
        self.pieces = self.pieces or ensure_node_pieces(dra=self.dra)
        self.timings["build"] = time.monotonic() - t0
        try:
            self._start(timeout, t0)
        except BaseException:
            self.stop()
            raise
        return self.names

    def _start(self, timeout: float, t0: float) -> None:
        t = time.monotonic()
        workdir = self.cluster.workdir
        # What an earlier run in this workdir left (its supervisor killed) goes first.
        teardown_workdir(workdir)
        slot = nodehost.claim_slot(workdir)
        run_dir = nodehost.slot_dir(slot)
        layout = plan.plan_layout(
            slot, self.count, gpus=self.gpus, node_dir=workdir / "real-nodes", run_dir=run_dir
        )
        self.layout = layout
        # Recorded before anything is created: teardown works from this file alone.
        nodehost.Manifest(
            slot=slot,
            run_dir=str(run_dir),
            node_dirs=[str(n.dir) for n in layout.nodes],
            addresses=list(layout.host_addresses),
            bridges=[n.bridge for n in layout.nodes],
            cgroup_roots=[n.cgroup_root for n in layout.nodes],
            containerd_sockets=[str(n.containerd_socket) for n in layout.nodes],
        ).save(self.manifest_path)
        nodehost.add_lo_addresses(layout.host_addresses)
        nodehost.enable_forwarding()
        for node in layout.nodes:
            nodehost.make_cgroup_root(node.cgroup_root)
        self.timings["host"] = time.monotonic() - t

        t = time.monotonic()
        shared = workdir / "real-nodes"
        shared.mkdir(parents=True, exist_ok=True)
        resolv = shared / "resolv.conf"
        resolv.write_text(f"nameserver {layout.dns_ip}\n")
        corefile = shared / "Corefile"
        corefile.write_text(plan.corefile(layout.dns_ip, self.cluster.kubeconfig))
        self._procs.append(
            self.cluster.start_process("coredns", [self._bin("coredns"), "-conf", str(corefile)])
        )
        self.timings["dns"] = time.monotonic() - t

        t = time.monotonic()
        with ThreadPoolExecutor(max_workers=len(layout.nodes)) as pool:
            for future in [pool.submit(self._start_node, n, resolv) for n in layout.nodes]:
                future.result()
        if self.dra:
            self._apply_device_class()
        self.timings["nodes"] = time.monotonic() - t

        t = time.monotonic()
        self._wait_ready(time.monotonic() + timeout)
        self.timings["ready"] = time.monotonic() - t
        self.timings["total"] = time.monotonic() - t0

    def _start_node(self, node: plan.NodePlan, resolv: Path) -> None:
        for d in (node.dir, node.run_dir, node.kubelet_root, node.cdi_dir):
            d.mkdir(parents=True, exist_ok=True)
        cni_dir = node.dir / "cni"
        cni_dir.mkdir(exist_ok=True)
        (cni_dir / "10-gang.conflist").write_text(plan.cni_conflist_text(node))
        config = node.dir / "containerd.toml"
        config.write_text(plan.containerd_config(node, cni_dir))
        path = f"{self.pieces}/bin:{os.environ.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}"
        containerd = self.cluster.start_process(
            f"{node.name}-containerd",
            [self._bin("containerd"), "--config", str(config)],
            env={"PATH": path},
        )
        self._procs.append(containerd)
        ctr = [self._bin("ctr"), "--address", str(node.containerd_socket), "--namespace", "k8s.io"]
        self._await(
            f"{node.name}: containerd answering on {node.containerd_socket}",
            [containerd],
            lambda: nodehost.succeeds([*ctr, "version"], timeout=10),
            time.monotonic() + 60,
        )
        assert self.pieces is not None
        for archive, base in IMAGES.items():
            nodehost.run(
                [
                    *ctr,
                    "images",
                    "import",
                    "--base-name",
                    base,
                    str(self.pieces / "images" / archive),
                ],
                timeout=300,
            )
        kubeconfig = self.cluster.client_kubeconfig(
            f"kubelet-{node.name}", f"system:node:{node.name}", ["system:nodes"]
        )
        kubelet_config = node.dir / "kubelet.yaml"
        kubelet_config.write_text(
            plan.kubelet_config_text(
                node, client_ca=self.cluster.ca_cert, resolv_conf=resolv, dns_ip=self.layout_dns
            )
        )
        kubelet = self.cluster.start_process(
            f"{node.name}-kubelet",
            plan.kubelet_argv(
                Path(self._bin("kubelet")), node, config=kubelet_config, kubeconfig=kubeconfig
            ),
            env={"PATH": path},
        )
        self._procs.append(kubelet)
        if self.device_plugin:
            self._procs.append(
                self.cluster.start_process(
                    f"{node.name}-fake-gpu-plugin",
                    [
                        self._bin("fake-gpu-plugin"),
                        f"--registry-dir={node.plugin_registry_dir}",
                        f"--count={node.gpus}",
                        f"--resource={GPU_RESOURCE}",
                    ],
                )
            )
        if self.dra:
            # As the node: its kubeconfig is the kubelet's (the Node authorizer's rules).
            argv = plan.dra_driver_argv(
                Path(self._bin(DRA_DRIVER_BINARY)), node, kubeconfig=kubeconfig
            )
            # It makes neither its own dir in the plugins dir (its socket) nor the
            # registry dir (kubelet does, maybe later; it finds sockets already there).
            (node.plugins_dir / plan.DRA_DRIVER).mkdir(parents=True, exist_ok=True)
            node.plugin_registry_dir.mkdir(parents=True, exist_ok=True)
            self._procs.append(self.cluster.start_process(f"{node.name}-dra-driver", argv))

    def _apply_device_class(self) -> None:
        """Create (or replace) the DeviceClass of the DRA devices."""
        body = plan.dra_device_class(None if self.device_plugin else GPU_RESOURCE)
        path = path_of(*_DEVICE_CLASSES)
        with self.cluster.api_client() as api:
            raw = RawApi(api)
            try:
                raw.call("POST", path, body=body)
            except KubeError as err:
                if err.status != 409:
                    raise
                # Left by an earlier run on this cluster's etcd: replace its spec.
                old = raw.call("GET", path_of(*_DEVICE_CLASSES, plan.DRA_DEVICE_CLASS))
                body["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
                raw.call("PUT", path_of(*_DEVICE_CLASSES, plan.DRA_DEVICE_CLASS), body=body)

    @property
    def layout_dns(self) -> str:
        assert self.layout is not None
        return self.layout.dns_ip

    def _await(
        self, what: str, procs: list[ManagedProcess], check: Callable[[], bool], deadline: float
    ) -> None:
        def exited(proc: ManagedProcess) -> ClusterError:
            return ClusterError(
                f"{what}: {proc.name} exited with {proc.returncode}; see {proc.log_path}"
            )

        wait_for(what, deadline, procs, check, exited=exited, poll_seconds=0.2)

    def _wait_ready(self, deadline: float) -> None:
        assert self.layout is not None
        pending = {n.name: n.gpus for n in self.layout.nodes}
        with self.cluster.api_client() as api:
            raw = RawApi(api)

            def ready() -> bool:
                nodes = raw.call(
                    "GET", "/api/v1/nodes", query={"labelSelector": f"{plan.NODE_LABEL}=true"}
                )["items"]
                published: dict[str, int] = {}
                if self.dra:
                    slices = raw.call("GET", "/apis/resource.k8s.io/v1/resourceslices")["items"]
                    published = dra_devices_per_node(slices)
                for node in nodes:
                    name = node["metadata"]["name"]
                    if name not in pending:
                        continue
                    plugin_gpus = pending[name] if self.device_plugin else 0
                    if node_usable(node, plugin_gpus) and (
                        not self.dra or published.get(name) == pending[name]
                    ):
                        del pending[name]
                return not pending

            served = " and ".join(
                w
                for w, on in (
                    ("allocatable", self.device_plugin),
                    (f"in ResourceSlices of {plan.DRA_DRIVER}", self.dra),
                )
                if on
            )
            self._await(
                f"real nodes Ready with their GPUs {served} (waiting: {', '.join(pending)})",
                list(self._procs),
                ready,
                deadline,
            )

    # ------------------------------------------------------------------ stop

    def stop(self) -> None:
        """Stop every node and remove all it put on the host. Idempotent."""
        deadline = time.monotonic() + _STOP_GRACE_SECONDS
        # kubelet first, or it would start again what crictl removes.
        for proc in self._procs:
            if proc.name.endswith(_NODE_AGENTS):
                proc.terminate()
        for proc in self._procs:
            if proc.name.endswith(_NODE_AGENTS):
                proc.finish(deadline)
        manifest = nodehost.Manifest.load(self.manifest_path)
        if manifest is not None and self.pieces is not None:
            for socket in manifest.containerd_sockets:
                if not Path(socket).exists():
                    continue
                # Stops each pod sandbox through CRI, so CNI releases its address and veth.
                nodehost.run(
                    [
                        self._bin("crictl"),
                        "--runtime-endpoint",
                        f"unix://{socket}",
                        "--timeout",
                        "30s",
                        "rmp",
                        "--all",
                        "--force",
                    ],
                    check=False,
                    timeout=90,
                )
        for proc in self._procs:
            proc.terminate()
        for proc in self._procs:
            proc.finish(time.monotonic() + _STOP_GRACE_SECONDS)
        self._procs.clear()
        teardown_workdir(self.cluster.workdir)


def teardown_workdir(cluster_workdir: Path) -> bool:
    """Remove what the real nodes of the cluster in ``cluster_workdir`` left on the host.

    For `dev down` after a supervisor that died without cleaning up. True if a
    manifest was found (and acted on).
    """
    path = cluster_workdir / MANIFEST
    manifest = nodehost.Manifest.load(path)
    if manifest is None:
        return False
    nodehost.teardown(manifest)
    path.unlink(missing_ok=True)
    return True


if __name__ == "__main__":
    # `python -m extender.devcluster.realnode --can-run`: exit 0 when this machine
    # can run real nodes, else print why and exit 1 (the Makefile's test-real).
    if sys.argv[1:] != ["--can-run"]:
        sys.exit("usage: python -m extender.devcluster.realnode --can-run")
    why = cannot_run_containers()
    if why:
        print(f"real nodes cannot run here: {why}", file=sys.stderr)
    sys.exit(1 if why else 0)
