"""`helm test gang-extender`: do the extender, the webhook and the metrics answer?

Run in a pod of the service's own image (templates/tests/answers.yaml), with the
gang scheduler's client certificate (Secret gang-extender-scheduler-client:
ca.crt, tls.crt, tls.key) mounted. Standard library only. One line per check;
exit 1 when any fails.
  metrics:  HTTP GET /healthz answers 200 and /metrics serves gang_extender_* series
  webhook:  a TLS handshake that trusts the service's CA, then any HTTP answer
  extender: the same, presenting the gang scheduler's client certificate
"""

import http.client
import os
import ssl
import sys
import urllib.request

NAMESPACE = os.environ.get("GANG_TEST_NAMESPACE", "gang-system")
METRICS_URL = os.environ.get(
    "GANG_TEST_METRICS_URL", f"http://gang-extender-metrics.{NAMESPACE}.svc:8080"
)
SERVICE_HOST = os.environ.get("GANG_TEST_SERVICE_HOST", f"gang-extender.{NAMESPACE}.svc")
EXTENDER_PORT = int(os.environ.get("GANG_TEST_EXTENDER_PORT", "8443"))
WEBHOOK_PORT = int(os.environ.get("GANG_TEST_WEBHOOK_PORT", "9443"))
TLS_DIR = os.environ.get("GANG_TEST_TLS_DIR", "/var/run/gang-extender-test")
TIMEOUT = float(os.environ.get("GANG_TEST_TIMEOUT_SECONDS", "10"))


def metrics() -> str:
    with urllib.request.urlopen(f"{METRICS_URL}/healthz", timeout=TIMEOUT) as answer:
        if answer.status != 200:
            raise RuntimeError(f"/healthz answered {answer.status}")
    with urllib.request.urlopen(f"{METRICS_URL}/metrics", timeout=TIMEOUT) as answer:
        text = answer.read().decode()
    if "gang_extender_" not in text:
        raise RuntimeError("/metrics serves no gang_extender_* series")
    return f"{METRICS_URL} answers /healthz and /metrics"


def tls_answer(port: int, *, client_cert: bool) -> str:
    context = ssl.create_default_context(cafile=os.path.join(TLS_DIR, "ca.crt"))
    if client_cert:
        context.load_cert_chain(os.path.join(TLS_DIR, "tls.crt"), os.path.join(TLS_DIR, "tls.key"))
    connection = http.client.HTTPSConnection(SERVICE_HOST, port, context=context, timeout=TIMEOUT)
    try:
        connection.request("GET", "/healthz")
        status = connection.getresponse().status
    finally:
        connection.close()
    return f"https://{SERVICE_HOST}:{port} answers over TLS (HTTP {status})"


def main() -> int:
    failed = 0
    checks = (
        ("metrics", metrics),
        ("webhook", lambda: tls_answer(WEBHOOK_PORT, client_cert=False)),
        ("extender", lambda: tls_answer(EXTENDER_PORT, client_cert=True)),
    )
    for name, check in checks:
        try:
            print(f"{name}: ok: {check()}")
        except Exception as err:  # every failure is reported, then the exit code says it
            failed += 1
            print(f"{name}: FAILED: {type(err).__name__}: {err}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
