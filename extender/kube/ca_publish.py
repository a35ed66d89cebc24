"""One self-managed CA for every replica, and its certificate where kube-scheduler mounts it.

With a self-managed CA (extender.tls) each replica would make its own in its own
tls_dir (an emptyDir in deploy/), yet kube-scheduler loads the extender's caFile
once at start-up and the MutatingWebhookConfiguration holds one caBundle: after a
hand-over the new leader must serve a cert that both already trust, and so must a
restarted pod. So the first replica to start stores its CA (cert and key) in Secret
`<namespace>/gang-extender-ca`; every later replica, and every restart, adopts it
before serving and re-issues its serving cert under it.

The certificate alone is published in ConfigMap `<namespace>/gang-extender-ca`, key
`ca.crt`: deploy/scheduler mounts it at the extender's `tlsConfig.caFile`
(/etc/gang-extender/tls/ca.crt), so kube-scheduler needs no access to Secrets.

The extender requires a client certificate (mutual TLS): the same CA issues the one
kube-scheduler presents, into Secret `<namespace>/gang-extender-scheduler-client`
(`tls.crt`, `tls.key`, `ca.crt`), which deploy/scheduler mounts at the extender's
`tlsConfig.certFile`/`keyFile`. It is issued again only when it is missing, not
signed by the current CA, or within 30 days of expiry (`publish_client_cert`).
"""

from __future__ import annotations

import base64
import logging
import secrets
from pathlib import Path
from typing import Any

from extender.kube.rawapi import REQUEST_TIMEOUT_SECONDS, KubeError, RawApi, path_of
from extender.tls import (
    CA_CERT_FILE,
    CA_KEY_FILE,
    PRIVATE_FILE_MODE,
    PUBLIC_FILE_MODE,
    ClientCert,
    TLSError,
    TLSMaterial,
    client_cert_usable,
    ensure_serving_cert,
    issue_client_cert,
    write_atomically,
)

log = logging.getLogger(__name__)

CA_OBJECT_NAME = "gang-extender-ca"
CA_CONFIGMAP_KEY = "ca.crt"
HTTP_NOT_FOUND = 404
HTTP_CONFLICT = 409
# Replicas starting together race to store their CA; the loser re-reads and adopts.
MAX_CONFLICT_RETRIES = 5
FIELD_MANAGER = "gang-extender"
LABELS = {
    "app.kubernetes.io/name": "gang-extender",
    "app.kubernetes.io/managed-by": "gang-extender",
}


class CAShareError(RuntimeError):
    """The shared CA cannot be used or stored; the message says what to do."""


def share_ca(
    raw: RawApi,
    *,
    namespace: str,
    local: TLSMaterial,
    hosts: list[str],
) -> TLSMaterial:
    """The serving material every replica shares; falls back to `local` on API errors.

    `local` is what extender.tls.ensure_serving_cert made in its tls_dir. When another
    replica's CA is stored, it is written into that tls_dir and the serving cert
    re-issued under it; when none is, ours is stored. Then the CA certificate is
    published in the ConfigMap. An API failure is logged and `local` kept: a single
    replica still works, and the next restart tries again.
    """
    try:
        material = _shared(raw, namespace, local, hosts)
    except (KubeError, CAShareError) as err:
        log.warning(
            "could not share the self-managed CA through Secret %s/%s (%s); serving with this "
            "replica's own CA, which other replicas and kube-scheduler may not trust",
            namespace,
            CA_OBJECT_NAME,
            _why(err),
        )
        return local
    try:
        publish_ca_certificate(raw, namespace=namespace, ca_pem=material.ca_pem)
    except KubeError as err:
        log.warning(
            "could not publish the CA certificate in ConfigMap %s/%s: %s",
            namespace,
            CA_OBJECT_NAME,
            _why(err),
        )
    return material


def _why(err: Exception) -> str:
    """The HTTP reason phrase when the API server answered, else the error's own text."""
    if isinstance(err, KubeError):
        return err.phrase or err.message
    return str(err)


def _shared(raw: RawApi, namespace: str, local: TLSMaterial, hosts: list[str]) -> TLSMaterial:
    tls_dir = local.ca_path.parent
    material = local
    for _attempt in range(MAX_CONFLICT_RETRIES):
        stored = _get(raw, "secrets", namespace)
        if stored is None:
            if _create(raw, "secrets", namespace, _ca_secret(namespace, tls_dir)):
                log.info("stored this replica's CA in Secret %s/%s", namespace, CA_OBJECT_NAME)
                return material
            continue  # another replica stored its CA first: adopt that one
        cert, key = _secret_pair(stored, namespace)
        if cert == material.ca_pem and key == (tls_dir / CA_KEY_FILE).read_bytes():
            return material
        write_atomically(tls_dir / CA_KEY_FILE, key, PRIVATE_FILE_MODE)
        write_atomically(tls_dir / CA_CERT_FILE, cert, PUBLIC_FILE_MODE)
        material = ensure_serving_cert(tls_dir, hosts)
        if material.ca_pem == cert:
            log.info("adopted the shared CA from Secret %s/%s", namespace, CA_OBJECT_NAME)
            return material
        # The stored CA is damaged or about to expire, so ensure_serving_cert made a
        # new one: store it, guarded by the resourceVersion read (409: someone else did).
        if _replace(raw, stored, tls_dir):
            log.info("replaced an unusable CA in Secret %s/%s", namespace, CA_OBJECT_NAME)
            return material
    raise CAShareError(
        f"Secret {namespace}/{CA_OBJECT_NAME} kept changing ({MAX_CONFLICT_RETRIES} conflicts); "
        f"restart the replicas one at a time"
    )


def publish_ca_certificate(raw: RawApi, *, namespace: str, ca_pem: bytes) -> None:
    """ConfigMap `<namespace>/gang-extender-ca` with `ca.crt`; no write when already equal."""
    data = {CA_CONFIGMAP_KEY: ca_pem.decode("ascii")}
    existing = _get(raw, "configmaps", namespace)
    if existing is None:
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": CA_OBJECT_NAME, "namespace": namespace, "labels": LABELS},
            "data": data,
        }
        if _create(raw, "configmaps", namespace, body):
            log.info("published the CA certificate in ConfigMap %s/%s", namespace, CA_OBJECT_NAME)
            return
        existing = _get(raw, "configmaps", namespace) or {}
    if (existing.get("data") or {}).get(CA_CONFIGMAP_KEY) == data[CA_CONFIGMAP_KEY]:
        return
    raw.call(
        "PATCH",
        _path("configmaps", namespace, CA_OBJECT_NAME),
        query={"fieldManager": FIELD_MANAGER},
        body={"data": data},
        content_type="application/merge-patch+json",
        timeout=REQUEST_TIMEOUT_SECONDS,
    )
    log.info("updated the CA certificate in ConfigMap %s/%s", namespace, CA_OBJECT_NAME)


TLS_CERT_KEY = "tls.crt"
TLS_KEY_KEY = "tls.key"


def publish_client_cert(
    raw: RawApi, *, namespace: str, secret_name: str, material: TLSMaterial, common_name: str
) -> bool:
    """Secret `<namespace>/<secret_name>` holds a client cert for `common_name` under our CA.

    Kept when still usable (`extender.tls.client_cert_usable`), so a running
    kube-scheduler's certificate stays the one stored; else issued and written
    (created, or replaced guarded by the resourceVersion read). True when written.
    Raises KubeError on API failures, CAShareError when no CA key is at hand.
    """
    stored = _get(raw, "secrets", namespace, secret_name)
    if stored is not None:
        data = stored.get("data") or {}
        try:
            current = ClientCert(
                cert_pem=base64.b64decode(data.get(TLS_CERT_KEY) or ""),
                key_pem=base64.b64decode(data.get(TLS_KEY_KEY) or ""),
            )
        except ValueError:
            current = ClientCert(b"", b"")
        if client_cert_usable(current, material.ca_pem, common_name):
            return False
    try:
        client = issue_client_cert(material.ca_path.parent, common_name)
    except TLSError as err:
        raise CAShareError(str(err)) from None
    encoded = {
        TLS_CERT_KEY: base64.b64encode(client.cert_pem).decode("ascii"),
        TLS_KEY_KEY: base64.b64encode(client.key_pem).decode("ascii"),
        CA_CERT_FILE: base64.b64encode(material.ca_pem).decode("ascii"),
    }
    if stored is None:
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/tls",
            "metadata": {"name": secret_name, "namespace": namespace, "labels": LABELS},
            "data": encoded,
        }
        if not _create(raw, "secrets", namespace, body):
            return False  # another replica wrote one at the same moment; it is under our CA
    elif not _patch_secret_data(raw, stored, encoded):
        return False
    log.info(
        "issued kube-scheduler's client certificate (%s) into Secret %s/%s",
        common_name,
        namespace,
        secret_name,
    )
    return True


WEBHOOK_TOKEN_KEY = "token"
# 32 random bytes, URL-safe: the path segment the API server alone is told.
WEBHOOK_TOKEN_BYTES = 32


def shared_webhook_token(raw: RawApi, *, namespace: str, secret_name: str) -> str:
    """The webhook's secret path segment, the same for every replica: read from Secret
    `<namespace>/<secret_name>`, or made and stored there by the first replica.

    Raises KubeError when the API server cannot be asked (the caller stops start-up:
    without it the webhook could not be reached at the configured path).
    """
    for _attempt in range(MAX_CONFLICT_RETRIES):
        stored = _get(raw, "secrets", namespace, secret_name)
        if stored is not None:
            stored_token = base64.b64decode((stored.get("data") or {}).get(WEBHOOK_TOKEN_KEY) or "")
            if stored_token:
                return stored_token.decode("ascii")
            raise CAShareError(
                f"Secret {namespace}/{secret_name} has no {WEBHOOK_TOKEN_KEY!r}; delete it and "
                f"restart gang-extender (a new one is made and written into the webhook path)"
            )
        token = secrets.token_urlsafe(WEBHOOK_TOKEN_BYTES)
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "Opaque",
            "metadata": {"name": secret_name, "namespace": namespace, "labels": LABELS},
            "data": {WEBHOOK_TOKEN_KEY: base64.b64encode(token.encode()).decode("ascii")},
        }
        if _create(raw, "secrets", namespace, body):
            log.info("stored a new webhook path token in Secret %s/%s", namespace, secret_name)
            return token
    raise CAShareError(f"Secret {namespace}/{secret_name} kept changing; restart gang-extender")


def _ca_secret(namespace: str, tls_dir: Path) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {"name": CA_OBJECT_NAME, "namespace": namespace, "labels": LABELS},
        "data": _secret_data(tls_dir),
    }


def _secret_data(tls_dir: Path) -> dict[str, str]:
    return {
        CA_CERT_FILE: base64.b64encode((tls_dir / CA_CERT_FILE).read_bytes()).decode("ascii"),
        CA_KEY_FILE: base64.b64encode((tls_dir / CA_KEY_FILE).read_bytes()).decode("ascii"),
    }


def _secret_pair(secret: dict[str, Any], namespace: str) -> tuple[bytes, bytes]:
    data = secret.get("data") or {}
    if not data.get(CA_CERT_FILE) or not data.get(CA_KEY_FILE):
        raise CAShareError(
            f"Secret {namespace}/{CA_OBJECT_NAME} lacks {CA_CERT_FILE} or {CA_KEY_FILE}; "
            f"delete it and restart gang-extender (a new CA is made and stored)"
        )
    return base64.b64decode(data[CA_CERT_FILE]), base64.b64decode(data[CA_KEY_FILE])


def _replace(raw: RawApi, stored: dict[str, Any], tls_dir: Path) -> bool:
    return _patch_secret_data(raw, stored, _secret_data(tls_dir))


def _patch_secret_data(raw: RawApi, stored: dict[str, Any], data: dict[str, str]) -> bool:
    """Replace the data of Secret `stored` at the version read; False when another
    replica changed it first (409): the caller reads what that replica wrote."""
    meta = stored["metadata"]
    patch = {"metadata": {"resourceVersion": meta["resourceVersion"]}, "data": data}
    try:
        raw.call(
            "PATCH",
            _path("secrets", meta["namespace"], meta["name"]),
            query={"fieldManager": FIELD_MANAGER},
            body=patch,
            content_type="application/merge-patch+json",
            timeout=REQUEST_TIMEOUT_SECONDS,
        )
    except KubeError as error:
        if error.status == HTTP_CONFLICT:
            return False
        raise
    return True


def _path(resource: str, namespace: str, name: str | None = None) -> str:
    parts = ["api", "v1", "namespaces", namespace, resource]
    return path_of(*parts, name) if name is not None else path_of(*parts)


def _get(
    raw: RawApi, resource: str, namespace: str, name: str = CA_OBJECT_NAME
) -> dict[str, Any] | None:
    """Our object of `resource` ("secrets", "configmaps"); None when there is none."""
    try:
        return raw.call("GET", _path(resource, namespace, name), timeout=REQUEST_TIMEOUT_SECONDS)
    except KubeError as error:
        if error.status == HTTP_NOT_FOUND:
            return None
        raise


def _create(raw: RawApi, resource: str, namespace: str, body: dict[str, Any]) -> bool:
    """POST `body`; False when it already exists (409), so the caller re-reads it."""
    try:
        raw.call(
            "POST",
            _path(resource, namespace),
            query={"fieldManager": FIELD_MANAGER},
            body=body,
            timeout=REQUEST_TIMEOUT_SECONDS,
        )
    except KubeError as error:
        if error.status == HTTP_CONFLICT:
            return False
        raise
    return True
