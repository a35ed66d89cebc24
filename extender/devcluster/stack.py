"""The gang-extender stack on a LocalCluster: CRDs, the service, the webhook, the gang scheduler.

Shared by `gang-extender dev up`, the e2e fixtures and the benchmarks, so all
three run the product the same way: the service as its own process
(`python -m extender serve`), and the stock kube-scheduler binary with
deploy/scheduler/scheduler-config.yaml rewritten only for loopback addresses.
"""

from __future__ import annotations

import base64
import copy
import os
import shutil
import ssl
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from extender.devcluster.cluster import ClusterError, LocalCluster, free_port
from extender.devcluster.process import ManagedProcess
from extender.kube.rawapi import KubeError, RawApi, path_of

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
CRD_FILES = [DEPLOY / "crds" / "podgroups.scheduling.gang-extender.io.yaml"]
COSCHEDULING_CRD = DEPLOY / "crds" / "optional" / "podgroups.scheduling.x-k8s.io.yaml"
SCHEDULER_CONFIG = DEPLOY / "scheduler" / "scheduler-config.yaml"
WEBHOOK_CONFIG = DEPLOY / "webhook.yaml"
SYSTEM_NAMESPACE = "gang-system"
# ConfigMap in SYSTEM_NAMESPACE where the service publishes its CA (extender.kube.ca_publish).
PUBLISHED_CA_CONFIGMAP = "gang-extender-ca"
# Secret in SYSTEM_NAMESPACE where the service issues kube-scheduler's client certificate
# (extender.kube.ca_publish.publish_client_cert); deploy/scheduler mounts it.
SCHEDULER_CLIENT_SECRET = "gang-extender-scheduler-client"


def apply_object(raw: RawApi, obj: dict[str, Any]) -> None:
    """Create or replace one cluster-scoped or namespaced object from a manifest."""
    api_version, kind = obj["apiVersion"], obj["kind"]
    plural = {
        "CustomResourceDefinition": "customresourcedefinitions",
        "MutatingWebhookConfiguration": "mutatingwebhookconfigurations",
        "Namespace": "namespaces",
    }[kind]
    prefix = ["api", api_version] if "/" not in api_version else ["apis", *api_version.split("/")]
    collection = path_of(*prefix, plural)
    name = obj["metadata"]["name"]
    try:
        current = raw.call("GET", f"{collection}/{name}")
    except KubeError as err:
        if err.status != 404:
            raise
        raw.call("POST", collection, body=obj)
        return
    updated = copy.deepcopy(obj)
    updated["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
    raw.call("PUT", f"{collection}/{name}", body=updated)


def wait_crd_established(raw: RawApi, name: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        crd = raw.call(
            "GET", path_of("apis", "apiextensions.k8s.io", "v1", "customresourcedefinitions", name)
        )
        conditions = (crd.get("status") or {}).get("conditions") or []
        if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
            return
        time.sleep(0.2)
    raise ClusterError(f"CRD {name} not established after {timeout}s")


def load_yaml_documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


@dataclass
class ServiceReplica:
    """One `gang-extender serve --leader-elect` process of a replicated stack."""

    name: str
    extender_port: int
    webhook_port: int
    metrics_port: int
    tls_dir: Path
    process: ManagedProcess | None = None

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}"

    def readyz(self, timeout: float = 2) -> tuple[int, str]:
        """(HTTP status, body) of /readyz; (0, why) when nothing answers."""
        try:
            with urllib.request.urlopen(f"{self.metrics_url}/readyz", timeout=timeout) as resp:
                return int(resp.status), resp.read().decode()
        except urllib.error.HTTPError as err:
            return int(err.code), err.read().decode()
        except OSError as err:
            return 0, str(err)

    def metrics_text(self) -> str:
        with urllib.request.urlopen(f"{self.metrics_url}/metrics", timeout=5) as resp:
            return str(resp.read().decode())


class GangStack:
    """The product running against a LocalCluster."""

    def __init__(
        self,
        cluster: LocalCluster,
        *,
        policy: Path | None = None,
        env: dict[str, str] | None = None,
        with_coscheduling_crd: bool = True,
        scheduler_verbosity: int = 2,
    ) -> None:
        self.cluster = cluster
        # 3 or more logs every attempt and refusal (bench/timeline.py reads them).
        self.scheduler_verbosity = scheduler_verbosity
        self.policy = policy
        self.env = dict(env or {})
        self.with_coscheduling_crd = with_coscheduling_crd
        self.workdir = cluster.workdir / "gang"
        self.tls_dir = self.workdir / "tls"
        self.extender_port = free_port()
        self.webhook_port = free_port()
        self.metrics_port = free_port()
        self.service: ManagedProcess | None = None
        self.scheduler: ManagedProcess | None = None
        self.replicas: list[ServiceReplica] = []
        self.raw = RawApi(cluster.api_client())

    # ---- URLs ----
    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}"

    @property
    def extender_url(self) -> str:
        return f"https://127.0.0.1:{self.extender_port}"

    @property
    def ca_path(self) -> Path:
        return self.tls_dir / "ca.crt"

    @property
    def client_cert_path(self) -> Path:
        """kube-scheduler's client certificate (tlsConfig.certFile), from its Secret."""
        return self.workdir / "scheduler-client" / "tls.crt"

    @property
    def client_key_path(self) -> Path:
        return self.workdir / "scheduler-client" / "tls.key"

    def fetch_client_cert(self) -> None:
        """Write the Secret the service issued kube-scheduler's certificate into, as the
        kubelet mounts it in deploy/scheduler (key file 0600)."""
        path = path_of(
            "api", "v1", "namespaces", SYSTEM_NAMESPACE, "secrets", SCHEDULER_CLIENT_SECRET
        )
        data = self.raw.call("GET", path)["data"]
        self.client_cert_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.client_cert_path.write_bytes(base64.b64decode(data["tls.crt"]))
        self.client_key_path.touch(mode=0o600)
        self.client_key_path.write_bytes(base64.b64decode(data["tls.key"]))

    # ---- lifecycle ----
    def start(self, timeout: float = 90) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.install_crds()
        apply_object(
            self.raw,
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SYSTEM_NAMESPACE}},
        )
        self.install_webhook_config()
        self.start_service(timeout=timeout)
        self.fetch_client_cert()
        self.start_scheduler(timeout=timeout)

    def install_crds(self) -> None:
        files = list(CRD_FILES)
        if self.with_coscheduling_crd and COSCHEDULING_CRD.exists():
            files.append(COSCHEDULING_CRD)
        for path in files:
            for doc in load_yaml_documents(path):
                apply_object(self.raw, doc)
                wait_crd_established(self.raw, doc["metadata"]["name"])

    def install_webhook_config(self) -> None:
        """deploy/webhook.yaml, pointed at the loopback service (the service fills caBundle)."""
        for doc in load_yaml_documents(WEBHOOK_CONFIG):
            if doc.get("kind") != "MutatingWebhookConfiguration":
                continue
            for hook in doc.get("webhooks", []):
                path = (hook["clientConfig"].get("service") or {}).get("path", "/mutate")
                hook["clientConfig"] = {"url": f"https://127.0.0.1:{self.webhook_port}{path}"}
            apply_object(self.raw, doc)

    def service_argv(self) -> list[str]:
        argv = [
            sys.executable,
            "-m",
            "extender",
            "serve",
            "--kubeconfig",
            str(self.cluster.kubeconfig),
            "--bind-address",
            "127.0.0.1",
            "--extender-port",
            str(self.extender_port),
            "--webhook-port",
            str(self.webhook_port),
            "--metrics-port",
            str(self.metrics_port),
            "--tls-dir",
            str(self.tls_dir),
        ]
        if self.policy is not None:
            argv += ["--policy", str(self.policy)]
        return argv

    def start_service(self, timeout: float = 90, name: str = "gang-extender") -> ManagedProcess:
        env = {"PYTHONUNBUFFERED": "1", **self.env}
        self.service = self.cluster.start_process(name, self.service_argv(), env=env)
        self.wait_ready(self.service, timeout)
        return self.service

    def wait_ready(self, proc: ManagedProcess, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not proc.alive():
                raise ClusterError(
                    f"gang-extender exited during start-up:\n{self.cluster.tail_logs()}"
                )
            try:
                with urllib.request.urlopen(f"{self.metrics_url}/readyz", timeout=2) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise ClusterError(f"gang-extender not ready after {timeout}s:\n{self.cluster.tail_logs()}")

    def scheduler_config(self) -> Path:
        config = yaml.safe_load(SCHEDULER_CONFIG.read_text())
        config["clientConnection"]["kubeconfig"] = str(self.cluster.kubeconfig)
        for extender in config["extenders"]:
            extender["urlPrefix"] = self.extender_url
            extender["tlsConfig"]["caFile"] = str(self.ca_path)
            extender["tlsConfig"]["certFile"] = str(self.client_cert_path)
            extender["tlsConfig"]["keyFile"] = str(self.client_key_path)
        path = self.workdir / "scheduler-config.yaml"
        path.write_text(yaml.safe_dump(config))
        return path

    def scheduler_serving_args(self) -> list[str]:
        """kube-scheduler's HTTPS flags: none served here (the bench serves /metrics)."""
        return ["--secure-port=0"]

    def start_scheduler(self, timeout: float = 90) -> ManagedProcess:
        argv = [
            str(self.cluster.bin_dir / "kube-scheduler"),
            f"--config={self.scheduler_config()}",
            *self.scheduler_serving_args(),
            f"--v={self.scheduler_verbosity}",
        ]
        self.scheduler = self.cluster.start_process("gang-scheduler", argv)
        self._wait_lease(timeout)
        return self.scheduler

    def _wait_lease(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        path = path_of(
            "apis",
            "coordination.k8s.io",
            "v1",
            "namespaces",
            SYSTEM_NAMESPACE,
            "leases",
            "gang-extender",
        )
        while time.monotonic() < deadline:
            assert self.scheduler is not None
            if not self.scheduler.alive():
                raise ClusterError(f"gang kube-scheduler exited:\n{self.cluster.tail_logs()}")
            try:
                lease = self.raw.call("GET", path)
                if (lease.get("spec") or {}).get("holderIdentity"):
                    return
            except KubeError:
                pass
            time.sleep(0.2)
        raise ClusterError(f"gang kube-scheduler did not take its lease in {timeout}s")

    def restart_service(self, *, kill: bool = True, timeout: float = 90) -> ManagedProcess:
        """SIGKILL (or stop) the service and start it again on the same ports."""
        assert self.service is not None
        if kill:
            self.service.kill()
        else:
            self.service.stop()
        self.service.wait(30)
        return self.start_service(timeout=timeout, name=f"gang-extender-{int(time.time())}")

    def metrics_text(self) -> str:
        with urllib.request.urlopen(f"{self.metrics_url}/metrics", timeout=5) as resp:
            return str(resp.read().decode())

    def https_context(self, *, client_cert: bool = True) -> ssl.SSLContext:
        """Trusts the service's CA; presents kube-scheduler's certificate unless told not to
        (the extender answers nobody else)."""
        context = ssl.create_default_context(cafile=str(self.ca_path))
        if client_cert:
            context.load_cert_chain(str(self.client_cert_path), str(self.client_key_path))
        return context

    def stop(self) -> None:
        replicas = [r.process for r in self.replicas]
        for proc in (self.scheduler, self.service, *replicas):
            if proc is not None and proc.alive():
                proc.stop()

    # ---- several leader-elected replicas (HA), as deploy/service runs them ----
    def start_replicated(
        self, count: int, *, extender_port: int, webhook_port: int, timeout: float = 90
    ) -> list[ServiceReplica]:
        """The product with `count` service replicas electing a leader (`--leader-elect`).

        kube-scheduler's extender URL and the webhook are pointed at `extender_port`
        and `webhook_port` on loopback, where the caller runs a stand-in for the
        Service (something forwarding to the Ready replica). Each replica has its own
        ports and TLS directory, as pods with an emptyDir do: they share one CA only
        through the API (Secret and ConfigMap gang-extender-ca), and kube-scheduler
        trusts the published ConfigMap, as deploy/scheduler mounts it. Returns once
        one replica is Ready (the leader) and every other one is synced and standing by.
        """
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.install_crds()
        apply_object(
            self.raw,
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SYSTEM_NAMESPACE}},
        )
        self.extender_port, self.webhook_port = extender_port, webhook_port
        self.install_webhook_config()
        for index in range(count):
            ports = [free_port() for _ in range(3)]
            self.replicas.append(
                ServiceReplica(
                    name=f"gang-extender-{index}",
                    extender_port=ports[0],
                    webhook_port=ports[1],
                    metrics_port=ports[2],
                    tls_dir=self.workdir / f"tls-{index}",
                )
            )
        for replica in self.replicas:
            self.start_replica(replica)
        self.wait_replicas_settled(timeout)
        # kube-scheduler's caFile: the CA the replicas published, not any one's tls_dir.
        self.tls_dir = self.workdir / "published-ca"
        self.tls_dir.mkdir(parents=True, exist_ok=True)
        self.ca_path.write_bytes(self.published_ca())
        self.fetch_client_cert()
        self.start_scheduler(timeout=timeout)
        return self.replicas

    def replica_argv(self, replica: ServiceReplica) -> list[str]:
        argv = [
            sys.executable,
            "-m",
            "extender",
            "serve",
            "--kubeconfig",
            str(self.cluster.kubeconfig),
            "--bind-address",
            "127.0.0.1",
            "--extender-port",
            str(replica.extender_port),
            "--webhook-port",
            str(replica.webhook_port),
            "--metrics-port",
            str(replica.metrics_port),
            "--tls-dir",
            str(replica.tls_dir),
            "--leader-elect",
        ]
        if self.policy is not None:
            argv += ["--policy", str(self.policy)]
        return argv

    def start_replica(self, replica: ServiceReplica, *, fresh_tls: bool = True) -> ManagedProcess:
        """Start (or restart) one replica; `fresh_tls` empties its TLS dir like a new pod's."""
        if fresh_tls:
            shutil.rmtree(replica.tls_dir, ignore_errors=True)
        # POD_NAME is the leader-election identity, as the Deployment sets it.
        env = {"PYTHONUNBUFFERED": "1", "POD_NAME": replica.name, **self.env}
        replica.process = self.cluster.start_process(
            replica.name, self.replica_argv(replica), env=env
        )
        return replica.process

    def leader(self) -> ServiceReplica | None:
        """The replica whose /readyz answers 200 (only the leader is ready)."""
        for replica in self.replicas:
            alive = replica.process is not None and replica.process.alive()
            if alive and replica.readyz()[0] == 200:
                return replica
        return None

    def wait_replicas_settled(self, timeout: float = 90) -> ServiceReplica:
        """Until one live replica is Ready and every other live one is synced but not leader."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            live = [r for r in self.replicas if r.process is not None and r.process.alive()]
            if not live:
                raise ClusterError(
                    f"every gang-extender replica exited:\n{self.cluster.tail_logs()}"
                )
            answers = {r.name: r.readyz() for r in live}
            ready = [r for r in live if answers[r.name][0] == 200]
            standing_by = [r for r in live if "not the leader" in answers[r.name][1]]
            if len(ready) == 1 and len(ready) + len(standing_by) == len(live):
                return ready[0]
            time.sleep(0.2)
        raise ClusterError(
            f"replicas did not settle on one leader in {timeout}s:\n{self.cluster.tail_logs()}"
        )

    def published_ca(self) -> bytes:
        """ca.crt of ConfigMap gang-system/gang-extender-ca (what deploy/scheduler mounts)."""
        path = path_of(
            "api", "v1", "namespaces", SYSTEM_NAMESPACE, "configmaps", PUBLISHED_CA_CONFIGMAP
        )
        return str(self.raw.call("GET", path)["data"]["ca.crt"]).encode()


def env_flag(name: str) -> bool:
    return os.environ.get(name, "").lower() in ("1", "true", "yes")
