"""The plain-HTTP health app (/healthz, /readyz, /metrics) and the webhook's timing.

/healthz answers while the process serves; /readyz answers from the readiness
check it is given (503 with the reason when not ready); /metrics is the
Prometheus text of the service's registry, after `before_scrape` (the gauges drawn
from the core's state are computed then, not on a timer). `time_admission` records the webhook's
latency and errors as verb "admit", since the webhook app itself knows no metrics.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from fastapi import FastAPI
from fastapi.responses import PlainTextResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from extender.metrics import Metrics


def _nothing() -> None:
    return None


def create_health_app(
    ready: Callable[[], tuple[bool, str]],
    metrics: Metrics,
    before_scrape: Callable[[], None] = _nothing,
) -> FastAPI:
    """`before_scrape` runs on the event loop, like every other reader of the core."""
    app = FastAPI(title="gang-extender health", docs_url=None, redoc_url=None)

    @app.get("/healthz")
    async def healthz() -> PlainTextResponse:
        return PlainTextResponse("ok")

    @app.get("/readyz")
    async def readyz() -> PlainTextResponse:
        ok, why = ready()
        return PlainTextResponse(why, status_code=200 if ok else 503)

    @app.get("/metrics", name="metrics")  # route name and operation id as before the move
    async def metrics_text() -> Response:
        before_scrape()
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return app


def time_admission(app: FastAPI, metrics: Metrics) -> None:
    """Admission latency and errors as verb "admit" (the webhook app itself knows no metrics)."""
    app.add_middleware(_AdmissionTimer, metrics=metrics)


class _AdmissionTimer:
    """Times each HTTP request and counts errors (status >= 400 or an exception).

    A plain ASGI middleware, not `@app.middleware("http")`: starlette's
    BaseHTTPMiddleware runs every request through a task group and wraps the body
    stream; with it gone, py-spy found half as many samples inside the webhook route
    for the same bench series (docs/benchmarks.md). This one only watches the
    response start.
    """

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 0

        async def send_and_see(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_and_see)
        except Exception:
            self.metrics.extender_errors.labels(verb="admit").inc()
            raise
        finally:
            self.metrics.request_seconds.labels(verb="admit").observe(time.perf_counter() - started)
        if status >= 400:
            self.metrics.extender_errors.labels(verb="admit").inc()
