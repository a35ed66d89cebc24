"""Serving TLS for the webhook and extender listeners: a provided cert, or a self-managed CA.

Self-managed: a CA and a serving cert signed by it, kept in `tls_dir` and reused
across restarts while valid, so the caBundle written into the
MutatingWebhookConfiguration (and handed to kube-scheduler for the extender) stays
the same. The CA outlives many serving certs: renewing the serving cert does not
change the bundle; only a missing, damaged or expiring CA does.
"""

from __future__ import annotations

import datetime as dt
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes

from extender.x509build import (
    as_ip,
    build_ca,
    build_leaf,
    cert_pem,
    new_ec_key,
    private_key_pem,
)

CA_CERT_FILE = "ca.crt"
CA_KEY_FILE = "ca.key"
SERVING_CERT_FILE = "tls.crt"
SERVING_KEY_FILE = "tls.key"

# The CA lives long so the caBundle in the webhook configuration rarely changes.
CA_VALIDITY = dt.timedelta(days=3650)
# A serving cert is re-issued (same CA, same bundle) at start-up when within RENEW_BEFORE.
SERVING_VALIDITY = dt.timedelta(days=365)
RENEW_BEFORE = dt.timedelta(days=30)
# Issued slightly in the past so a peer whose clock is a little behind accepts it.
CLOCK_SKEW = dt.timedelta(minutes=5)
CA_COMMON_NAME = "gang-extender-ca"
# The identity of the client certificate the self-managed CA issues for kube-scheduler
# (Settings.extender_client_names accepts it by default).
SCHEDULER_CLIENT_NAME = "gang-scheduler"

PRIVATE_FILE_MODE = 0o600
PUBLIC_FILE_MODE = 0o644
TLS_DIR_MODE = 0o700


class TLSError(ValueError):
    """Certificate material that cannot be used; the message names the file and the fix."""


@dataclass(frozen=True)
class TLSMaterial:
    cert_path: Path
    key_path: Path
    ca_path: Path
    # The bundle API clients (the API server, kube-scheduler) verify our cert with.
    ca_pem: bytes


def ensure_serving_cert(tls_dir: Path, hosts: list[str]) -> TLSMaterial:
    """A CA and a serving cert for `hosts` in `tls_dir`: reused when valid, else made.

    The serving cert is reused when it is signed by the CA, matches its key, covers
    every host and is not within RENEW_BEFORE of expiry; the CA when it parses,
    matches its key and is not within RENEW_BEFORE of expiry. Key files are 0600.
    """
    if not hosts:
        raise TLSError("the serving cert needs at least one host name or IP")
    tls_dir.mkdir(parents=True, exist_ok=True, mode=TLS_DIR_MODE)
    now = _now()
    paths = _Paths(tls_dir)
    ca = _load_valid_ca(paths, now)
    if ca is None:
        ca = _new_ca(now)
        write_atomically(paths.ca_key, private_key_pem(ca.key), PRIVATE_FILE_MODE)
        write_atomically(paths.ca_cert, cert_pem(ca.cert), PUBLIC_FILE_MODE)
    if not _serving_cert_usable(paths, ca.cert, hosts, now):
        key, cert = _new_serving_cert(ca, hosts, now)
        write_atomically(paths.key, private_key_pem(key), PRIVATE_FILE_MODE)
        write_atomically(paths.cert, cert_pem(cert), PUBLIC_FILE_MODE)
    return TLSMaterial(
        cert_path=paths.cert,
        key_path=paths.key,
        ca_path=paths.ca_cert,
        ca_pem=paths.ca_cert.read_bytes(),
    )


def provided_cert(cert: Path, key: Path, ca: Path | None) -> TLSMaterial:
    """Use a cert/key given by the operator (e.g. from cert-manager), after checking them.

    Without `ca`, the bundle is the cert file itself: right for a self-signed cert,
    and accepted by Go clients for any cert, which they then trust as is.
    """
    leaf = _read_cert(cert)
    private = _read_key(key)
    if not _same_public_key(private, leaf):
        raise TLSError(f"key {key} does not belong to certificate {cert}; give the matching pair")
    if leaf.not_valid_after_utc <= _now():
        raise TLSError(
            f"certificate {cert} expired at {leaf.not_valid_after_utc.isoformat()}; renew it"
        )
    bundle_path = ca if ca is not None else cert
    bundle = bundle_path.read_bytes()
    try:
        x509.load_pem_x509_certificates(bundle)
    except ValueError as error:
        raise TLSError(f"CA bundle {bundle_path} holds no PEM certificate: {error}") from None
    return TLSMaterial(cert_path=cert, key_path=key, ca_path=bundle_path, ca_pem=bundle)


def provided_cert_bundle(path: Path) -> list[x509.Certificate]:
    """The certificates of a PEM bundle the operator names; TLSError saying what is wrong."""
    try:
        return x509.load_pem_x509_certificates(path.read_bytes())
    except FileNotFoundError:
        raise TLSError(f"CA bundle {path} does not exist") from None
    except OSError as error:
        raise TLSError(f"CA bundle {path} cannot be read: {error.strerror}") from None
    except ValueError as error:
        raise TLSError(f"CA bundle {path} holds no PEM certificate: {error}") from None


@dataclass(frozen=True)
class ClientCert:
    """A client certificate and its key (PEM), as kube-scheduler presents it to the extender."""

    cert_pem: bytes
    key_pem: bytes


def issue_client_cert(tls_dir: Path, common_name: str) -> ClientCert:
    """A clientAuth-only certificate for `common_name`, signed by the CA in `tls_dir`.

    The serving certs carry serverAuth only, so no serving cert (nor its key, on
    a replica's emptyDir) can stand in for this one: OpenSSL checks the purpose.
    """
    paths = _Paths(tls_dir)
    now = _now()
    ca = _load_valid_ca(paths, now)
    if ca is None:
        raise TLSError(f"no usable CA in {tls_dir} to sign the client certificate with")
    key = new_ec_key()
    cert = build_leaf(
        ca_cert=ca.cert,
        ca_key=ca.key,
        public_key=key.public_key(),
        common_name=common_name,
        sans=[common_name],
        server=False,
        client=True,
        key_encipherment=False,
        not_before=now - CLOCK_SKEW,
        not_after=min(now + SERVING_VALIDITY, ca.cert.not_valid_after_utc),
    )
    return ClientCert(cert_pem=cert_pem(cert), key_pem=private_key_pem(key))


def client_cert_usable(client: ClientCert, ca_pem: bytes, common_name: str) -> bool:
    """True when `client` is signed by the CA in `ca_pem`, matches its key, names
    `common_name` and is not within RENEW_BEFORE of expiry: then it is kept as is."""
    try:
        cert = x509.load_pem_x509_certificate(client.cert_pem)
        key = serialization.load_pem_private_key(client.key_pem, password=None)
        cert.verify_directly_issued_by(x509.load_pem_x509_certificate(ca_pem))
    except (ValueError, TypeError, InvalidSignature):
        return False
    if not _same_public_key(key, cert) or cert.not_valid_after_utc - RENEW_BEFORE <= _now():
        return False
    return common_name in peer_names(cert)


def peer_names(cert: x509.Certificate) -> set[str]:
    """The subject's common names and DNS SANs: what a client identity is matched on."""
    names = {
        str(attribute.value)
        for attribute in cert.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)
    }
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return names
    return names | set(san.get_values_for_type(x509.DNSName))


@dataclass(frozen=True)
class _Paths:
    root: Path

    @property
    def ca_cert(self) -> Path:
        return self.root / CA_CERT_FILE

    @property
    def ca_key(self) -> Path:
        return self.root / CA_KEY_FILE

    @property
    def cert(self) -> Path:
        return self.root / SERVING_CERT_FILE

    @property
    def key(self) -> Path:
        return self.root / SERVING_KEY_FILE


@dataclass(frozen=True)
class _Authority:
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _load_valid_ca(paths: _Paths, now: dt.datetime) -> _Authority | None:
    """The CA on disk if usable; None when it must be made anew (missing, damaged, expiring)."""
    if not paths.ca_cert.exists() or not paths.ca_key.exists():
        return None
    try:
        cert = x509.load_pem_x509_certificate(paths.ca_cert.read_bytes())
        key = serialization.load_pem_private_key(paths.ca_key.read_bytes(), password=None)
    except ValueError:
        # A damaged CA is replaced, not fatal: it is ours, and a new one is written
        # into the webhook configuration on this same start-up.
        return None
    if not isinstance(key, ec.EllipticCurvePrivateKey) or not _same_public_key(key, cert):
        return None
    if cert.not_valid_after_utc - RENEW_BEFORE <= now:
        return None
    return _Authority(key=key, cert=cert)


def _serving_cert_usable(
    paths: _Paths, ca_cert: x509.Certificate, hosts: list[str], now: dt.datetime
) -> bool:
    if not paths.cert.exists() or not paths.key.exists():
        return False
    try:
        cert = x509.load_pem_x509_certificate(paths.cert.read_bytes())
        key = serialization.load_pem_private_key(paths.key.read_bytes(), password=None)
        cert.verify_directly_issued_by(ca_cert)
    except (ValueError, TypeError, InvalidSignature):
        return False  # damaged, or from an older CA: re-issued below
    if not _same_public_key(key, cert) or cert.not_valid_after_utc - RENEW_BEFORE <= now:
        return False
    return _covers(cert, hosts)


def _covers(cert: x509.Certificate, hosts: list[str]) -> bool:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return False
    dns = set(san.get_values_for_type(x509.DNSName))
    ips = {str(ip) for ip in san.get_values_for_type(x509.IPAddress)}
    for host in hosts:
        ip = as_ip(host)
        if (ip is not None and str(ip) not in ips) or (ip is None and host not in dns):
            return False
    return True


def _new_ca(now: dt.datetime) -> _Authority:
    key = new_ec_key()
    cert = build_ca(
        key=key,
        common_name=CA_COMMON_NAME,
        not_before=now - CLOCK_SKEW,
        not_after=now + CA_VALIDITY,
        path_length=0,
    )
    return _Authority(key=key, cert=cert)


def _new_serving_cert(
    ca: _Authority, hosts: list[str], now: dt.datetime
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = new_ec_key()
    cert = build_leaf(
        ca_cert=ca.cert,
        ca_key=ca.key,
        public_key=key.public_key(),
        common_name=hosts[0],
        sans=hosts,
        server=True,
        client=False,
        key_encipherment=True,
        not_before=now - CLOCK_SKEW,
        not_after=min(now + SERVING_VALIDITY, ca.cert.not_valid_after_utc),
    )
    return key, cert


def _same_public_key(key: PrivateKeyTypes, cert: x509.Certificate) -> bool:
    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    der = serialization.Encoding.DER
    return key.public_key().public_bytes(der, spki) == cert.public_key().public_bytes(der, spki)


def _read_cert(path: Path) -> x509.Certificate:
    try:
        return x509.load_pem_x509_certificate(path.read_bytes())
    except FileNotFoundError:
        raise TLSError(f"certificate file {path} does not exist") from None
    except ValueError as error:
        raise TLSError(f"{path} is not a PEM certificate: {error}") from None


def _read_key(path: Path) -> PrivateKeyTypes:
    try:
        return serialization.load_pem_private_key(path.read_bytes(), password=None)
    except FileNotFoundError:
        raise TLSError(f"key file {path} does not exist") from None
    except (ValueError, TypeError) as error:
        # TypeError: the key is encrypted; the service cannot prompt for a password.
        raise TLSError(f"{path} is not an unencrypted PEM private key: {error}") from None


def write_atomically(path: Path, content: bytes, mode: int) -> None:
    """Write atomically with `mode` from the first byte (a key is never briefly world-readable)."""
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(content)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
