"""The command line of each control-plane component `LocalCluster` runs, on loopback.

`ControlPlaneCommands` holds what the command lines depend on (binaries, work
directory, the ports picked at start, the cluster's PKI, feature gates), writes
the files they name (serving certs, kubeconfigs) and gives etcd's,
kube-apiserver's, kube-controller-manager's, kube-scheduler's and kwok's argv;
devcluster/cluster.py starts, waits for and stops the processes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from extender.devcluster.loopback import write_kubeconfig
from extender.devcluster.pki import ClusterPKI, issue_cert

SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"
POD_CIDR = "10.244.0.1/16"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc"
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_NODE_ANNOTATION_VALUE = "fake"


def component_kubeconfig(workdir: Path, name: str) -> Path:
    """The kubeconfig of kube-controller-manager or kube-scheduler (its own client cert)."""
    return workdir / "kubeconfigs" / name


@dataclass(frozen=True)
class ControlPlaneCommands:
    """Each component's argv; `pki` and the ports are those of the current start."""

    bin_dir: Path
    workdir: Path
    ports: Mapping[str, int]
    pki: ClusterPKI | None
    feature_gates: Mapping[str, Mapping[str, bool]]
    runtime_config: tuple[str, ...] = ()
    kubelet_access: bool = False

    @property
    def pki_dir(self) -> Path:
        return self.workdir / "pki"

    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "kubeconfig"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports['kube-apiserver']}"

    def write_files(self) -> None:
        """The files the command lines name: serving certs, client cert, kubeconfigs."""
        p = self.pki
        assert p is not None
        # Always issued afresh: a workdir reused by a new LocalCluster has a new CA,
        # and a serving cert left from the old one would fail verification.
        for name in ("kube-controller-manager", "kube-scheduler"):
            issue_cert(
                p.ca,
                self.pki_dir,
                f"{name}-serving",
                common_name=name,
                sans=["127.0.0.1", "localhost"],
                server=True,
            )
        if self.kubelet_access:
            issue_cert(
                p.ca,
                self.pki_dir,
                "apiserver-kubelet-client",
                common_name="kube-apiserver-kubelet-client",
                organizations=["system:masters"],
                client=True,
            )
        ca_cert = self.pki_dir / "ca.crt"
        write_kubeconfig(self.kubeconfig, self.server, ca_cert, p.admin)
        for name, client in (
            ("kube-controller-manager", p.controller_manager),
            ("kube-scheduler", p.scheduler),
        ):
            write_kubeconfig(
                component_kubeconfig(self.workdir, name),
                self.server,
                ca_cert,
                client,
                user=f"system:{name}",
            )

    def _bin(self, name: str) -> str:
        return str(self.bin_dir / name)

    def etcd(self, data_dir: Path) -> list[str]:
        client = f"http://127.0.0.1:{self.ports['etcd']}"
        peer = f"http://127.0.0.1:{self.ports['etcd-peer']}"
        return [
            self._bin("etcd"),
            "--name=default",
            f"--data-dir={data_dir}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=default={peer}",
            "--initial-cluster-state=new",
            "--unsafe-no-fsync",
            "--log-level=warn",
        ]

    def apiserver(self) -> list[str]:
        p = self.pki
        assert p is not None
        return [
            self._bin("kube-apiserver"),
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self.ports['kube-apiserver']}",
            f"--etcd-servers=http://127.0.0.1:{self.ports['etcd']}",
            f"--cert-dir={self.workdir / 'apiserver-certs'}",
            f"--tls-cert-file={p.apiserver.cert}",
            f"--tls-private-key-file={p.apiserver.key}",
            f"--client-ca-file={p.ca.cert}",
            f"--service-account-key-file={p.sa_public_key}",
            f"--service-account-signing-key-file={p.sa_private_key}",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            f"--api-audiences={SERVICE_ACCOUNT_ISSUER}",
            "--authorization-mode=Node,RBAC",
            f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
            # Endpoint validation rejects loopback addresses for the "kubernetes" service.
            "--endpoint-reconciler-type=none",
            "--allow-privileged=true",
            "--profiling=false",
            *self.kubelet_access_flags(),
            *self.gate_flags("kube-apiserver"),
            *([f"--runtime-config={','.join(self.runtime_config)}"] if self.runtime_config else []),
        ]

    def kubelet_access_flags(self) -> list[str]:
        if not self.kubelet_access:
            return []
        # A real node's name does not resolve here: reach its kubelet by InternalIP.
        return [
            "--kubelet-preferred-address-types=InternalIP,Hostname",
            f"--kubelet-client-certificate={self.pki_dir / 'apiserver-kubelet-client.crt'}",
            f"--kubelet-client-key={self.pki_dir / 'apiserver-kubelet-client.key'}",
        ]

    def gate_flags(self, component: str) -> list[str]:
        gates = self.feature_gates.get(component)
        if not gates:
            return []
        listed = ",".join(f"{name}={str(on).lower()}" for name, on in sorted(gates.items()))
        return [f"--feature-gates={listed}"]

    def _served_component(self, name: str) -> list[str]:
        """The binary, its kubeconfig and its HTTPS health port (its serving cert, our CA)."""
        p = self.pki
        assert p is not None
        kubeconfig = component_kubeconfig(self.workdir, name)
        return [
            self._bin(name),
            f"--kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={self.ports[name]}",
            f"--tls-cert-file={self.pki_dir / f'{name}-serving.crt'}",
            f"--tls-private-key-file={self.pki_dir / f'{name}-serving.key'}",
            f"--client-ca-file={p.ca.cert}",
        ]

    def controller_manager(self) -> list[str]:
        p = self.pki
        assert p is not None
        return [
            *self._served_component("kube-controller-manager"),
            f"--service-account-private-key-file={p.sa_private_key}",
            f"--root-ca-file={p.ca.cert}",
            f"--cluster-signing-cert-file={p.ca.cert}",
            f"--cluster-signing-key-file={p.ca.key}",
            "--use-service-account-credentials=true",
            "--leader-elect=false",
            # The default 20 qps makes controller start-up and pod churn visibly slower.
            "--kube-api-qps=200",
            "--kube-api-burst=400",
            "--controllers=*",
            f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
            "--profiling=false",
            *self.gate_flags("kube-controller-manager"),
        ]

    def scheduler(self) -> list[str]:
        return [
            *self._served_component("kube-scheduler"),
            "--leader-elect=false",
            "--profiling=false",
            "--v=2",
            *self.gate_flags("kube-scheduler"),
        ]

    def kwok(self) -> list[str]:
        return [
            self._bin("kwok"),
            f"--kubeconfig={self.kubeconfig}",
            "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}={KWOK_NODE_ANNOTATION_VALUE}",
            f"--server-address=127.0.0.1:{self.ports['kwok']}",
            "--node-ip=127.0.0.1",
            f"--cidr={POD_CIDR}",
        ]
