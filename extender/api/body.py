"""Reading a JSON request body with a byte limit, for every HTTP route that takes one.

A client can send any body: a huge Content-Length, or no Content-Length at all
(`Transfer-Encoding: chunked`) and then bytes without end. The limit is checked on
the declared length first, then while the stream is read, which stops as soon as
the body is over the limit, so no more than `max_bytes` plus one chunk is held.
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request


class BodyError(ValueError):
    """The body is too large or not JSON: the caller's mistake, answered with HTTP 400."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


async def read_limited_body(request: Request, max_bytes: int) -> bytes:
    """The raw body, or BodyError once it is known to exceed `max_bytes`."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise BodyError(f"request body of {declared} bytes exceeds the {max_bytes} byte limit")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            # The total is unknown (chunked): say how far reading went.
            raise BodyError(
                f"request body exceeds the {max_bytes} byte limit "
                f"(reading stopped after {size} bytes)"
            )
        chunks.append(chunk)
    return b"".join(chunks)


async def read_json_body(request: Request, max_bytes: int) -> Any:
    """The body parsed as JSON (any JSON value), or BodyError naming the problem."""
    return parse_json(await read_limited_body(request, max_bytes))


def parse_json(body: bytes) -> Any:
    """`body` parsed as JSON (any JSON value), or BodyError saying where it is not."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as error:
        raise BodyError(f"body is not JSON: {error}") from None
