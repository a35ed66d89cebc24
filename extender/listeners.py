"""The listeners `gang-extender serve` opens and each one's uvicorn server.

Which listeners a mode opens (`listeners`), and the server config of each: the
extender (HTTPS, mutual TLS), the webhook (HTTPS, client certificates when asked
for) and metrics/health (HTTP). service.py builds the apps and runs the servers.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import uvicorn
from uvicorn.config import HTTP_PROTOCOLS
from uvicorn.importer import import_from_string

from extender.api.client_auth import identity_checked
from extender.config import WIRING_ONLY, Settings
from extender.tls import TLSMaterial

EXTENDER, WEBHOOK, METRICS = "extender", "webhook", "metrics"


def listeners(settings: Settings) -> tuple[str, ...]:
    """The listeners `run` opens. Wiring-only mode answers no extender verb, so it opens
    no extender port at all: a kube-scheduler still pointed at it fails to connect, and
    its log says so, rather than being told "not a gang" and placing pods piecemeal."""
    if settings.mode == WIRING_ONLY:
        return (WEBHOOK, METRICS)
    return (EXTENDER, WEBHOOK, METRICS)


def server_configs(
    s: Settings,
    tls: TLSMaterial,
    *,
    extender_app: Any,
    webhook_app: Any,
    health_app: Any,
    client_ca: Path | None,
    hook_client_ca: Path | None,
) -> list[uvicorn.Config]:
    """One config a listener; no extender listener when `client_ca` is None (wiring-only)."""

    def config(app: Any, port: int, **extra: Any) -> uvicorn.Config:
        return uvicorn.Config(
            app,
            host=s.bind_address,
            port=port,
            log_level="warning",
            access_log=False,
            timeout_graceful_shutdown=s.shutdown_grace_seconds,
            **extra,
        )

    served = {"ssl_certfile": str(tls.cert_path), "ssl_keyfile": str(tls.key_path)}
    # Mutual TLS: a caller without a certificate from client_ca is refused in the
    # handshake; one whose certificate names none of the accepted identities is
    # disconnected before its request is read (extender.api.client_auth).
    configs = (
        []
        if client_ca is None
        else [
            config(
                extender_app,
                s.extender_port,
                **served,
                ssl_cert_reqs=ssl.CERT_REQUIRED,
                ssl_ca_certs=str(client_ca),
                http=http_protocol("extender", s.extender_client_names),
                timeout_keep_alive=s.extender_keep_alive_seconds,
            )
        ]
    )
    configs += [
        config(
            webhook_app,
            s.webhook_port,
            **served,
            ssl_cert_reqs=ssl.CERT_NONE if hook_client_ca is None else ssl.CERT_REQUIRED,
            ssl_ca_certs=None if hook_client_ca is None else str(hook_client_ca),
            http=(
                "auto"
                if hook_client_ca is None
                else http_protocol("webhook", s.webhook_client_names)
            ),
            timeout_keep_alive=WEBHOOK_KEEP_ALIVE_SECONDS,
        ),
        config(health_app, s.metrics_port),
    ]
    return configs


# The API server's webhook client (Go's http.Transport, apimachinery's defaults) keeps
# an idle connection 90 s and reuses it; a server closing it sooner (uvicorn's default
# is 5 s) races a POST sent on it at that moment, which the client does not retry: the
# admission fails with "failed to call webhook: ... EOF" (seen once in make test).
# Longer than the client's, so the client is the one that closes.
WEBHOOK_KEEP_ALIVE_SECONDS = 120


def http_protocol(listener: str, names: list[str]) -> type[asyncio.Protocol] | str:
    """uvicorn's HTTP protocol, checking the client certificate's identity when names are set."""
    if not names:
        return "auto"
    base = import_from_string(HTTP_PROTOCOLS["auto"])
    return identity_checked(base, listener=listener, allowed=names)


class QuietServer(uvicorn.Server):
    """Signals are handled once for all three servers by GangService."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield
