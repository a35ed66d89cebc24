"""Serving TLS: the self-managed CA and serving cert, a provided cert, and the caBundle write."""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import ssl
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from extender.kube.webhook_config import WebhookConfigError, write_ca_bundle
from extender.tls import TLSError, ensure_serving_cert, provided_cert
from tests.unit.test_webhook_wiring import FakeApiServer

HOSTS = ["localhost", "127.0.0.1", "gang-extender.gang-system.svc"]


def load(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def san(cert: x509.Certificate) -> tuple[set[str], set[str]]:
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    dns = set(names.get_values_for_type(x509.DNSName))
    ips = {str(ip) for ip in names.get_values_for_type(x509.IPAddress)}
    return dns, ips


def handshake(client_context: ssl.SSLContext, server_context: ssl.SSLContext, host: str) -> None:
    """A TLS handshake over memory buffers: the real verification, no sockets."""
    client_in, client_out, server_in, server_out = (ssl.MemoryBIO() for _ in range(4))
    client = client_context.wrap_bio(client_in, client_out, server_hostname=host)
    server = server_context.wrap_bio(server_in, server_out, server_side=True)
    done = {"client": False, "server": False}
    for _ in range(10):
        for name, side in (("client", client), ("server", server)):
            if not done[name]:
                try:
                    side.do_handshake()
                    done[name] = True
                except ssl.SSLWantReadError:
                    pass
        server_in.write(client_out.read())
        client_in.write(server_out.read())
        if all(done.values()):
            return
    raise AssertionError("handshake did not complete")


class TestSelfManaged:
    def test_makes_a_ca_and_a_serving_cert_for_every_host(self, tmp_path: Path) -> None:
        material = ensure_serving_cert(tmp_path, HOSTS)
        cert, ca = load(material.cert_path), load(material.ca_path)
        cert.verify_directly_issued_by(ca)
        assert san(cert) == ({"localhost", "gang-extender.gang-system.svc"}, {"127.0.0.1"})
        usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        assert ExtendedKeyUsageOID.SERVER_AUTH in usage
        assert material.ca_pem == material.ca_path.read_bytes()

    def test_key_files_are_owner_only(self, tmp_path: Path) -> None:
        material = ensure_serving_cert(tmp_path, HOSTS)
        for key in (material.key_path, tmp_path / "ca.key"):
            assert stat.S_IMODE(key.stat().st_mode) == 0o600

    @pytest.mark.parametrize("host", ["localhost", "127.0.0.1"])
    def test_a_tls_client_trusting_the_ca_completes_a_handshake(
        self, tmp_path: Path, host: str
    ) -> None:
        material = ensure_serving_cert(tmp_path, HOSTS)
        server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server_context.load_cert_chain(material.cert_path, material.key_path)
        client_context = ssl.create_default_context(cadata=material.ca_pem.decode())
        handshake(client_context, server_context, host)  # raises if verification fails

    def test_a_client_asking_for_another_name_is_refused(self, tmp_path: Path) -> None:
        material = ensure_serving_cert(tmp_path, HOSTS)
        server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server_context.load_cert_chain(material.cert_path, material.key_path)
        client_context = ssl.create_default_context(cadata=material.ca_pem.decode())
        with pytest.raises(ssl.SSLCertVerificationError):
            handshake(client_context, server_context, "elsewhere.example")

    def test_reused_when_valid(self, tmp_path: Path) -> None:
        first = ensure_serving_cert(tmp_path, HOSTS)
        cert_bytes = first.cert_path.read_bytes()
        second = ensure_serving_cert(tmp_path, HOSTS)
        assert second.ca_pem == first.ca_pem
        assert second.cert_path.read_bytes() == cert_bytes

    def test_a_new_host_reissues_the_serving_cert_under_the_same_ca(self, tmp_path: Path) -> None:
        first = ensure_serving_cert(tmp_path, HOSTS)
        second = ensure_serving_cert(tmp_path, [*HOSTS, "10.0.0.7"])
        assert second.ca_pem == first.ca_pem
        assert "10.0.0.7" in san(load(second.cert_path))[1]

    def test_a_damaged_ca_is_replaced_and_the_serving_cert_with_it(self, tmp_path: Path) -> None:
        first = ensure_serving_cert(tmp_path, HOSTS)
        (tmp_path / "ca.key").write_bytes(b"not a key")
        second = ensure_serving_cert(tmp_path, HOSTS)
        assert second.ca_pem != first.ca_pem
        load(second.cert_path).verify_directly_issued_by(load(second.ca_path))

    def test_an_expiring_serving_cert_is_renewed(self, tmp_path: Path) -> None:
        material = ensure_serving_cert(tmp_path, HOSTS)
        ca_key = serialization.load_pem_private_key(
            (tmp_path / "ca.key").read_bytes(), password=None
        )
        assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
        key = serialization.load_pem_private_key(material.key_path.read_bytes(), password=None)
        assert isinstance(key, ec.EllipticCurvePrivateKey)
        now = dt.datetime.now(dt.UTC)
        old = load(material.cert_path)
        expiring = (
            x509.CertificateBuilder()
            .subject_name(old.subject)
            .issuer_name(old.issuer)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(days=300))
            .not_valid_after(now + dt.timedelta(days=2))
            .add_extension(
                old.extensions.get_extension_for_class(x509.SubjectAlternativeName).value,
                critical=False,
            )
            .sign(ca_key, hashes.SHA256())
        )
        material.cert_path.write_bytes(expiring.public_bytes(serialization.Encoding.PEM))
        renewed = ensure_serving_cert(tmp_path, HOSTS)
        assert load(renewed.cert_path).not_valid_after_utc > now + dt.timedelta(days=300)

    def test_needs_a_host(self, tmp_path: Path) -> None:
        with pytest.raises(TLSError, match="at least one host"):
            ensure_serving_cert(tmp_path, [])


def self_signed(tmp_path: Path, name: str = "svc") -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=1))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp_path / f"{name}.crt", tmp_path / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


class TestProvided:
    def test_without_a_ca_the_bundle_is_the_cert_itself(self, tmp_path: Path) -> None:
        cert, key = self_signed(tmp_path)
        material = provided_cert(cert, key, None)
        assert material.ca_pem == cert.read_bytes()
        assert (material.cert_path, material.key_path, material.ca_path) == (cert, key, cert)

    def test_with_a_ca_the_bundle_is_the_ca(self, tmp_path: Path) -> None:
        cert, key = self_signed(tmp_path)
        ca, _ = self_signed(tmp_path, "ca")
        assert provided_cert(cert, key, ca).ca_pem == ca.read_bytes()

    def test_a_key_from_another_pair_is_refused(self, tmp_path: Path) -> None:
        cert, _ = self_signed(tmp_path, "one")
        _, other_key = self_signed(tmp_path, "two")
        with pytest.raises(TLSError, match="does not belong to certificate"):
            provided_cert(cert, other_key, None)

    def test_a_missing_file_is_named(self, tmp_path: Path) -> None:
        _, key = self_signed(tmp_path)
        with pytest.raises(TLSError, match="nope.crt does not exist"):
            provided_cert(tmp_path / "nope.crt", key, None)

    def test_a_ca_file_without_certificates_is_refused(self, tmp_path: Path) -> None:
        cert, key = self_signed(tmp_path)
        bad = tmp_path / "bad-ca.crt"
        bad.write_text("hello")
        with pytest.raises(TLSError, match="holds no PEM certificate"):
            provided_cert(cert, key, bad)


def webhook_configuration(*bundles: str | None) -> dict[str, object]:
    hooks = []
    for position, bundle in enumerate(bundles):
        client_config: dict[str, object] = {
            "service": {"namespace": "gang-system", "name": "gang-extender", "port": 9443}
        }
        if bundle is not None:
            client_config["caBundle"] = bundle
        hooks.append({"name": f"hook{position}.gang-extender.io", "clientConfig": client_config})
    return {"metadata": {"name": "gang-extender"}, "webhooks": hooks}


class TestWriteCaBundle:
    def test_every_webhook_gets_the_bundle(self) -> None:
        server = FakeApiServer()
        server.put("mutatingwebhookconfigurations", webhook_configuration(None, "b2xk"))
        write_ca_bundle(server, "gang-extender", b"PEM")
        stored = server.get("mutatingwebhookconfigurations", "gang-extender", namespace="")
        bundle = base64.b64encode(b"PEM").decode()
        assert [hook["clientConfig"]["caBundle"] for hook in stored["webhooks"]] == [bundle] * 2
        assert stored["webhooks"][0]["clientConfig"]["service"]["port"] == 9443

    def test_nothing_is_written_when_already_current(self) -> None:
        server = FakeApiServer()
        bundle = base64.b64encode(b"PEM").decode()
        server.put("mutatingwebhookconfigurations", webhook_configuration(bundle))
        write_ca_bundle(server, "gang-extender", b"PEM")
        assert server.writes == []

    def test_a_concurrent_edit_is_retried_from_a_fresh_read(self) -> None:
        server = FakeApiServer()
        server.put("mutatingwebhookconfigurations", webhook_configuration(None))
        bumped = []

        def bump_once(method: str, path: str) -> None:
            if method == "PATCH" and not bumped:
                bumped.append(path)
                current = server.get("mutatingwebhookconfigurations", "gang-extender", "")
                server.put("mutatingwebhookconfigurations", current)

        server.before = bump_once
        write_ca_bundle(server, "gang-extender", b"PEM")
        stored = server.get("mutatingwebhookconfigurations", "gang-extender", namespace="")
        assert (
            stored["webhooks"][0]["clientConfig"]["caBundle"] == base64.b64encode(b"PEM").decode()
        )
        assert [method for method, _ in server.writes] == ["PATCH", "PATCH"]

    def test_a_missing_configuration_says_what_to_apply(self) -> None:
        with pytest.raises(WebhookConfigError, match="apply deploy/webhook.yaml"):
            write_ca_bundle(FakeApiServer(), "gang-extender", b"PEM")

    def test_a_configuration_without_webhooks_is_refused(self) -> None:
        server = FakeApiServer()
        server.put("mutatingwebhookconfigurations", webhook_configuration())
        with pytest.raises(WebhookConfigError, match="lists no webhooks"):
            write_ca_bundle(server, "gang-extender", b"PEM")
