"""The local control plane's certificates are what kube-apiserver and its clients expect."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.serialization import load_pem_private_key
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from extender.devcluster.pki import ClusterPKI, generate_cluster_pki, issue_cert


@pytest.fixture(scope="module")
def cluster_pki(tmp_path_factory: pytest.TempPathFactory) -> ClusterPKI:
    return generate_cluster_pki(tmp_path_factory.mktemp("pki"))


def load(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_apiserver_serving_cert_covers_every_name_clients_use(cluster_pki: ClusterPKI) -> None:
    cert = load(cluster_pki.apiserver.cert)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value

    assert set(sans.get_values_for_type(x509.DNSName)) >= {
        "localhost",
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
    }
    assert set(sans.get_values_for_type(x509.IPAddress)) >= {
        ipaddress.ip_address("127.0.0.1"),
        ipaddress.ip_address("10.0.0.1"),
    }
    usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.SERVER_AUTH in usages


def test_every_cert_is_signed_by_the_cluster_ca(cluster_pki: ClusterPKI) -> None:
    ca = load(cluster_pki.ca.cert)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    for pair in (
        cluster_pki.apiserver,
        cluster_pki.admin,
        cluster_pki.controller_manager,
        cluster_pki.scheduler,
    ):
        load(pair.cert).verify_directly_issued_by(ca)  # raises if not


def test_admin_client_cert_is_in_system_masters(cluster_pki: ClusterPKI) -> None:
    cert = load(cluster_pki.admin.cert)

    orgs = [a.value for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
    names = [a.value for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    assert orgs == ["system:masters"]
    assert names == ["admin"]
    usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usages) == [ExtendedKeyUsageOID.CLIENT_AUTH]


def test_component_client_certs_use_the_bootstrap_rbac_user_names(cluster_pki: ClusterPKI) -> None:
    def common_name(path: Path) -> str:
        return str(load(path).subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value)

    assert common_name(cluster_pki.controller_manager.cert) == "system:kube-controller-manager"
    assert common_name(cluster_pki.scheduler.cert) == "system:kube-scheduler"


def test_service_account_signing_key_is_rsa_and_private(cluster_pki: ClusterPKI) -> None:
    key = load_pem_private_key(cluster_pki.sa_private_key.read_bytes(), password=None)
    assert isinstance(key, rsa.RSAPrivateKey)
    assert cluster_pki.sa_private_key.stat().st_mode & 0o077 == 0
    assert cluster_pki.ca.key.stat().st_mode & 0o077 == 0


def test_callers_can_issue_more_certs_from_the_ca(cluster_pki: ClusterPKI, tmp_path: Path) -> None:
    pair = issue_cert(
        cluster_pki.ca,
        tmp_path,
        "webhook",
        common_name="gang-extender",
        sans=["127.0.0.1", "gang-extender.kube-system.svc"],
        server=True,
    )

    cert = load(pair.cert)
    cert.verify_directly_issued_by(load(cluster_pki.ca.cert))
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["gang-extender.kube-system.svc"]
    assert sans.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
