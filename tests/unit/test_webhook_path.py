"""The webhook's secret path: the only path answered, written into its configuration,
and one token for every replica."""

from __future__ import annotations

import base64
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from extender.api.webhook_path import behind_secret_path, mutate_path
from extender.kube.ca_publish import shared_webhook_token
from extender.kube.webhook_config import client_config_patch
from tests.unit.test_ca_publish import CaApiServer

TOKEN = "s3cret-token"


def app() -> FastAPI:
    inner = FastAPI()

    @inner.post("/mutate")
    async def mutate() -> dict[str, str]:
        return {"answered": "yes"}

    return inner


@pytest.mark.parametrize(
    ("path", "status"),
    [
        pytest.param(f"/mutate/{TOKEN}", 200, id="the secret path"),
        pytest.param("/mutate", 404, id="plain /mutate"),
        pytest.param(f"/mutate/{TOKEN}x", 404, id="a longer token"),
        pytest.param("/mutate/s3cret", 404, id="a prefix of the token"),
        pytest.param("/", 404, id="root"),
    ],
)
async def test_only_the_secret_path_reaches_the_webhook(path: str, status: int) -> None:
    guarded = behind_secret_path(app(), TOKEN)  # type: ignore[arg-type]
    transport = httpx.ASGITransport(app=guarded)  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport, base_url="https://webhook") as client:
        answer = await client.post(path, json={})
    assert answer.status_code == status
    if status == 200:
        assert answer.json() == {"answered": "yes"}


def config(client: dict[str, object]) -> dict[str, object]:
    return {
        "metadata": {"name": "gang-extender", "resourceVersion": "7"},
        "webhooks": [{"name": "pods.gang-extender.io", "clientConfig": client}],
    }


def test_the_path_is_written_into_a_service_reference_and_a_url() -> None:
    path = mutate_path(TOKEN)
    by_service = config({"service": {"name": "gang-extender", "path": "/mutate"}})
    assert client_config_patch(by_service, None, path) == [
        {"op": "replace", "path": "/metadata/resourceVersion", "value": "7"},
        {"op": "add", "path": "/webhooks/0/clientConfig/service/path", "value": path},
    ]
    by_url = config({"url": "https://127.0.0.1:9443/mutate"})
    assert client_config_patch(by_url, None, path)[1] == {
        "op": "replace",
        "path": "/webhooks/0/clientConfig/url",
        "value": f"https://127.0.0.1:9443{path}",
    }
    done = config({"service": {"name": "gang-extender", "path": path}})
    assert client_config_patch(done, None, path) == []


def test_every_replica_reads_the_token_the_first_one_stored(tmp_path: Path) -> None:
    server = CaApiServer()
    first = shared_webhook_token(server, namespace="gang-system", secret_name="hook")
    second = shared_webhook_token(server, namespace="gang-system", secret_name="hook")
    assert first == second and len(first) >= 32
    stored = server.get("secrets", "hook", namespace="gang-system")
    assert base64.b64decode(stored["data"]["token"]).decode() == first
