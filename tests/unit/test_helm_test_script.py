"""charts/gang-extender/files/helm-test.py, the check `helm test` runs, against local servers.

The chart's test pod runs this script in the service's image; here it runs
against a metrics server and two TLS servers on loopback made with the
service's own CA code: it passes when all three answer, and names each one that
does not (no client certificate accepted, a CA it does not trust, a dead port).
"""

from __future__ import annotations

import http.server
import os
import socket
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from extender.tls import ensure_serving_cert, issue_client_cert

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "charts" / "gang-extender" / "files" / "helm-test.py"
TEMPLATE = REPO / "charts" / "gang-extender" / "templates" / "tests" / "answers.yaml"


class Answer(http.server.BaseHTTPRequestHandler):
    body = b'# TYPE gang_extender_groups gauge\ngang_extender_groups{phase="Pending"} 0\n'

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.send_response(200 if self.path in ("/healthz", "/metrics") else 404)
        self.end_headers()
        self.wfile.write(self.body if self.path == "/metrics" else b"ok")

    def log_message(self, *_args: object) -> None:
        pass


def serve(context: ssl.SSLContext | None) -> tuple[int, http.server.HTTPServer]:
    server = http.server.HTTPServer(("127.0.0.1", 0), Answer)
    if context is not None:
        server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server.server_address[1], server


@pytest.fixture
def service(tmp_path: Path) -> Iterator[dict[str, str]]:
    """Metrics (HTTP), webhook (TLS) and extender (TLS, client certificate required)."""
    material = ensure_serving_cert(tmp_path / "ca", ["localhost", "127.0.0.1"])
    client = issue_client_cert(tmp_path / "ca", "gang-scheduler")
    mounted = tmp_path / "client"
    mounted.mkdir()
    (mounted / "ca.crt").write_bytes(material.ca_pem)
    (mounted / "tls.crt").write_bytes(client.cert_pem)
    (mounted / "tls.key").write_bytes(client.key_pem)
    webhook_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    webhook_tls.load_cert_chain(material.cert_path, material.key_path)
    extender_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    extender_tls.load_cert_chain(material.cert_path, material.key_path)
    extender_tls.load_verify_locations(cadata=material.ca_pem.decode())
    extender_tls.verify_mode = ssl.CERT_REQUIRED
    servers = [serve(None), serve(webhook_tls), serve(extender_tls)]
    (metrics, _), (webhook, _), (extender, _) = servers
    yield {
        "GANG_TEST_METRICS_URL": f"http://127.0.0.1:{metrics}",
        "GANG_TEST_SERVICE_HOST": "localhost",
        "GANG_TEST_WEBHOOK_PORT": str(webhook),
        "GANG_TEST_EXTENDER_PORT": str(extender),
        "GANG_TEST_TLS_DIR": str(mounted),
        "GANG_TEST_TIMEOUT_SECONDS": "5",
    }
    for _, server in servers:
        server.shutdown()


def run(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", SCRIPT.read_text()],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **env},
    )


def test_it_passes_when_all_three_answer(service: dict[str, str]) -> None:
    done = run(service)
    assert done.returncode == 0, done.stdout + done.stderr
    assert [line.split(":")[0:2] for line in done.stdout.splitlines()] == [
        ["metrics", " ok"],
        ["webhook", " ok"],
        ["extender", " ok"],
    ]


def test_it_fails_naming_what_does_not_answer(service: dict[str, str], tmp_path: Path) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        dead = closed.getsockname()[1]
    no_client_cert = tmp_path / "no-client"
    no_client_cert.mkdir()
    (no_client_cert / "ca.crt").write_bytes(
        Path(service["GANG_TEST_TLS_DIR"], "ca.crt").read_bytes()
    )
    done = run(
        {**service, "GANG_TEST_WEBHOOK_PORT": str(dead), "GANG_TEST_TLS_DIR": str(no_client_cert)}
    )
    assert done.returncode == 1
    lines = dict(line.split(": ", 1) for line in done.stdout.splitlines())
    assert lines["metrics"].startswith("ok")
    assert lines["webhook"].startswith("FAILED: ConnectionRefusedError")
    assert lines["extender"].startswith("FAILED: FileNotFoundError")  # no client cert mounted
    done = run({**service, "GANG_TEST_METRICS_URL": f"http://127.0.0.1:{dead}"})
    assert done.returncode == 1 and "metrics: FAILED" in done.stdout


def test_the_chart_runs_this_script_as_a_helm_test_hook() -> None:
    template = TEMPLATE.read_text()
    assert "helm.sh/hook: test" in template
    assert '.Files.Get "files/helm-test.py"' in template
    networkpolicy = (REPO / "deploy" / "service" / "networkpolicy.yaml").read_text()
    assert "app.kubernetes.io/component: helm-test" in networkpolicy
