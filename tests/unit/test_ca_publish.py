"""The shared CA: stored once in Secret gang-extender-ca, adopted by every other replica,
its certificate published in ConfigMap gang-extender-ca (against a fake RawApi)."""

from __future__ import annotations

import base64
import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from extender.kube.ca_publish import publish_client_cert, share_ca
from extender.kube.rawapi import KubeError
from extender.tls import ClientCert, client_cert_usable, ensure_serving_cert
from tests.unit.test_webhook_wiring import FakeApiServer

NS = "gang-system"
HOSTS = ["localhost"]


class CaApiServer(FakeApiServer):
    """FakeApiServer that also takes the merge patches the CA code sends."""

    def call(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float = 30.0,
    ) -> dict[str, Any]:
        if method != "PATCH":
            return super().call(
                method, path, query=query, body=body, content_type=content_type, timeout=timeout
            )
        self.requests.append((method, path))
        self.sent.append((method, path, dict(query or {}), content_type))
        self.writes.append((method, path.split("/")[5]))
        assert content_type == "application/merge-patch+json"
        _, _, _, _, namespace, resource, name = path.split("/")
        current = self.objects[(resource, namespace, name)]
        version = (body.get("metadata") or {}).get("resourceVersion")
        if version is not None and version != current["metadata"]["resourceVersion"]:
            raise KubeError(409, "the object has been modified", "Conflict", phrase="Conflict")
        patched = copy.deepcopy(current)
        patched["data"] = {**(current.get("data") or {}), **body["data"]}
        self.put(resource, patched)
        return copy.deepcopy(self.objects[(resource, namespace, name)])


def test_the_first_replica_stores_its_ca_and_publishes_the_certificate(tmp_path: Path) -> None:
    server = CaApiServer()
    local = ensure_serving_cert(tmp_path, HOSTS)
    assert share_ca(server, namespace=NS, local=local, hosts=HOSTS) == local
    stored = server.get("secrets", "gang-extender-ca", namespace=NS)
    assert base64.b64decode(stored["data"]["ca.crt"]) == local.ca_pem
    published = server.get("configmaps", "gang-extender-ca", namespace=NS)
    assert published["data"] == {"ca.crt": local.ca_pem.decode()}
    ours = {"fieldManager": "gang-extender"}
    base = f"/api/v1/namespaces/{NS}"
    json = "application/json"
    assert server.sent == [
        ("GET", f"{base}/secrets/gang-extender-ca", {}, json),
        ("POST", f"{base}/secrets", ours, json),
        ("GET", f"{base}/configmaps/gang-extender-ca", {}, json),
        ("POST", f"{base}/configmaps", ours, json),
    ]


def test_a_later_replica_adopts_the_stored_ca(tmp_path: Path) -> None:
    server = CaApiServer()
    first = ensure_serving_cert(tmp_path / "a", HOSTS)
    share_ca(server, namespace=NS, local=first, hosts=HOSTS)
    second = share_ca(
        server, namespace=NS, local=ensure_serving_cert(tmp_path / "b", HOSTS), hosts=HOSTS
    )
    assert second.ca_pem == first.ca_pem
    assert (tmp_path / "b" / "ca.key").read_bytes() == (tmp_path / "a" / "ca.key").read_bytes()
    assert [method for method, _ in server.writes] == ["POST", "POST"]


def test_an_unusable_stored_ca_is_replaced_guarded_by_its_version(tmp_path: Path) -> None:
    server = CaApiServer()
    first = ensure_serving_cert(tmp_path / "a", HOSTS)
    share_ca(server, namespace=NS, local=first, hosts=HOSTS)
    stored = server.get("secrets", "gang-extender-ca", namespace=NS)
    stored["data"]["ca.crt"] = base64.b64encode(b"junk").decode()
    replaced = share_ca(
        server, namespace=NS, local=ensure_serving_cert(tmp_path / "b", HOSTS), hosts=HOSTS
    )
    assert replaced.ca_pem != first.ca_pem
    stored = server.get("secrets", "gang-extender-ca", namespace=NS)
    assert base64.b64decode(stored["data"]["ca.crt"]) == replaced.ca_pem
    patches = [
        (path, query, kind) for method, path, query, kind in server.sent if method == "PATCH"
    ]
    assert patches == [
        (
            f"/api/v1/namespaces/{NS}/secrets/gang-extender-ca",
            {"fieldManager": "gang-extender"},
            "application/merge-patch+json",
        ),
        (
            f"/api/v1/namespaces/{NS}/configmaps/gang-extender-ca",
            {"fieldManager": "gang-extender"},
            "application/merge-patch+json",
        ),
    ]


def test_api_failures_keep_the_replicas_own_ca(tmp_path: Path) -> None:
    server = CaApiServer()
    server.fail_with = 503
    local = ensure_serving_cert(tmp_path, HOSTS)
    assert share_ca(server, namespace=NS, local=local, hosts=HOSTS) == local


# ---- kube-scheduler's client certificate (mutual TLS on the extender) ----
CLIENT_SECRET = "gang-extender-scheduler-client"


def stored_client(server: CaApiServer) -> tuple[bytes, bytes]:
    data = server.get("secrets", CLIENT_SECRET, namespace=NS)["data"]
    return base64.b64decode(data["tls.crt"]), base64.b64decode(data["tls.key"])


def test_the_scheduler_client_cert_is_issued_under_the_shared_ca_once(tmp_path: Path) -> None:
    from cryptography import x509
    from cryptography.x509.oid import ExtendedKeyUsageOID

    server = CaApiServer()
    material = share_ca(
        server, namespace=NS, local=ensure_serving_cert(tmp_path, HOSTS), hosts=HOSTS
    )
    assert publish_client_cert(
        server,
        namespace=NS,
        secret_name=CLIENT_SECRET,
        material=material,
        common_name="gang-scheduler",
    )
    cert_pem, _ = stored_client(server)
    cert = x509.load_pem_x509_certificate(cert_pem)
    cert.verify_directly_issued_by(x509.load_pem_x509_certificate(material.ca_pem))
    usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usages) == [ExtendedKeyUsageOID.CLIENT_AUTH]  # not a serving cert
    # A usable one is kept: a running kube-scheduler's certificate stays the stored one.
    assert not publish_client_cert(
        server,
        namespace=NS,
        secret_name=CLIENT_SECRET,
        material=material,
        common_name="gang-scheduler",
    )
    assert stored_client(server)[0] == cert_pem


def test_a_client_cert_of_another_ca_is_replaced(tmp_path: Path) -> None:
    server = CaApiServer()
    old = ensure_serving_cert(tmp_path / "old", HOSTS)
    publish_client_cert(
        server, namespace=NS, secret_name=CLIENT_SECRET, material=old, common_name="gang-scheduler"
    )
    new = ensure_serving_cert(tmp_path / "new", HOSTS)  # the CA was rotated
    assert publish_client_cert(
        server, namespace=NS, secret_name=CLIENT_SECRET, material=new, common_name="gang-scheduler"
    )
    assert client_cert_usable(ClientCert(*stored_client(server)), new.ca_pem, "gang-scheduler")
    assert not client_cert_usable(ClientCert(*stored_client(server)), old.ca_pem, "gang-scheduler")
