"""Both listeners keep idle connections longer than their Go clients do.

The API server's webhook client (Go's http.Transport with apimachinery's defaults)
reuses an idle connection for 90 s; a server that closes it first races a POST sent
on it, which the client does not retry ("failed to call webhook: ... EOF")."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from extender.config import Settings
from extender.listeners import server_configs

GO_CLIENT_IDLE_CONN_TIMEOUT_SECONDS = 90


def _listener(name: str) -> Any:
    """The uvicorn config of listener `name` ("extender" or "webhook"), defaults."""
    settings = Settings()
    tls: Any = SimpleNamespace(cert_path=Path("/x/tls.crt"), key_path=Path("/x/tls.key"))
    configs = server_configs(
        settings,
        tls,
        extender_app="extender",
        webhook_app="webhook",
        health_app=object(),
        client_ca=Path("/x/ca.crt"),  # with a client CA, the extender listener exists
        hook_client_ca=None,
    )
    [config] = [c for c in configs if c.app == name]
    assert config.port == getattr(settings, f"{name}_port")
    return config


def test_the_webhook_listener_outlives_the_api_servers_idle_connections() -> None:
    assert _listener("webhook").timeout_keep_alive > GO_CLIENT_IDLE_CONN_TIMEOUT_SECONDS


def test_the_extender_listener_outlives_kube_schedulers_idle_connections() -> None:
    # kube-scheduler's extender client uses the same transport defaults (90 s idle).
    assert _listener("extender").timeout_keep_alive > GO_CLIENT_IDLE_CONN_TIMEOUT_SECONDS
