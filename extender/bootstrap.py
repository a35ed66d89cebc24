"""What the service needs before and while it starts serving, and when it is Ready.

Start-up inputs that can be wrong and must say what to fix (`StartupError`): the
placement policy, the API client from the kubeconfig (or in-cluster), the serving
TLS material. The self-managed CA's bundle in the MutatingWebhookConfiguration
(`CaBundle`: written at start, then again in the background with a bounded
backoff until it is). `readiness` combines what /readyz answers from.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from extender.config import Settings
from extender.domain.objects.policy import Policy, PolicyError
from extender.kube.leader import LeaderElector
from extender.kube.rawapi import KubeconfigError, load_api_client
from extender.kube.webhook_config import WebhookConfigError
from extender.kube.writers import api_error_summary
from extender.metrics import Metrics
from extender.policy_file import load_policy
from extender.tls import (
    TLSError,
    TLSMaterial,
    ensure_serving_cert,
    provided_cert,
    provided_cert_bundle,
)

log = logging.getLogger(__name__)

# kind label of gang_extender_api_write_errors_total
WRITE_CA_BUNDLE = "ca-bundle"


class StartupError(Exception):
    """The service cannot start with this configuration; the message says what to fix."""


def policy_from(settings: Settings) -> Policy:
    """The placement policy of settings.policy (built-in binpack when unset)."""
    try:
        return load_policy(settings.policy)
    except PolicyError as err:
        raise StartupError(str(err)) from None


# Long-lived connections beside the binder's and the API threads': the watches (one
# per kind the cache follows) and the leader lease.
WATCH_CONNECTIONS = 16


def api_pool_size(settings: Settings) -> int:
    """Connections the one API client keeps: one per thread that may call at once. With
    fewer, urllib3 discards the surplus after each burst ("Connection pool is full"),
    and the next burst opens new TLS connections: 923-1,133 discards per 5,000-node run
    with 32 API threads, 32 binder workers and a pool of 32."""
    return settings.binder_workers + settings.api_threads + WATCH_CONNECTIONS


def use_api_threads(loop: asyncio.AbstractEventLoop, settings: Settings) -> None:
    """Give asyncio.to_thread, which makes every API write and list off the loop,
    `settings.api_threads` threads instead of Python's default pool."""
    loop.set_default_executor(
        ThreadPoolExecutor(max_workers=settings.api_threads, thread_name_prefix="api")
    )


def api_client_from(settings: Settings) -> Any:
    """The API client from settings.kubeconfig (else in-cluster); StartupError if unusable."""
    path = settings.kubeconfig
    hint = "give a readable kubeconfig with --kubeconfig (or GANG_KUBECONFIG)"
    if path is not None:
        if not path.is_file():
            raise StartupError(f"kubeconfig {path} does not exist or is not a file; {hint}")
        try:
            path.read_bytes()
        except OSError as err:
            raise StartupError(
                f"kubeconfig {path} cannot be read ({err.strerror}); {hint}"
            ) from None
    try:
        return load_api_client(
            str(path) if path is not None else None, pool_size=api_pool_size(settings)
        )
    except Exception as err:
        # Only the library's own messages are quoted: a YAML error would quote the
        # file's text, which may hold a token.
        why = str(err) if isinstance(err, KubeconfigError) else type(err).__name__
        if path is None:
            raise StartupError(
                f"no kubeconfig given and no in-cluster configuration ({why}); {hint}"
            ) from None
        raise StartupError(f"kubeconfig {path} is not usable ({why}); {hint}") from None


def serving_tls(settings: Settings) -> TLSMaterial:
    """The serving cert and key; StartupError when they cannot be read or made."""
    s = settings
    if s.tls_cert and s.tls_key:
        try:
            return provided_cert(s.tls_cert, s.tls_key, None)
        except TLSError as err:
            raise StartupError(f"--tls-cert/--tls-key: {err}") from None
        except OSError as err:
            raise StartupError(
                f"--tls-cert/--tls-key: cannot read {err.filename}: {err.strerror}; "
                f"give readable PEM files"
            ) from None
    try:
        return ensure_serving_cert(s.tls_dir, list(s.tls_hosts))
    except TLSError as err:
        raise StartupError(f"self-managed TLS in {s.tls_dir}: {err}") from None
    except OSError as err:
        raise StartupError(
            f"self-managed TLS: cannot use {err.filename or s.tls_dir}: {err.strerror}; "
            f"set --tls-dir (GANG_TLS_DIR) to a writable directory"
        ) from None


def extender_client_ca(settings: Settings, tls: TLSMaterial) -> Path:
    """The CA bundle the extender's callers' certificates must chain to (mutual TLS).

    Unset: the self-managed CA (it issues kube-scheduler's certificate). With a
    provided serving cert there is no CA of ours: it must be given.
    """
    path = settings.extender_client_ca
    if path is None:
        if settings.tls_cert:
            raise StartupError(
                "the extender requires client certificates: with --tls-cert give "
                "GANG_EXTENDER_CLIENT_CA (the CA that signed kube-scheduler's client cert)"
            )
        return tls.ca_path
    return _readable_bundle(path, "GANG_EXTENDER_CLIENT_CA")


def webhook_client_ca(settings: Settings) -> Path | None:
    """The CA bundle the webhook's callers must chain to; None: the webhook asks for none."""
    path = settings.webhook_client_ca
    return None if path is None else _readable_bundle(path, "GANG_WEBHOOK_CLIENT_CA")


def _readable_bundle(path: Path, variable: str) -> Path:
    try:
        provided_cert_bundle(path)
    except TLSError as err:
        raise StartupError(f"{variable}: {err}") from None
    return path


class CaBundle:
    """The self-managed CA in MutatingWebhookConfiguration settings.webhook_config_name.

    `write(config_name, ca_pem)` does the API call (blocking; run in a thread); the
    service's writer also sets the webhook's secret path (extender.api.webhook_path).
    With a provided cert and no secret path, or no configuration name, `written` is
    true from the start.
    """

    def __init__(
        self, settings: Settings, metrics: Metrics, write: Callable[[str, bytes], None]
    ) -> None:
        self.settings = settings
        self.metrics = metrics
        self.name = settings.webhook_config_name
        self._write = write
        # Written by us: the self-managed CA, and the webhook's secret path (whatever
        # the TLS mode). A provided cert's CA is someone else's to write (cert-manager).
        self.written = not (
            settings.webhook_config_name and (not settings.tls_cert or settings.webhook_path_secret)
        )

    async def write(self, ca_pem: bytes, retry_in: float) -> bool:
        """One attempt; a failure is logged (saying when it is tried again) and counted."""
        name = self.name
        if not name:
            return True
        try:
            await asyncio.to_thread(self._write, name, ca_pem)
        except WebhookConfigError as err:  # our own text: says what to apply
            why = str(err)
        except Exception as err:
            why = api_error_summary(err)
        else:
            self.written = True
            return True
        self.metrics.api_write_errors.labels(kind=WRITE_CA_BUNDLE).inc()
        log.warning(
            "could not write the CA bundle into MutatingWebhookConfiguration %s: %s; "
            "not Ready until it is written, trying again in %.0fs",
            name,
            why,
            retry_in,
        )
        return False

    async def keep_writing(self, ca_pem: bytes) -> None:
        """Until the CA bundle is in the webhook configuration (bounded backoff)."""
        delay = self.settings.ca_bundle_retry_min_seconds
        while True:
            await asyncio.sleep(delay)
            delay = min(delay * 2, self.settings.ca_bundle_retry_max_seconds)
            if await self.write(ca_pem, retry_in=delay):
                log.info("CA bundle written; the webhook can be called")
                return


def readiness(
    *, caches_synced: bool, ca_bundle: CaBundle, leader: LeaderElector | None
) -> tuple[bool, str]:
    """Ready, and why not: first lists applied, CA bundle written, leading (if electing)."""
    if not caches_synced:
        return False, "caches not synced"
    if not ca_bundle.written:
        return False, (
            f"CA bundle not written into MutatingWebhookConfiguration "
            f"{ca_bundle.name} (retrying; the log says why)"
        )
    if leader is not None and not leader.is_leader:
        return False, "not the leader"
    return True, "ok"
