"""Kueue's real manager run beside a :class:`LocalCluster`, outside the cluster.

    kueue_dir = ensure_kueue()                      # hack/build-kueue.sh, cached
    with KueueManager(cluster, kueue_dir, namespace_labels={"team": "a"}) as kueue:
        ...                                         # ClusterQueue, LocalQueue, Jobs

Kueue normally runs in a Pod behind a Service; here it listens on 127.0.0.1 and
everything that would name its Service names a URL instead:

- certificates: Kueue's own rotator keeps a CA and a serving certificate in the
  Secret ``kueue-webhook-server-cert``. We write that Secret first (an RSA CA in
  PKCS#1 whose SAN is ``kueue-ca``, and a serving certificate for both the
  Service's DNS name and 127.0.0.1, valid for a year) so the rotator accepts it
  rather than making one without the IP; it never writes the files itself, so
  they are copied into its ``certDir`` too.
- CRDs: applied server-side (they are too big for a client-side apply); the five
  with a conversion webhook get its URL and CA bundle, or the rotator's CA
  injection fails and the manager exits.
- webhooks: only Kueue's own resources' and the enabled integrations' (``batch/v1``
  Jobs; plain pods too with ``frameworks=("batch/job", "pod")``) are kept (the other
  integrations' webhooks fail closed and would block every Pod with no controller
  behind them), pointed at the URL, and limited to namespaces carrying
  ``namespace_labels`` so other tenants of a shared cluster are untouched. They
  are deleted before the manager stops, so a stopped Kueue never blocks a write.
"""

from __future__ import annotations

import base64
import datetime as dt
import os
import subprocess
import time
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from kubernetes import client as k8s

from extender.devcluster.cluster import ClusterError, LocalCluster, free_ports
from extender.devcluster.process import ManagedProcess
from extender.kube.rawapi import RawApi, path_of
from extender.x509build import build_leaf, cert_pem, subject

__all__ = [
    "KUEUE_NAMESPACE",
    "DevQueues",
    "KueueManager",
    "KueueUnavailable",
    "create_dev_queues",
    "create_queues",
    "ensure_kueue",
    "kueue_path",
]

BUILD_SCRIPT = Path(__file__).resolve().parents[2] / "hack" / "build-kueue.sh"
KUEUE_DIR_ENV = "GANG_E2E_KUEUE_DIR"
KUEUE_NAMESPACE = "kueue-system"
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_API = ("apis", "kueue.x-k8s.io", "v1beta2")
# What `dev up --kueue` makes: one flavor, one ClusterQueue, one LocalQueue in `default`.
DEV_QUEUE = "gpus"
DEV_FLAVOR = "default-flavor"
_SERVICE_DNS = f"kueue-webhook-service.{KUEUE_NAMESPACE}.svc"
_SECRET = "kueue-webhook-server-cert"
_CA_NAME = "kueue-ca"  # Kueue's rotator accepts a CA only when its SAN is this name
_WEBHOOK_CONFIGS = {
    "MutatingWebhookConfiguration": "kueue-mutating-webhook-configuration",
    "ValidatingWebhookConfiguration": "kueue-validating-webhook-configuration",
}
_VALIDITY = dt.timedelta(days=365)


class KueueUnavailable(ClusterError):
    """Kueue could not be built (no Go, no module proxy) or its build output is incomplete."""


def ensure_kueue() -> Path:
    """The directory holding ``bin/kueue``, ``crd/`` and ``webhook/``, building it if needed.

    ``$GANG_E2E_KUEUE_DIR`` names a prebuilt directory; otherwise runs
    ``hack/build-kueue.sh`` (a no-op when cached; ~150 s the first time) with its
    progress on our stderr.
    """
    override = os.environ.get(KUEUE_DIR_ENV)
    if override:
        out = Path(override)
    else:
        try:
            result = subprocess.run(
                [str(BUILD_SCRIPT)], stdout=subprocess.PIPE, text=True, timeout=3600
            )
        except (OSError, subprocess.SubprocessError) as exc:
            raise KueueUnavailable(f"cannot run {BUILD_SCRIPT.name}: {exc}") from exc
        if result.returncode != 0:
            raise KueueUnavailable(
                f"{BUILD_SCRIPT.name} failed (exit {result.returncode}); its log is printed above"
            )
        out = Path(result.stdout.strip().splitlines()[-1])
    missing = [
        part for part in ("bin/kueue", "crd", "webhook/manifests.yaml") if not (out / part).exists()
    ]
    if missing:
        raise KueueUnavailable(f"{out} lacks {', '.join(missing)}")
    return out


def _rsa_key_pem(key: rsa.RSAPrivateKey) -> bytes:
    # PKCS#1 ("BEGIN RSA PRIVATE KEY"): the only form Kueue's rotator parses for its CA.
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )


def make_certificates(cert_dir: Path) -> dict[str, bytes]:
    """``ca.crt``, ``ca.key``, ``tls.crt``, ``tls.key`` as Kueue's rotator accepts them,
    also written into ``cert_dir``."""
    now = dt.datetime.now(dt.UTC)
    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = subject(common_name=_CA_NAME, organizations=["kueue"])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY * 10)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=True,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(_CA_NAME)]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    leaf = build_leaf(
        ca_cert=ca_cert,
        ca_key=ca_key,
        public_key=key.public_key(),
        common_name=_SERVICE_DNS,
        organizations=["kueue"],
        sans=[_SERVICE_DNS, "127.0.0.1"],
        server=True,
        client=False,
        key_encipherment=True,
        not_before=now - dt.timedelta(minutes=5),
        not_after=now + _VALIDITY,
    )
    files = {
        "ca.crt": cert_pem(ca_cert),
        "ca.key": _rsa_key_pem(ca_key),
        "tls.crt": cert_pem(leaf),
        "tls.key": _rsa_key_pem(key),
    }
    cert_dir.mkdir(parents=True, exist_ok=True)
    for file in ("tls.crt", "tls.key"):
        (cert_dir / file).write_bytes(files[file])
        (cert_dir / file).chmod(0o600)
    return files


# Kueue's integration frameworks this runner supports, and the suffix of their
# webhooks' paths (Kueue's own resources' webhooks are always kept).
WEBHOOK_OF_FRAMEWORK = {"batch/job": "-batch-v1-job", "pod": "--v1-pod"}


def _kept_webhook(webhook: Mapping[str, Any], frameworks: tuple[str, ...]) -> bool:
    path = str(((webhook.get("clientConfig") or {}).get("service") or {}).get("path", ""))
    return "kueue-x-k8s-io" in path or any(
        path.endswith(WEBHOOK_OF_FRAMEWORK[f]) for f in frameworks
    )


def webhook_configurations(
    manifests: str,
    base_url: str,
    ca_bundle: str,
    namespace_labels: Mapping[str, str],
    frameworks: tuple[str, ...] = ("batch/job",),
) -> list[dict[str, Any]]:
    """Kueue's webhook configurations, kept to its own resources and `frameworks`'
    (batch/v1 Jobs; plain pods with "pod"), pointed at ``base_url`` and limited to
    namespaces labelled ``namespace_labels``."""
    out = []
    for doc in yaml.safe_load_all(manifests):
        if not doc or doc.get("kind") not in _WEBHOOK_CONFIGS:
            continue
        hooks = []
        for hook in doc.get("webhooks") or []:
            if not _kept_webhook(hook, frameworks):
                continue
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"{base_url}{path}", "caBundle": ca_bundle}
            if namespace_labels:
                hook["namespaceSelector"] = {"matchLabels": dict(namespace_labels)}
            hooks.append(hook)
        doc["metadata"] = {"name": _WEBHOOK_CONFIGS[doc["kind"]]}
        doc["webhooks"] = hooks
        out.append(doc)
    return out


# The CRDs Kueue serves in two versions, converting by its webhook (the module's bases
# leave conversion out: its kustomize patches add it). Without it the rotator's CA
# injection into these fails and the manager never becomes ready.
CONVERTED_CRDS = (
    "localqueues.kueue.x-k8s.io",
    "clusterqueues.kueue.x-k8s.io",
    "cohorts.kueue.x-k8s.io",
    "workloads.kueue.x-k8s.io",
    "multikueueclusters.kueue.x-k8s.io",
)


def crds_with_conversion_url(crd_dir: Path, url: str, ca_bundle: str) -> list[dict[str, Any]]:
    """Kueue's CRDs; those converting by webhook call ``url`` (not the Service)."""
    crds = []
    for path in sorted(crd_dir.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        if crd["metadata"]["name"] in CONVERTED_CRDS:
            crd["spec"]["conversion"] = {
                "strategy": "Webhook",
                "webhook": {
                    "clientConfig": {"url": url, "caBundle": ca_bundle},
                    "conversionReviewVersions": ["v1"],
                },
            }
        crds.append(crd)
    return crds


class KueueManager:
    """Kueue's manager as a child process of ``cluster`` (see the module docstring)."""

    def __init__(
        self,
        cluster: LocalCluster,
        kueue_dir: Path,
        *,
        namespace_labels: Mapping[str, str] | None = None,
        extra_config: Mapping[str, Any] | None = None,
        frameworks: tuple[str, ...] = ("batch/job",),
    ) -> None:
        unknown = sorted(set(frameworks) - set(WEBHOOK_OF_FRAMEWORK))
        if unknown:
            raise ValueError(
                f"Kueue frameworks {unknown} are not run here; choose from "
                f"{sorted(WEBHOOK_OF_FRAMEWORK)}"
            )
        self.cluster = cluster
        self.kueue_dir = kueue_dir
        self.frameworks = frameworks
        self.namespace_labels = dict(namespace_labels or {})
        self.extra_config = dict(extra_config or {})
        self.workdir = cluster.workdir / "kueue"
        self._proc: ManagedProcess | None = None
        self.webhook_port, self.health_port, self.metrics_port = free_ports(3)

    def __enter__(self) -> KueueManager:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        return f"https://127.0.0.1:{self.webhook_port}"

    def config(self) -> dict[str, Any]:
        """Kueue's Configuration: everything on 127.0.0.1, no leader election, Jobs only."""
        return {
            "apiVersion": "config.kueue.x-k8s.io/v1beta2",
            "kind": "Configuration",
            "namespace": KUEUE_NAMESPACE,
            "health": {"healthProbeBindAddress": f"127.0.0.1:{self.health_port}"},
            "metrics": {"bindAddress": f"127.0.0.1:{self.metrics_port}"},
            "webhook": {
                "host": "127.0.0.1",
                "port": self.webhook_port,
                "certDir": str(self.workdir / "certs"),
            },
            "leaderElection": {"leaderElect": False},
            # Off, the manager wants a metrics certificate at a fixed path and exits.
            "internalCertManagement": {"enable": True},
            "featureGates": {"VisibilityOnDemand": False},
            "integrations": {"frameworks": list(self.frameworks)},
            **self.extra_config,
        }

    def start(self, timeout: float = 300) -> None:
        # A start budget, not a figure: under xdist with builds beside it, startup
        # alone took 119 s of the old 120 s budget on the 2-core CI machine.
        deadline = time.monotonic() + timeout
        self.workdir.mkdir(parents=True, exist_ok=True)
        files = make_certificates(self.workdir / "certs")
        ca_bundle = base64.b64encode(files["ca.crt"]).decode()
        with self.cluster.api_client() as api:
            core = k8s.CoreV1Api(api)
            try:
                core.create_namespace(
                    k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=KUEUE_NAMESPACE))
                )
            except k8s.ApiException as exc:
                if exc.status != 409:
                    raise
            secret = k8s.V1Secret(
                metadata=k8s.V1ObjectMeta(name=_SECRET, namespace=KUEUE_NAMESPACE),
                data={k: base64.b64encode(v).decode() for k, v in files.items()},
            )
            try:
                core.create_namespaced_secret(KUEUE_NAMESPACE, secret)
            except k8s.ApiException as exc:
                if exc.status != 409:
                    raise
                core.replace_namespaced_secret(_SECRET, KUEUE_NAMESPACE, secret)
        crds = crds_with_conversion_url(
            self.kueue_dir / "crd", f"{self.base_url}/convert", ca_bundle
        )
        hooks = webhook_configurations(
            (self.kueue_dir / "webhook" / "manifests.yaml").read_text(),
            self.base_url,
            ca_bundle,
            self.namespace_labels,
            self.frameworks,
        )
        manifest = self.workdir / "objects.yaml"
        manifest.write_text(yaml.safe_dump_all([*crds, *hooks]))
        self.cluster.kubectl(
            "apply", "--server-side", "--force-conflicts", "-f", str(manifest), timeout=120
        )
        self.cluster.kubectl(
            "wait",
            "--for=condition=Established",
            "crd",
            *(crd["metadata"]["name"] for crd in crds),
            timeout=60,
        )
        config = self.workdir / "config.yaml"
        config.write_text(yaml.safe_dump(self.config()))
        self._proc = self.cluster.start_process(
            "kueue",
            [str(self.kueue_dir / "bin" / "kueue"), f"--config={config}", "--zap-log-level=2"],
            env={"KUBECONFIG": str(self.cluster.kubeconfig)},
        )
        while not self._ready():
            if not self._proc.alive():
                raise ClusterError(
                    f"kueue exited ({self._proc.returncode}); see {self._proc.log_path}"
                )
            if time.monotonic() > deadline:
                raise ClusterError(f"kueue not ready after {timeout:.0f} s; see its log")
            time.sleep(0.5)

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.health_port}/readyz", timeout=2
            ) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def stop(self, grace: float = 10) -> None:
        """Delete the webhook configurations first (a stopped Kueue must not block
        writes), then stop the manager."""
        for kind, name in _WEBHOOK_CONFIGS.items():
            self.cluster.kubectl("delete", kind.lower(), name, "--ignore-not-found", check=False)
        if self._proc is not None:
            self._proc.stop(grace)
            self._proc = None


def kueue_path(namespace: str | None, resource: str, name: str | None = None) -> str:
    """The REST path of a Kueue object (`kueue.x-k8s.io/v1beta2`), cluster-scoped when
    `namespace` is None."""
    scope = ("namespaces", namespace) if namespace else ()
    return path_of(*KUEUE_API, *scope, resource, *((name,) if name else ()))


@dataclass(frozen=True)
class DevQueues:
    """The queues `dev up --kueue` made, for its usage lines."""

    cluster_queue: str
    local_queue: str
    namespace: str
    gpus: int


def create_queues(
    raw: RawApi,
    *,
    flavor: str,
    cluster_queue: str,
    local_queue: str,
    namespace: str,
    quota: Mapping[str, str],
    node_labels: Mapping[str, str] | None = None,
) -> None:
    """A ResourceFlavor (on the nodes carrying `node_labels`; every node without), a
    ClusterQueue of `quota` in it for every namespace, and a LocalQueue pointing at it."""
    flavor_spec = {"nodeLabels": dict(node_labels)} if node_labels else {}
    raw.call(
        "POST",
        kueue_path(None, "resourceflavors"),
        body={
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {"name": flavor},
            **({"spec": flavor_spec} if flavor_spec else {}),
        },
    )
    raw.call(
        "POST",
        kueue_path(None, "clusterqueues"),
        body={
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": cluster_queue},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": list(quota),
                        "flavors": [
                            {
                                "name": flavor,
                                "resources": [
                                    {"name": name, "nominalQuota": value}
                                    for name, value in quota.items()
                                ],
                            }
                        ],
                    }
                ],
            },
        },
    )
    raw.call(
        "POST",
        kueue_path(namespace, "localqueues"),
        body={
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": local_queue},
            "spec": {"clusterQueue": cluster_queue},
        },
    )


def create_dev_queues(raw: RawApi, *, gpus: int, namespace: str = "default") -> DevQueues:
    """A ResourceFlavor matching every node, a ClusterQueue whose GPU quota is `gpus`
    (the nodes' GPUs: Kueue checks quota, gang-extender checks nodes, so the two agree),
    and a LocalQueue in `namespace`, all named `gpus` but the flavor.

    cpu and memory are covered with room to spare: Kueue refuses a Workload whose pods
    ask for a resource its ClusterQueue does not cover."""
    create_queues(
        raw,
        flavor=DEV_FLAVOR,
        cluster_queue=DEV_QUEUE,
        local_queue=DEV_QUEUE,
        namespace=namespace,
        quota={"cpu": "1000", "memory": "4Ti", "nvidia.com/gpu": str(gpus)},
    )
    return DevQueues(DEV_QUEUE, DEV_QUEUE, namespace, gpus)
