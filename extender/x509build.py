"""Pure X.509 building blocks: names, SANs, CA and leaf certificates, PEM encoding.

Shared by the service's self-managed CA (:mod:`extender.tls`) and the local control
plane's PKI (:mod:`extender.devcluster.pki`). Nothing here reads a clock or touches
a file: callers choose the keys, names, validity window and usages, and decide where
the results go. Every certificate is signed with SHA-256; both kinds carry a
critical BasicConstraints and a critical KeyUsage with digital_signature set.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Iterable, Sequence

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.types import (
    CertificateIssuerPrivateKeyTypes,
    CertificatePublicKeyTypes,
    PrivateKeyTypes,
)
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def new_ec_key() -> ec.EllipticCurvePrivateKey:
    """A fresh P-256 key, the key type of every cert both PKIs issue."""
    return ec.generate_private_key(ec.SECP256R1())


def as_ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """`host` as an IP address, or None when it is a DNS name."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def san_entries(hosts: Iterable[str]) -> list[x509.GeneralName]:
    """SAN entries for `hosts`, which mix IP addresses and DNS names, in order."""
    entries: list[x509.GeneralName] = []
    for host in hosts:
        ip = as_ip(host)
        entries.append(x509.IPAddress(ip) if ip is not None else x509.DNSName(host))
    return entries


def subject(*, common_name: str, organizations: Sequence[str] = ()) -> x509.Name:
    """A name of O=<each organization> then CN=<common_name>."""
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attrs)


def build_ca(
    *,
    key: CertificateIssuerPrivateKeyTypes,
    common_name: str,
    not_before: dt.datetime,
    not_after: dt.datetime,
    path_length: int | None,
) -> x509.Certificate:
    """A self-signed CA cert for `key`: may sign certs and CRLs, carries its key identifier."""
    name = subject(common_name=common_name)
    return (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=path_length), critical=True)
        .add_extension(_key_usage(ca=True, key_encipherment=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )


def build_leaf(
    *,
    ca_cert: x509.Certificate,
    ca_key: CertificateIssuerPrivateKeyTypes,
    public_key: CertificatePublicKeyTypes,
    common_name: str,
    organizations: Sequence[str] = (),
    sans: Sequence[str] = (),
    server: bool,
    client: bool,
    key_encipherment: bool,
    not_before: dt.datetime,
    not_after: dt.datetime,
) -> x509.Certificate:
    """An end-entity cert for `public_key`, signed by the CA.

    The extended key usages are exactly those asked for (serverAuth before
    clientAuth); the SubjectAlternativeName is left out when `sans` is empty.
    """
    usages = []
    if server:
        usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
    if client:
        usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject(common_name=common_name, organizations=organizations))
        .issuer_name(ca_cert.subject)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(ca=False, key_encipherment=key_encipherment), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    )
    if sans:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(san_entries(sans)), critical=False
        )
    return builder.add_extension(
        x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
        critical=False,
    ).sign(ca_key, hashes.SHA256())


def private_key_pem(key: PrivateKeyTypes) -> bytes:
    """`key` as unencrypted PKCS#8 PEM."""
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_usage(*, ca: bool, key_encipherment: bool) -> x509.KeyUsage:
    """digital_signature always; key_cert_sign and crl_sign for a CA."""
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=key_encipherment,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=ca,
        crl_sign=ca,
        encipher_only=False,
        decipher_only=False,
    )
