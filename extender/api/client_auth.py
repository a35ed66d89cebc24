"""Mutual TLS on a listener: who may open a connection, checked right after the handshake.

The TLS context (`ssl.CERT_REQUIRED` with a CA bundle) already refuses a client
without a certificate chaining to that CA in the handshake itself. A CA may sign
more than one client, so a listener can also name the identities it accepts:
`identity_checked` wraps uvicorn's HTTP protocol class so that a connection whose
certificate names none of them (subject CN or DNS SAN) is closed before a single
request is read.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection
from typing import Any

log = logging.getLogger(__name__)


def peer_identities(peercert: dict[str, Any] | None) -> set[str]:
    """Subject common names and DNS SANs of `ssl.SSLObject.getpeercert()`'s answer."""
    if not peercert:
        return set()
    names = {
        str(value)
        for rdn in peercert.get("subject", ())
        for key, value in rdn
        if key == "commonName"
    }
    names |= {str(value) for kind, value in peercert.get("subjectAltName", ()) if kind == "DNS"}
    return names


def identity_checked(
    base: type[asyncio.Protocol],
    *,
    listener: str,
    allowed: Collection[str],
    on_refused: Callable[[], None] = lambda: None,
) -> type[asyncio.Protocol]:
    """`base` that closes connections whose client certificate names none of `allowed`."""
    accepted = frozenset(allowed)

    class IdentityChecked(base):  # type: ignore[misc,valid-type]
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)
            ssl_object = transport.get_extra_info("ssl_object")
            names = peer_identities(ssl_object.getpeercert() if ssl_object else None)
            if names & accepted:
                return
            peer = transport.get_extra_info("peername")
            log.warning(
                "%s: refused a connection from %s: its client certificate names %s, accepted: %s",
                listener,
                peer,
                ", ".join(sorted(names)) or "nothing",
                ", ".join(sorted(accepted)),
            )
            on_refused()
            transport.close()

    IdentityChecked.__name__ = f"IdentityChecked{base.__name__}"
    return IdentityChecked
