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
"""

from __future__ import annotations

import base64
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

from extender.kube.rawapi import KubeError, RawApi, path_of
from extender.tls import (
    CA_CERT_FILE,
    CA_KEY_FILE,
    PRIVATE_FILE_MODE,
    PUBLIC_FILE_MODE,
    TLSMaterial,
    ensure_serving_cert,
)

log = logging.getLogger(__name__)

CA_OBJECT_NAME = "gang-extender-ca"
CA_CONFIGMAP_KEY = "ca.crt"
HTTP_NOT_FOUND = 404
HTTP_CONFLICT = 409
# Replicas starting together race to store their CA; the loser re-reads and adopts.
MAX_CONFLICT_RETRIES = 5
REQUEST_TIMEOUT_SECONDS = 10.0
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
        _write(tls_dir / CA_KEY_FILE, key, PRIVATE_FILE_MODE)
        _write(tls_dir / CA_CERT_FILE, cert, PUBLIC_FILE_MODE)
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
    meta = stored["metadata"]
    patch = {
        "metadata": {"resourceVersion": meta["resourceVersion"]},
        "data": _secret_data(tls_dir),
    }
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


def _get(raw: RawApi, resource: str, namespace: str) -> dict[str, Any] | None:
    """Our object of `resource` ("secrets", "configmaps"); None when there is none."""
    try:
        return raw.call(
            "GET", _path(resource, namespace, CA_OBJECT_NAME), timeout=REQUEST_TIMEOUT_SECONDS
        )
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


def _write(path: Path, content: bytes, mode: int) -> None:
    """Atomic, with `mode` from the first byte (the CA key is never briefly world-readable)."""
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(content)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
