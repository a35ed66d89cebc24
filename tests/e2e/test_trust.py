"""Who may make the service act (docs/deploy.md#trust-model), on the real control plane.

The extender answers only kube-scheduler, which presents the client certificate the
service issued it; anyone else is refused in the TLS handshake, before a request is
read. kube-scheduler itself still gang-schedules with it (also every test of
test_gang_scheduling.py, which run through the same stack). What the service
created is told apart by its seal, not by a label: a Secret planted under the
group's name with the managed-by label never hands its key pair to the members.
"""

from __future__ import annotations

import base64
import http.client
import json
import ssl
from pathlib import Path
from typing import Any

import pytest

from extender.devcluster.stack import GangStack
from extender.injection.ssh import generate_key_pair
from extender.kube.ownership import SEAL_ANNOTATION
from extender.kube.rawapi import RawApi, path_of
from tests.e2e.gang_fixtures import (
    bound,
    create,
    events,
    gang_pod,
    list_pods,
    podgroup,
    wait_until,
)

PROBE_POD = {"metadata": {"name": "probe", "namespace": "default", "uid": "probe-uid"}}
VERBS = {
    "filter": {"Pod": PROBE_POD, "NodeNames": ["gpu-0"]},
    "prioritize": {"Pod": PROBE_POD, "NodeNames": ["gpu-0"]},
    "bind": {"PodName": "probe", "PodNamespace": "default", "PodUID": "probe-uid", "Node": "gpu-0"},
}


def post(stack: GangStack, context: ssl.SSLContext, verb: str) -> tuple[int, dict[str, Any]]:
    conn = http.client.HTTPSConnection(
        "127.0.0.1", stack.extender_port, context=context, timeout=10
    )
    try:
        body = json.dumps(VERBS[verb])
        conn.request("POST", f"/{verb}", body=body, headers={"Content-Type": "application/json"})
        answer = conn.getresponse()
        return answer.status, json.loads(answer.read() or b"null")
    finally:
        conn.close()


def without_client_cert(stack: GangStack) -> ssl.SSLContext:
    return stack.https_context(client_cert=False)


def with_serving_cert(stack: GangStack) -> ssl.SSLContext:
    # The service's own serving cert, signed by the same CA but for serverAuth only.
    context = stack.https_context(client_cert=False)
    tls_dir = Path(stack.tls_dir)
    context.load_cert_chain(str(tls_dir / "tls.crt"), str(tls_dir / "tls.key"))
    return context


@pytest.mark.parametrize("verb", sorted(VERBS))
@pytest.mark.parametrize(
    "caller",
    [
        pytest.param(without_client_cert, id="no client certificate"),
        pytest.param(with_serving_cert, id="a serving certificate of the same CA"),
    ],
)
def test_a_caller_without_the_schedulers_certificate_gets_no_answer(
    gang_stack: GangStack, caller: Any, verb: str
) -> None:
    with pytest.raises((ssl.SSLError, ConnectionError)):
        post(gang_stack, caller(gang_stack), verb)


def test_the_schedulers_certificate_is_answered_and_a_forged_bind_is_refused(
    gang_stack: GangStack,
) -> None:
    status, filtered = post(gang_stack, gang_stack.https_context(), "filter")
    assert status == 200 and filtered["Error"] == ""
    status, answer = post(gang_stack, gang_stack.https_context(), "bind")
    assert status == 200
    assert "not a pod in gang-extender's watch cache" in answer["Error"]


def test_kube_scheduler_with_its_certificate_still_binds_a_gang(
    gang_stack: GangStack, raw: RawApi, namespace: str, gpu_nodes: Any
) -> None:
    pool = gpu_nodes(1, gpus=2)
    create(raw, namespace, podgroup("trusted", 2))
    for i in range(2):
        create(
            raw,
            namespace,
            gang_pod(f"trusted-{i}", "trusted", gpus=1, node_selector=pool.node_selector),
        )
    placed = wait_until(
        lambda: len(bound(list_pods(raw, namespace))) == 2 or None, what="both members bound"
    )
    assert placed


# ---- the webhook: only the API server knows its path ----
def forged_review(namespace: str, pod: dict[str, Any], uid: str) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": namespace,
            "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller"},
            "object": {**pod, "metadata": {**pod["metadata"], "namespace": namespace}},
            "dryRun": False,
        },
    }


def post_review(stack: GangStack, path: str, review: dict[str, Any]) -> int:
    context = ssl.create_default_context(cafile=str(stack.ca_path))
    conn = http.client.HTTPSConnection("127.0.0.1", stack.webhook_port, context=context, timeout=10)
    try:
        conn.request(
            "POST", path, body=json.dumps(review), headers={"Content-Type": "application/json"}
        )
        answer = conn.getresponse()
        answer.read()
        return answer.status
    finally:
        conn.close()


def test_forged_admission_reviews_cannot_make_a_real_member_be_denied(
    gang_stack: GangStack, raw: RawApi, injected_namespace: str
) -> None:
    from extender.domain.objects.membership import MIN_AVAILABLE_ANNOTATION, TASKS_ANNOTATION
    from extender.kube.rawapi import path_of

    annotations = {TASKS_ANNOTATION: "worker=2", MIN_AVAILABLE_ANNOTATION: "2"}

    def worker(name: str) -> dict[str, Any]:
        return gang_pod(name, "tight", task="worker", annotations=dict(annotations))

    # The API server calls the webhook at /mutate/<token>, a path only it is told.
    config = raw.call(
        "GET",
        path_of(
            "apis",
            "admissionregistration.k8s.io",
            "v1",
            "mutatingwebhookconfigurations",
            "gang-extender",
        ),
    )
    url = config["webhooks"][0]["clientConfig"]["url"]
    assert url.rsplit("/", 2)[-2] == "mutate" and len(url.rsplit("/", 1)[-1]) >= 32
    # Forged reviews for both indexes of the task, at the paths a forger can know or guess.
    for path in ("/mutate", "/mutate/", "/mutate/guess", "/"):
        for i in range(2):
            review = forged_review(injected_namespace, worker(f"forged-{i}"), f"forged-{path}-{i}")
            assert post_review(gang_stack, path, review) == 404
    # Both real members are admitted, with the two indexes the layout allows.
    created = [
        raw.call(
            "POST",
            path_of("api", "v1", "namespaces", injected_namespace, "pods"),
            body=worker(f"real-{i}"),
        )
        for i in range(2)
    ]
    assert sorted(pod["spec"]["hostname"] for pod in created) == [
        "tight-worker-0",
        "tight-worker-1",
    ]


def test_a_planted_secret_with_our_label_never_gives_its_key_pair_to_the_members(
    gang_stack, raw, injected_namespace, gpu_nodes
) -> None:
    """Issue 30, finding 6: Secret <group>-ssh was adopted on the managed-by label alone,
    so a key pair someone else planted was mounted into every member."""
    namespace = injected_namespace
    keys = generate_key_pair(comment="planted")
    planted = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": "hvd-ssh",
            "labels": {
                "app.kubernetes.io/managed-by": "gang-extender",
                "gang-extender.io/group": "hvd",
            },
        },
        "stringData": {"id_rsa": keys.private_openssh, "id_rsa.pub": keys.public_openssh},
    }
    secret_path = path_of("api", "v1", "namespaces", namespace, "secrets")
    raw.call("POST", secret_path, body=planted)
    selector = gpu_nodes(1, gpus=2).node_selector
    create(raw, namespace, podgroup("hvd", 2))
    for i in range(2):
        create(raw, namespace, gang_pod(f"hvd-{i}", "hvd", gpus=1, node_selector=selector))

    replaced = wait_until(
        lambda: events(raw, namespace, "WiringReplaced"),
        what="a WiringReplaced Event for the planted Secret",
    )
    assert f"Secret {namespace}/hvd-ssh" in replaced[0]["message"]
    secret = raw.call("GET", f"{secret_path}/hvd-ssh")
    data = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert data["id_rsa"] != keys.private_openssh, "the planted private key is not used"
    assert keys.public_openssh.split()[1] not in data["authorized_keys"]
    assert SEAL_ANNOTATION in secret["metadata"]["annotations"]
    wait_until(lambda: len(bound(list_pods(raw, namespace))) == 2, what="the gang to be bound")
