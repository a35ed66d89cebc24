"""The plain-HTTP health app (/healthz, /readyz, /metrics) and the webhook's timing.

/healthz answers while the process serves; /readyz answers from the readiness
check it is given (503 with the reason when not ready); /metrics is the
Prometheus text of the service's registry. `time_admission` records the webhook's
latency and errors as verb "admit", since the webhook app itself knows no metrics.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from fastapi import FastAPI, Request
from fastapi.responses import PlainTextResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from extender.metrics import Metrics


def create_health_app(ready: Callable[[], tuple[bool, str]], metrics: Metrics) -> FastAPI:
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
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return app


def time_admission(app: FastAPI, metrics: Metrics) -> None:
    """Admission latency and errors as verb "admit" (the webhook app itself knows no metrics)."""

    @app.middleware("http")
    async def timed(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        started = time.perf_counter()
        try:
            response = await call_next(request)
        except Exception:
            metrics.extender_errors.labels(verb="admit").inc()
            raise
        finally:
            metrics.request_seconds.labels(verb="admit").observe(time.perf_counter() - started)
        if response.status_code >= 400:
            metrics.extender_errors.labels(verb="admit").inc()
        return response
