"""The webhook's timing middleware: every admission timed as verb "admit", errors counted."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.responses import JSONResponse
from starlette.testclient import TestClient

from extender.api.health import time_admission
from extender.metrics import Metrics


def sample(metrics: Metrics, name: str) -> float:
    value = metrics.registry.get_sample_value(name, {"verb": "admit"})
    return 0.0 if value is None else value


def timed_app(metrics: Metrics) -> FastAPI:
    app = FastAPI()

    @app.post("/mutate")
    async def mutate() -> JSONResponse:
        return JSONResponse({"response": {"allowed": True}})

    @app.post("/bad")
    async def bad() -> JSONResponse:
        return JSONResponse({"error": "not an AdmissionReview"}, status_code=400)

    @app.post("/boom")
    async def boom() -> JSONResponse:
        raise RuntimeError("a bug")

    time_admission(app, metrics)
    return app


def test_each_request_is_timed_and_a_400_or_an_exception_counts_as_an_error() -> None:
    metrics = Metrics()
    client = TestClient(timed_app(metrics), raise_server_exceptions=False)
    assert client.post("/mutate", content=b"{}").json() == {"response": {"allowed": True}}
    assert sample(metrics, "gang_extender_request_duration_seconds_count") == 1
    assert sample(metrics, "gang_extender_request_errors_total") == 0
    assert client.post("/bad", content=b"{}").status_code == 400
    assert client.post("/boom", content=b"{}").status_code == 500
    assert sample(metrics, "gang_extender_request_duration_seconds_count") == 3
    assert sample(metrics, "gang_extender_request_errors_total") == 2


def test_the_body_reaches_the_route_unchanged() -> None:
    metrics = Metrics()
    app = FastAPI()

    @app.post("/echo")
    async def echo(body: dict[str, int]) -> dict[str, int]:
        return body

    time_admission(app, metrics)
    client = TestClient(app)
    assert client.post("/echo", json={"a": 1}).json() == {"a": 1}
    assert sample(metrics, "gang_extender_request_duration_seconds_count") == 1
