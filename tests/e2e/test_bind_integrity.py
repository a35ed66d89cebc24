"""Whole gang or nothing beside other schedulers and a failing API (issue #11), for real.

Two ways a gang used to end partial or over-committed:

* the default scheduler, which does not see reservations, binds a GPU pod onto a
  node planned for a gang while the gang waits in its bind barrier;
* one member's `pods/binding` fails after the barrier released.

The failures are injected for real: a validating admission webhook on
`pods/binding` (bindings go through admission as a CREATE of that subresource),
served from this process on loopback, refuses the first binding of one member with
the status code under test; the API server answers the service's binder with it.
"""

from __future__ import annotations

import base64
import contextlib
import json
import ssl
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from extender.domain.objects.membership import PLANNED_NODE_ANNOTATION
from extender.kube.rawapi import KubeError, RawApi, path_of
from extender.tls import ensure_serving_cert
from tests.e2e.gang_fixtures import (  # noqa: F401 (no_partial_gangs is a fixture)
    BindRecorder,
    bound,
    create,
    delete_pod,
    gang_pod,
    list_pods,
    no_partial_gangs,
    podgroup,
    ungate,
    wait_until,
)

HOLD_OBSERVATION_SECONDS = 6  # several kube-scheduler retries of the held gang
WEBHOOKS = ("apis", "admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations")
PROBE_POD = "fault-probe"

# And after every test here: the partial-gang counter is 0.
pytestmark = pytest.mark.usefixtures("no_partial_gangs")


def metric(gang_stack: Any, name: str) -> float:
    """A sample of the service's own metrics (0 when it has none yet)."""
    for line in gang_stack.metrics_text().splitlines():
        if line.startswith(f"{name} ") or line.startswith(f"{name}{{"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def barrier_waiting(gang_stack: Any) -> int:
    return int(metric(gang_stack, "gang_extender_bind_barrier_waiting"))


def events(raw: RawApi, namespace: str, reason: str) -> list[str]:
    items = raw.call("GET", path_of("api", "v1", "namespaces", namespace, "events"))["items"]
    return [e.get("message", "") for e in items if e.get("reason") == reason]


class BindingFaults:
    """A validating webhook on pods/binding in one namespace that refuses chosen bindings.

    `fail_once[pod] = code`: the first binding of that pod is refused with `code`;
    the probe pod's bindings are always refused (to see the webhook is in force).
    """

    def __init__(self, raw: RawApi, namespace: str, tls_dir: Path) -> None:
        self.raw = raw
        self.namespace = namespace
        self.fail_once: dict[str, int] = {}
        self.refused: list[tuple[str, int]] = []
        self._lock = threading.Lock()
        tls = ensure_serving_cert(tls_dir, ["127.0.0.1"])
        faults = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                answer = faults.answer(review["request"])
                body = json.dumps(
                    {
                        "apiVersion": "admission.k8s.io/v1",
                        "kind": "AdmissionReview",
                        "response": answer,
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(tls.cert_path, tls.key_path)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()
        self.name = f"binding-faults-{namespace}"
        port = self.server.server_address[1]
        raw.call(
            "POST",
            path_of(*WEBHOOKS),
            body={
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingWebhookConfiguration",
                "metadata": {"name": self.name},
                "webhooks": [
                    {
                        "name": "binding-faults.e2e.gang-extender.io",
                        "admissionReviewVersions": ["v1"],
                        "clientConfig": {
                            "url": f"https://127.0.0.1:{port}/",
                            "caBundle": base64.b64encode(tls.ca_pem).decode(),
                        },
                        "rules": [
                            {
                                "operations": ["CREATE"],
                                "apiGroups": [""],
                                "apiVersions": ["v1"],
                                "resources": ["pods/binding"],
                            }
                        ],
                        "namespaceSelector": {
                            "matchLabels": {"kubernetes.io/metadata.name": namespace}
                        },
                        "failurePolicy": "Ignore",
                        "sideEffects": "None",
                        "timeoutSeconds": 5,
                    }
                ],
            },
        )

    def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        name = request.get("name", "")
        with self._lock:
            code = 403 if name == PROBE_POD else self.fail_once.pop(name, None)
            if code is None:
                return {"uid": request["uid"], "allowed": True}
            self.refused.append((name, code))
        return {
            "uid": request["uid"],
            "allowed": False,
            "status": {"code": code, "message": f"e2e fault: binding of {name} refused ({code})"},
        }

    def wait_in_force(self, node: str) -> None:
        """Until the API server calls the webhook: a probe pod's dry-run binding is refused.

        Dry run, so the probe is never bound even before the webhook is in force.
        """
        create(self.raw, self.namespace, gang_pod(PROBE_POD, "", scheduler="nobody"))
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": PROBE_POD, "namespace": self.namespace},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        path = path_of("api", "v1", "namespaces", self.namespace, "pods", PROBE_POD, "binding")

        def refused() -> bool:
            try:
                self.raw.call("POST", path, query={"dryRun": "All"}, body=binding)
            except KubeError as err:
                return "e2e fault" in err.message
            return False

        wait_until(refused, timeout=30, what="the binding fault webhook to be in force")
        with self._lock:
            self.refused.clear()

    def close(self) -> None:
        with contextlib.suppress(KubeError):  # gone already is fine
            self.raw.call("DELETE", path_of(*WEBHOOKS, self.name))
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def binding_faults(raw: RawApi, namespace: str, tmp_path: Path) -> Iterator[BindingFaults]:
    faults = BindingFaults(raw, namespace, tmp_path / "faults-tls")
    try:
        yield faults
    finally:
        faults.close()


@pytest.mark.parametrize(
    "code",
    [
        pytest.param(500, id="500: the binder reads the pod back and posts again"),
        pytest.param(403, id="403: the member keeps its reservation and kube-scheduler retries it"),
    ],
)
def test_a_binding_refused_after_the_barrier_released_still_ends_with_the_whole_gang(
    gang_stack, raw, namespace, gpu_nodes, binding_faults, code
) -> None:
    pool = gpu_nodes(2, gpus=4)
    binding_faults.wait_in_force(pool.nodes[0])
    binding_faults.fail_once["flaky-1"] = code
    recorder = BindRecorder(raw, namespace)
    partial_before = metric(gang_stack, "gang_extender_partial_gangs_total")
    create(raw, namespace, podgroup("flaky", 4, scheduleTimeoutSeconds=120))
    for i in range(4):
        create(
            raw,
            namespace,
            gang_pod(f"flaky-{i}", "flaky", gpus=2, node_selector=pool.node_selector),
        )

    def gang_bound() -> list[str]:
        return sorted(
            p["metadata"]["name"]
            for p in bound(list_pods(raw, namespace))
            if p["metadata"]["name"].startswith("flaky-")
        )

    wait_until(lambda: len(gang_bound()) == 4, timeout=120, what="all 4 members bound")
    recorder.stop()
    assert binding_faults.refused == [("flaky-1", code)], "the fault was injected once"
    assert all(gpus <= 4 for gpus in recorder.max_gpus_per_node.values()), (
        recorder.max_gpus_per_node
    )
    assert metric(gang_stack, "gang_extender_partial_gangs_total") == partial_before == 0
    if code == 500:
        assert metric(gang_stack, "gang_extender_bind_retries_total") >= 1
    if code == 403:
        wait_until(
            lambda: any("flaky-1" in m for m in events(raw, namespace, "GangBindFailed")),
            timeout=30,
            what="a GangBindFailed Event naming the member",
        )


def test_a_default_scheduler_pod_on_a_planned_node_never_over_commits_it(
    gang_stack, raw, namespace, gpu_nodes
) -> None:
    # Two nodes of 4 GPUs, a gang of 2 x 4 GPUs: one member planned on each node.
    # steal-1 is gated, so steal-0 waits in the bind barrier while the default
    # scheduler (which does not see reservations) binds a 2-GPU pod onto steal-0's
    # node. (Onto steal-1's node it could not: the gang's kube-scheduler would then
    # reject steal-1 itself and the barrier would time out, also binding nothing.)
    pool = gpu_nodes(2, gpus=4)
    recorder = BindRecorder(raw, namespace)
    partial_before = metric(gang_stack, "gang_extender_partial_gangs_total")
    create(raw, namespace, podgroup("steal", 2, scheduleTimeoutSeconds=120))
    create(raw, namespace, gang_pod("steal-0", "steal", gpus=4, node_selector=pool.node_selector))
    create(
        raw,
        namespace,
        gang_pod("steal-1", "steal", gpus=4, node_selector=pool.node_selector, gated=True),
    )
    wait_until(lambda: barrier_waiting(gang_stack) >= 1, timeout=60, what="steal-0 in the barrier")
    node = planned_node(raw, namespace, "steal-0")
    create(
        raw,
        namespace,
        gang_pod(
            "intruder",
            "",
            gpus=2,
            node_selector={"kubernetes.io/hostname": node},
            scheduler="default-scheduler",
        ),
    )
    wait_until(
        lambda: any(p["metadata"]["name"] == "intruder" for p in bound(list_pods(raw, namespace))),
        timeout=60,
        what="the default scheduler to bind its GPU pod onto the planned node",
    )
    ungate(raw, namespace, "steal-1")

    def gang_bound() -> list[str]:
        return sorted(
            p["metadata"]["name"]
            for p in bound(list_pods(raw, namespace))
            if p["metadata"]["name"].startswith("steal-")
        )

    # steal-1's arrival completes the barrier; the re-check finds steal-0's node with
    # 2 GPUs free for 4 reserved, so the plan is dropped and nothing of the gang is bound.
    wait_until(
        lambda: any("outside the plan" in m for m in events(raw, namespace, "GangWaiting")),
        timeout=60,
        what="the plan dropped by the barrier's re-check",
    )
    time.sleep(HOLD_OBSERVATION_SECONDS)
    assert gang_bound() == [], "the gang must end whole or empty"
    assert all(gpus <= 4 for gpus in recorder.max_gpus_per_node.values()), (
        recorder.max_gpus_per_node
    )

    # Room appears: the gang is planned again and bound whole.
    delete_pod(raw, namespace, "intruder")
    wait_until(
        lambda: gang_bound() == ["steal-0", "steal-1"], timeout=120, what="the gang bound whole"
    )
    recorder.stop()
    assert all(gpus <= 4 for gpus in recorder.max_gpus_per_node.values()), (
        recorder.max_gpus_per_node
    )
    assert metric(gang_stack, "gang_extender_partial_gangs_total") == partial_before == 0


def planned_node(raw: RawApi, namespace: str, name: str) -> str:
    """The member's planned-node annotation, once the service has written it."""

    def annotation() -> str:
        pod = raw.call("GET", path_of("api", "v1", "namespaces", namespace, "pods", name))
        return str((pod["metadata"].get("annotations") or {}).get(PLANNED_NODE_ANNOTATION, ""))

    return str(wait_until(annotation, timeout=30, what=f"the planned node of {name}"))


@pytest.fixture
def gpu_routing(gang_stack: Any) -> Iterator[None]:
    """The service restarted with GANG_ROUTE_GPU_PODS=true, and back without it after."""
    gang_stack.env["GANG_ROUTE_GPU_PODS"] = "true"
    gang_stack.restart_service(kill=False)
    try:
        yield
    finally:
        del gang_stack.env["GANG_ROUTE_GPU_PODS"]
        gang_stack.restart_service(kill=False)


def test_routed_gpu_pods_of_the_default_scheduler_never_take_a_gangs_reserved_gpus(
    gang_stack, raw, injected_namespace, gpu_nodes, gpu_routing
) -> None:
    namespace = injected_namespace
    pool = gpu_nodes(1, gpus=4)
    recorder = BindRecorder(raw, namespace)
    create(raw, namespace, podgroup("routed", 2, scheduleTimeoutSeconds=120))
    create(raw, namespace, gang_pod("routed-0", "routed", gpus=2, node_selector=pool.node_selector))
    create(
        raw,
        namespace,
        gang_pod("routed-1", "routed", gpus=2, node_selector=pool.node_selector, gated=True),
    )
    wait_until(lambda: barrier_waiting(gang_stack) >= 1, timeout=60, what="routed-0 in the barrier")

    plain = create(
        raw,
        namespace,
        gang_pod(
            "plain-gpu", "", gpus=2, node_selector=pool.node_selector, scheduler="default-scheduler"
        ),
    )
    assert plain["spec"]["schedulerName"] == "gang-extender", "the webhook routed it"
    elsewhere = create(
        raw,
        namespace,
        gang_pod("other-scheduler", "", gpus=2, node_selector=pool.node_selector, scheduler="mine"),
    )
    assert elsewhere["spec"]["schedulerName"] == "mine", "a chosen scheduler is left alone"

    time.sleep(HOLD_OBSERVATION_SECONDS)
    assert bound(list_pods(raw, namespace)) == [], "the routed pod must not take reserved GPUs"
    ungate(raw, namespace, "routed-1")

    def names_bound() -> list[str]:
        return sorted(p["metadata"]["name"] for p in bound(list_pods(raw, namespace)))

    wait_until(
        lambda: names_bound() == ["routed-0", "routed-1"], timeout=120, what="the gang bound whole"
    )
    time.sleep(HOLD_OBSERVATION_SECONDS)
    recorder.stop()
    assert names_bound() == ["routed-0", "routed-1"], "the node is full: plain-gpu waits"
    assert all(gpus <= 4 for gpus in recorder.max_gpus_per_node.values()), (
        recorder.max_gpus_per_node
    )
