"""Mutual TLS on a listener, on a real TLS socket: no certificate, a certificate of
another CA, and one of the right CA naming someone else are all refused."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import pytest

from extender.api.client_auth import identity_checked, peer_identities
from extender.tls import ensure_serving_cert, issue_client_cert


def test_peer_identities_are_common_names_and_dns_sans() -> None:
    peercert = {
        "subject": ((("organizationName", "x"),), (("commonName", "gang-scheduler"),)),
        "subjectAltName": (("DNS", "sched.example"), ("IP Address", "10.0.0.1")),
    }
    assert peer_identities(peercert) == {"gang-scheduler", "sched.example"}
    assert peer_identities(None) == set()


class Echo(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        assert isinstance(self.transport, asyncio.Transport)
        self.transport.write(b"ok:" + data)


def client_context(ca: Path, cert: Path | None, key: Path | None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca))
    if cert is not None and key is not None:
        context.load_cert_chain(str(cert), str(key))
    return context


def write_client(tmp_path: Path, tls_dir: Path, name: str) -> tuple[Path, Path]:
    client = issue_client_cert(tls_dir, name)
    cert, key = tmp_path / f"{name}.crt", tmp_path / f"{name}.key"
    cert.write_bytes(client.cert_pem)
    key.write_bytes(client.key_pem)
    return cert, key


async def exchange(port: int, context: ssl.SSLContext) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
    writer.write(b"hello")
    await writer.drain()
    try:
        return await asyncio.wait_for(reader.read(100), timeout=10)
    finally:
        writer.close()


@pytest.mark.parametrize(
    ("who", "answered"),
    [
        pytest.param("gang-scheduler", True, id="the scheduler's certificate"),
        pytest.param("someone-else", False, id="same CA, another name"),
        pytest.param("other-ca", False, id="a certificate of another CA"),
        pytest.param("none", False, id="no certificate"),
    ],
)
async def test_only_the_named_client_of_the_ca_is_answered(
    tmp_path: Path, who: str, answered: bool
) -> None:
    server_tls = ensure_serving_cert(tmp_path / "server", ["127.0.0.1"])
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(server_tls.cert_path), str(server_tls.key_path))
    context.verify_mode = ssl.CERT_REQUIRED
    context.load_verify_locations(str(server_tls.ca_path))
    protocol = identity_checked(Echo, listener="test", allowed=["gang-scheduler"])
    server = await asyncio.get_running_loop().create_server(protocol, "127.0.0.1", 0, ssl=context)
    port = server.sockets[0].getsockname()[1]
    if who == "none":
        cert = key = None
    elif who == "other-ca":
        other = ensure_serving_cert(tmp_path / "other", ["127.0.0.1"])
        cert, key = write_client(tmp_path, other.ca_path.parent, "gang-scheduler")
    else:
        cert, key = write_client(tmp_path, server_tls.ca_path.parent, who)
    try:
        answer = await answer_or_refusal(port, client_context(server_tls.ca_path, cert, key))
        assert answer == (b"ok:hello" if answered else b"refused")
    finally:
        server.close()
        await server.wait_closed()


async def answer_or_refusal(port: int, context: ssl.SSLContext) -> bytes:
    """What the server answered, or b"refused" when it answered nothing.

    With TLS 1.3 the client finishes its side of the handshake before the server
    has checked the client's certificate, so a refusal shows as an alert on the
    first read, a reset, or a connection closed without a byte.
    """
    try:
        return await exchange(port, context) or b"refused"
    except (ssl.SSLError, ConnectionError):
        return b"refused"
