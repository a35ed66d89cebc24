"""What a local real node is made of, as data: addresses, names and config files.

Pure: no I/O. :mod:`extender.devcluster.realnode` writes these files and runs
the processes. Each cluster that runs real nodes takes a *slot* (0-31) so
that two of them on one host (a `dev up` beside a test session) never share
an address, a bridge, a cgroup or a subnet:

    node IP      10.250.<slot>.<10 + i>/32 on lo   (kubelet refuses loopback IPs)
    DNS          10.250.<slot>.2/32 on lo          (CoreDNS, every pod's nameserver)
    pod subnet   10.251.<slot * 8 + i>.0/24        (bridge gx<slot>n<i>, gateway .1)
    cgroup root  /gang-extender-s<slot>n<i>         (each kubelet its own kubepods tree)
    CDI specs    <run dir>/cdi                      (containerd's only CDI spec dir)

Everything is routed on this host between the bridges and the lo addresses;
nothing is masqueraded, and the FORWARD chain drops what would leave them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

MAX_SLOTS = 32
MAX_NODES_PER_SLOT = 8
KUBELET_PORT = 10250
KUBELET_HEALTHZ_PORT = 10248
CLUSTER_DOMAIN = "cluster.local"
SANDBOX_IMAGE = "registry.k8s.io/pause:3.10"
#: The image the seed jobs run on real nodes: sshd, mpirun, mpi4py (hack/build-node.sh).
JOB_IMAGE = "localhost/gang-mpi:bookworm"
CNI_BIN_DIR = "/usr/lib/cni"
RUNC = "/usr/sbin/runc"
#: The FORWARD chain that keeps pod traffic between our bridges (one per host).
FORWARD_CHAIN = "GANG-REAL-NODES"
BRIDGE_PREFIX = "gx"
NODE_LABEL = "gang-extender.io/real-node"
#: The DRA kubelet plugin's driver name on real nodes served by DRA: the kubernetes
#: e2e test driver (hack/build-node.sh) under this name, one pool per node.
DRA_DRIVER = "gpu.example.com"
#: The DeviceClass that selects the driver's devices (docs/dra.md).
DRA_DEVICE_CLASS = "gpu.example.com"
#: How often kubelet re-syncs a pod, and so refreshes its ConfigMap and Secret
#: volumes (hostfile, ready.hostfile): 1 minute by default.
KUBELET_SYNC_SECONDS = 5


class PlanError(ValueError):
    """A real-node layout that cannot be laid out (too many nodes, bad slot)."""


@dataclass(frozen=True)
class NodePlan:
    """One real node: its name, addresses and directories."""

    name: str
    slot: int
    index: int
    gpus: int
    #: state that survives nothing: logs, kubelet root, containerd root
    dir: Path
    #: sockets and runtime state (short paths: a unix socket path has 108 bytes)
    run_dir: Path

    @property
    def node_ip(self) -> str:
        return f"10.250.{self.slot}.{10 + self.index}"

    @property
    def subnet_octet(self) -> int:
        return self.slot * MAX_NODES_PER_SLOT + self.index

    @property
    def pod_cidr(self) -> str:
        return f"10.251.{self.subnet_octet}.0/24"

    @property
    def gateway(self) -> str:
        return f"10.251.{self.subnet_octet}.1"

    @property
    def bridge(self) -> str:
        return f"{BRIDGE_PREFIX}{self.slot}n{self.index}"

    @property
    def network_name(self) -> str:
        return f"gang-s{self.slot}n{self.index}"

    @property
    def cgroup_root(self) -> str:
        return f"/gang-extender-s{self.slot}n{self.index}"

    @property
    def containerd_socket(self) -> Path:
        return self.run_dir / "containerd.sock"

    @property
    def kubelet_root(self) -> Path:
        """Under run_dir: kubelet makes unix sockets inside (pod-resources, the plugin
        registry), and a workdir deep in a test's tmp dir made them too long to bind."""
        return self.run_dir / "kubelet"

    @property
    def plugin_registry_dir(self) -> Path:
        """Where kubelet's plugin watcher finds device plugins (under its --root-dir;
        its kubelet.sock for device plugins has a fixed path shared by every kubelet)."""
        return self.kubelet_root / "plugins_registry"

    @property
    def plugins_dir(self) -> Path:
        """Where a DRA kubelet plugin puts its own socket (``<dir>/<driver>/dra.sock``)."""
        return self.kubelet_root / "plugins"

    @property
    def cdi_dir(self) -> Path:
        """The node's CDI spec dir: its DRA plugin writes there, its containerd reads only
        there (not the host's /etc/cdi and /var/run/cdi, which every node would share)."""
        return self.run_dir / "cdi"


@dataclass(frozen=True)
class Layout:
    """Every real node of one cluster, and what they share."""

    slot: int
    nodes: tuple[NodePlan, ...]

    @property
    def dns_ip(self) -> str:
        return f"10.250.{self.slot}.2"

    @property
    def host_addresses(self) -> tuple[str, ...]:
        """The /32 addresses this layout puts on lo."""
        return (self.dns_ip, *(n.node_ip for n in self.nodes))


def plan_layout(
    slot: int, count: int, *, gpus: int, node_dir: Path, run_dir: Path, prefix: str = "real-node"
) -> Layout:
    """The layout of ``count`` nodes in ``slot``; directories under ``node_dir``/``run_dir``."""
    if not 0 <= slot < MAX_SLOTS:
        raise PlanError(f"slot {slot} is outside 0-{MAX_SLOTS - 1}")
    if not 1 <= count <= MAX_NODES_PER_SLOT:
        raise PlanError(f"--real-nodes takes 1 to {MAX_NODES_PER_SLOT} nodes, not {count}")
    if gpus < 0:
        raise PlanError(f"a node cannot have {gpus} GPUs")
    nodes = tuple(
        NodePlan(
            name=f"{prefix}-{i}",
            slot=slot,
            index=i,
            gpus=gpus,
            dir=node_dir / f"{prefix}-{i}",
            run_dir=run_dir / f"n{i}",
        )
        for i in range(count)
    )
    return Layout(slot=slot, nodes=nodes)


def containerd_config(node: NodePlan, cni_conf_dir: Path) -> str:
    """containerd v2's config (version 3) for one node: its own root, state and socket.

    ``restrict_oom_score_adj``: without CAP_SYS_RESOURCE runc cannot lower a
    container's OOM score and fails with "can't get final child's PID from pipe".
    """
    toml_path = json.dumps  # TOML basic strings are JSON strings for paths
    return "\n".join(
        [
            "version = 3",
            f"root = {toml_path(str(node.dir / 'containerd'))}",
            f"state = {toml_path(str(node.run_dir / 'state'))}",
            "disabled_plugins = ["
            "'io.containerd.nri.v1.nri', 'io.containerd.snapshotter.v1.btrfs', "
            "'io.containerd.snapshotter.v1.zfs', 'io.containerd.snapshotter.v1.devmapper', "
            "'io.containerd.internal.v1.opt', 'io.containerd.tracing.processor.v1.otlp']",
            "",
            "[grpc]",
            f"  address = {toml_path(str(node.containerd_socket))}",
            "[ttrpc]",
            f"  address = {toml_path(str(node.containerd_socket) + '.ttrpc')}",
            "",
            "[plugins.'io.containerd.cri.v1.runtime']",
            "  restrict_oom_score_adj = true",
            "  netns_mounts_under_state_dir = true",
            "  enable_cdi = true",
            f"  cdi_spec_dirs = [{toml_path(str(node.cdi_dir))}]",
            "  [plugins.'io.containerd.cri.v1.runtime'.cni]",
            f"    bin_dirs = [{toml_path(CNI_BIN_DIR)}]",
            f"    conf_dir = {toml_path(str(cni_conf_dir))}",
            "    max_conf_num = 1",
            "  [plugins.'io.containerd.cri.v1.runtime'.containerd]",
            "    default_runtime_name = 'runc'",
            "    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]",
            "      runtime_type = 'io.containerd.runc.v2'",
            "      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]",
            f"        BinaryName = {toml_path(RUNC)}",
            "        SystemdCgroup = false",
            "",
            "[plugins.'io.containerd.cri.v1.images'.pinned_images]",
            f"  sandbox = {toml_path(SANDBOX_IMAGE)}",
            "",
        ]
    )


def cni_conflist(node: NodePlan) -> dict[str, Any]:
    """A bridge + host-local network: the node's own bridge and /24, no masquerade."""
    return {
        "cniVersion": "1.0.0",
        "name": node.network_name,
        "plugins": [
            {
                "type": "bridge",
                "bridge": node.bridge,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": node.pod_cidr, "gateway": node.gateway}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(node.dir / "cni-ipam"),
                },
            }
        ],
    }


def kubelet_config(
    node: NodePlan, *, client_ca: Path, resolv_conf: Path, dns_ip: str
) -> dict[str, Any]:
    """The KubeletConfiguration of one node (cgroup v1, no systemd, no CAP_SYS_RESOURCE)."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "cgroupDriver": "cgroupfs",
        "failCgroupV1": False,
        "cgroupRoot": node.cgroup_root,
        "containerRuntimeEndpoint": f"unix://{node.containerd_socket}",
        "address": node.node_ip,
        "port": KUBELET_PORT,
        "healthzBindAddress": node.node_ip,
        "healthzPort": KUBELET_HEALTHZ_PORT,
        "readOnlyPort": 0,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(client_ca)},
        },
        "authorization": {"mode": "Webhook"},
        "failSwapOn": False,
        "resolvConf": str(resolv_conf),
        "clusterDNS": [dns_ip],
        "clusterDomain": CLUSTER_DOMAIN,
        # Guaranteed pods would ask for -997; containerd clamps it, kubelet must not try.
        "oomScoreAdj": 0,
        "podLogsDir": str(node.dir / "pod-logs"),
        # Else kubelet adds KUBE-FIREWALL, dropping traffic from non-127 sources to 127/8.
        "makeIPTablesUtilChains": False,
        "syncFrequency": f"{KUBELET_SYNC_SECONDS}s",
        "serializeImagePulls": False,
        # A dev VM's disk is whatever it is: evict only when it is really full.
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
        },
        "imageGCHighThresholdPercent": 99,
        "imageGCLowThresholdPercent": 98,
        "staticPodPath": "",
    }


def kubelet_argv(kubelet: Path, node: NodePlan, *, config: Path, kubeconfig: Path) -> list[str]:
    return [
        str(kubelet),
        f"--config={config}",
        f"--kubeconfig={kubeconfig}",
        f"--hostname-override={node.name}",
        f"--node-ip={node.node_ip}",
        f"--root-dir={node.kubelet_root}",
        f"--cert-dir={node.dir / 'kubelet-pki'}",
        f"--node-labels={NODE_LABEL}=true",
        "--v=1",
    ]


def dra_driver_argv(driver: Path, node: NodePlan, *, kubeconfig: Path) -> list[str]:
    """The kubernetes e2e DRA test driver as one node's kubelet plugin.

    It publishes ``node.gpus`` devices (``device-00``...) in a ResourceSlice of pool
    ``node.name`` and prepares a claim by writing a CDI spec that sets
    ``claim_<claim>_<request>=true`` in the container. It talks to the API server as
    the node (the Node authorizer lets a node write its own slices and read the
    claims of its pods).
    """
    return [
        str(driver),
        f"--kubeconfig={kubeconfig}",
        f"--drivername={DRA_DRIVER}",
        "--v=1",
        "kubelet-plugin",
        f"--node-name={node.name}",
        f"--num-devices={node.gpus}",
        f"--plugin-registration-path={node.plugin_registry_dir}",
        f"--datadir={node.plugins_dir}",
        f"--cdi-dir={node.cdi_dir}",
    ]


def dra_device_class(extended_resource: str | None) -> dict[str, Any]:
    """The DeviceClass of the real nodes' DRA devices; with ``extended_resource`` (on
    nodes that do not advertise it) a plain request of that resource is served by it."""
    spec: dict[str, Any] = {
        "selectors": [{"cel": {"expression": f'device.driver == "{DRA_DRIVER}"'}}]
    }
    if extended_resource:
        spec["extendedResourceName"] = extended_resource
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": DRA_DEVICE_CLASS},
        "spec": spec,
    }


def corefile(dns_ip: str, kubeconfig: Path) -> str:
    """CoreDNS answering `<pod>.<group>.<ns>.svc.cluster.local` from the API server.

    No cache (members must resolve as soon as they exist) and no forwarder:
    nothing outside this machine is reachable, so other names fail fast.
    """
    return "\n".join(
        [
            ".:53 {",
            f"    bind {dns_ip}",
            "    errors",
            f"    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{",
            f"        kubeconfig {kubeconfig}",
            "        pods insecure",
            "    }",
            "}",
            "",
        ]
    )


def cni_conflist_text(node: NodePlan) -> str:
    return json.dumps(cni_conflist(node), indent=2) + "\n"


def kubelet_config_text(node: NodePlan, **kwargs: Any) -> str:
    return yaml.safe_dump(kubelet_config(node, **kwargs), sort_keys=False)
