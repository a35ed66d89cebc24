"""Certificates for the local control plane, made with ``cryptography``.

One CA signs everything: the kube-apiserver serving cert, the client certs of the
admin and of each component, and any cert a caller asks for later with
:func:`issue_cert` (for instance the gang-extender's webhook serving cert, which
the apiserver then trusts through the same CA bundle).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from extender.x509build import build_ca, build_leaf, cert_pem, new_ec_key, private_key_pem

CA_NAME = "gang-extender-devcluster-ca"
APISERVER_SANS: tuple[str, ...] = (
    "127.0.0.1",
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
    "10.0.0.1",
)
_VALIDITY = dt.timedelta(days=365)

PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey


@dataclass(frozen=True)
class CertPair:
    cert: Path
    key: Path


@dataclass(frozen=True)
class ClusterPKI:
    """Paths of every file :func:`generate_cluster_pki` writes."""

    dir: Path
    ca: CertPair
    apiserver: CertPair
    admin: CertPair
    controller_manager: CertPair
    scheduler: CertPair
    sa_private_key: Path
    sa_public_key: Path


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _write(path: Path, data: bytes, private: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    if private:
        path.chmod(0o600)


def create_ca(pki_dir: Path, common_name: str = CA_NAME) -> CertPair:
    """Write a self-signed CA as ``ca.crt`` / ``ca.key`` in ``pki_dir``."""
    key = new_ec_key()
    now = _now()
    cert = build_ca(
        key=key,
        common_name=common_name,
        not_before=now - dt.timedelta(minutes=5),
        not_after=now + _VALIDITY * 10,
        path_length=None,
    )
    pair = CertPair(pki_dir / "ca.crt", pki_dir / "ca.key")
    _write(pair.cert, cert_pem(cert))
    _write(pair.key, private_key_pem(key), private=True)
    return pair


def _load_ca(ca: CertPair) -> tuple[x509.Certificate, PrivateKey]:
    cert = x509.load_pem_x509_certificate(ca.cert.read_bytes())
    key = serialization.load_pem_private_key(ca.key.read_bytes(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
        raise TypeError(f"unsupported CA key type {type(key).__name__}")
    return cert, key


def issue_cert(
    ca: CertPair,
    out_dir: Path,
    name: str,
    *,
    common_name: str,
    organizations: Sequence[str] = (),
    sans: Sequence[str] = (),
    server: bool = False,
    client: bool = False,
) -> CertPair:
    """Sign a cert with the CA and write it as ``<name>.crt`` / ``<name>.key`` in ``out_dir``.

    ``sans`` mixes IP addresses and DNS names. ``server``/``client`` choose the
    extended key usages; with neither, both are set.
    """
    if not server and not client:
        server = client = True
    ca_cert, ca_key = _load_ca(ca)
    key = new_ec_key()
    now = _now()
    cert = build_leaf(
        ca_cert=ca_cert,
        ca_key=ca_key,
        public_key=key.public_key(),
        common_name=common_name,
        organizations=organizations,
        sans=sans,
        server=server,
        client=client,
        key_encipherment=False,
        not_before=now - dt.timedelta(minutes=5),
        not_after=now + _VALIDITY,
    )
    pair = CertPair(out_dir / f"{name}.crt", out_dir / f"{name}.key")
    _write(pair.cert, cert_pem(cert))
    _write(pair.key, private_key_pem(key), private=True)
    return pair


def create_service_account_keys(pki_dir: Path) -> tuple[Path, Path]:
    """RSA key pair that signs (``sa.key``) and verifies (``sa.pub``) SA tokens."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private, public = pki_dir / "sa.key", pki_dir / "sa.pub"
    _write(
        private,
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        ),
        private=True,
    )
    _write(
        public,
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ),
    )
    return private, public


def generate_cluster_pki(pki_dir: Path) -> ClusterPKI:
    """Everything the control plane needs, written into ``pki_dir``."""
    pki_dir.mkdir(parents=True, exist_ok=True)
    ca = create_ca(pki_dir)
    apiserver = issue_cert(
        ca, pki_dir, "apiserver", common_name="kube-apiserver", sans=APISERVER_SANS, server=True
    )
    admin = issue_cert(
        ca, pki_dir, "admin", common_name="admin", organizations=["system:masters"], client=True
    )
    controller_manager = issue_cert(
        ca,
        pki_dir,
        "controller-manager",
        common_name="system:kube-controller-manager",
        client=True,
    )
    scheduler = issue_cert(
        ca, pki_dir, "scheduler", common_name="system:kube-scheduler", client=True
    )
    sa_private, sa_public = create_service_account_keys(pki_dir)
    return ClusterPKI(
        dir=pki_dir,
        ca=ca,
        apiserver=apiserver,
        admin=admin,
        controller_manager=controller_manager,
        scheduler=scheduler,
        sa_private_key=sa_private,
        sa_public_key=sa_public,
    )
