"""Keeps the caBundle of our MutatingWebhookConfiguration equal to the CA we serve with.

With a self-managed CA (extender.tls) nobody else knows our CA, so the API server
could not verify the webhook until we write it here. Written at start-up, after
the serving cert is ready and before the webhook can be called usefully.
"""

from __future__ import annotations

import base64
import logging
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from extender.kube.rawapi import REQUEST_TIMEOUT_SECONDS, KubeError, RawApi, path_of

log = logging.getLogger(__name__)

HTTP_NOT_FOUND = 404
HTTP_CONFLICT = 409
# A concurrent edit (kubectl apply of deploy/) makes our write conflict; re-read and retry.
MAX_CONFLICT_RETRIES = 5
FIELD_MANAGER = "gang-extender"


class WebhookConfigError(RuntimeError):
    """The configuration to update is missing or has no webhooks; the message says what to apply."""


def write_ca_bundle(raw: RawApi, config_name: str, ca_pem: bytes) -> None:
    """Set `clientConfig.caBundle` of every webhook in MutatingWebhookConfiguration `config_name`.

    No write when every bundle is already `ca_pem`. Raises WebhookConfigError when the
    configuration does not exist or lists no webhook, KubeError on other API errors.
    """
    write_client_config(raw, config_name, ca_pem=ca_pem, mutate_path=None)


def write_client_config(
    raw: RawApi, config_name: str, *, ca_pem: bytes | None, mutate_path: str | None
) -> None:
    """Set every webhook's `clientConfig.caBundle` (unless None) and path (unless None).

    The path is `service.path`, or the path of `url` for a webhook called by URL.
    No write when both are already so; errors as `write_ca_bundle`.
    """
    bundle = None if ca_pem is None else base64.b64encode(ca_pem).decode("ascii")
    for _attempt in range(MAX_CONFLICT_RETRIES):
        config = _read(raw, config_name)
        patch = client_config_patch(config, bundle, mutate_path)
        if not patch:
            return
        try:
            raw.call(
                "PATCH",
                _path(config_name),
                query={"fieldManager": FIELD_MANAGER},
                body=patch,
                content_type="application/json-patch+json",
                timeout=REQUEST_TIMEOUT_SECONDS,
            )
        except KubeError as error:
            if error.status == HTTP_CONFLICT:
                continue
            raise
        log.info("wrote the client config into MutatingWebhookConfiguration %s", config_name)
        return
    raise WebhookConfigError(
        f"MutatingWebhookConfiguration {config_name} kept changing while its caBundle was "
        f"written ({MAX_CONFLICT_RETRIES} conflicts); stop the other writer and restart"
    )


def client_config_patch(
    config: dict[str, Any], bundle_b64: str | None, mutate_path: str | None
) -> list[dict[str, Any]]:
    """`ca_bundle_patch` and, when `mutate_path` is given, every webhook's path set to it."""
    ops = ca_bundle_patch(config, bundle_b64) if bundle_b64 is not None else []
    if mutate_path is None:
        return ops
    path_ops: list[dict[str, Any]] = []
    for position, hook in enumerate(config.get("webhooks") or []):
        client = hook.get("clientConfig") or {}
        if "service" in client:
            if (client["service"] or {}).get("path") != mutate_path:
                path_ops.append(
                    {
                        "op": "add",
                        "path": f"/webhooks/{position}/clientConfig/service/path",
                        "value": mutate_path,
                    }
                )
        elif "url" in client:
            url = urlsplit(client["url"])
            if url.path != mutate_path:
                wanted = urlunsplit((url.scheme, url.netloc, mutate_path, "", ""))
                path_ops.append(
                    {
                        "op": "replace",
                        "path": f"/webhooks/{position}/clientConfig/url",
                        "value": wanted,
                    }
                )
    if not path_ops:
        return ops
    if not ops:
        meta = config.get("metadata") or {}
        ops = [
            {"op": "replace", "path": "/metadata/resourceVersion", "value": meta["resourceVersion"]}
        ]
    return ops + path_ops


def ca_bundle_patch(config: dict[str, Any], bundle_b64: str) -> list[dict[str, Any]]:
    """JSON patch setting every webhook's caBundle; empty when all are already set.

    It first sets metadata.resourceVersion to the one read: the API server then
    rejects the patch with 409 if the configuration changed since (webhooks
    added or reordered), and the caller re-reads instead of patching the wrong entry.
    """
    meta = config.get("metadata") or {}
    webhooks = config.get("webhooks") or []
    if not webhooks:
        raise WebhookConfigError(
            f"MutatingWebhookConfiguration {meta.get('name')} lists no webhooks; "
            f"apply deploy/webhook.yaml"
        )
    if all((hook.get("clientConfig") or {}).get("caBundle") == bundle_b64 for hook in webhooks):
        return []
    ops: list[dict[str, Any]] = [
        {"op": "replace", "path": "/metadata/resourceVersion", "value": meta["resourceVersion"]}
    ]
    # `add` on an object member sets it whether or not it exists (RFC 6902 4.1).
    ops += [
        {"op": "add", "path": f"/webhooks/{position}/clientConfig/caBundle", "value": bundle_b64}
        for position in range(len(webhooks))
    ]
    return ops


def _path(name: str) -> str:
    return path_of(
        "apis", "admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations", name
    )


def _read(raw: RawApi, name: str) -> dict[str, Any]:
    try:
        return raw.call("GET", _path(name), timeout=REQUEST_TIMEOUT_SECONDS)
    except KubeError as error:
        if error.status == HTTP_NOT_FOUND:
            raise WebhookConfigError(
                f"MutatingWebhookConfiguration {name} does not exist, so its CA bundle cannot "
                f"be written; apply deploy/webhook.yaml (kubectl apply -k deploy/) first, or "
                f"set webhook_config_name to the configuration's name"
            ) from None
        raise
