"""The webhook answers only at its secret path, which only the API server is told.

The admission webhook keeps state from what it is sent (a task index handed out is
held until the pod shows it), so who may send it reviews matters. The service
writes `/mutate/<token>` into the MutatingWebhookConfiguration's path, where the API
server reads it; the token (random, in a Secret of the service's namespace) is
known to the API server and to whoever may read that configuration or Secret, i.e.
cluster administrators. A request to any other path is answered 404 without being
read, so it holds nothing and can deny nobody.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

MUTATE_PATH = "/mutate"
NOT_FOUND_BODY = b'{"error":"no webhook at this path"}'


def mutate_path(token: str) -> str:
    """The path the API server calls: /mutate/<token>."""
    return f"{MUTATE_PATH}/{token}"


def behind_secret_path(app: ASGIApp, token: str) -> ASGIApp:
    """`app` reachable only at `mutate_path(token)` (seen by it as /mutate)."""
    secret = mutate_path(token).encode()

    async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        path = str(scope.get("path", "")).encode()
        if not hmac.compare_digest(path, secret):  # constant time: the token is a secret
            await send(
                {
                    "type": "http.response.start",
                    "status": 404,
                    "headers": [(b"content-type", b"application/json")],
                }
            )
            await send({"type": "http.response.body", "body": NOT_FOUND_BODY})
            return
        await app({**scope, "path": MUTATE_PATH, "raw_path": MUTATE_PATH.encode()}, receive, send)

    return guarded
