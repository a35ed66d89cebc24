"""The local control plane behaves like a real cluster: scheduling, controllers, kwok, clean stop."""

from __future__ import annotations

import base64
import json
import os
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Collection
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kubernetes import client as k8s

from extender.devcluster.cluster import (
    BIN_DIR_ENV,
    BUILD_SCRIPT,
    VERSION_ENV,
    LocalCluster,
    binary_version,
)
from extender.devcluster.pki import CertPair, issue_cert

T = TypeVar("T")
WAIT = 60.0  # generous bound for anything the control plane should do in a few seconds


def eventually(what: str, probe: Callable[[], T | None], timeout: float = WAIT) -> T:
    """Poll ``probe`` until it returns something truthy; fail with ``what`` at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        result = probe()
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.2)


def gpu_pod(name: str, gpus: int, node_selector: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": node_selector,
            "containers": [
                {
                    "name": "main",
                    "image": "registry.example/trainer:latest",
                    "resources": {
                        "requests": {"cpu": "1", "nvidia.com/gpu": str(gpus)},
                        "limits": {"nvidia.com/gpu": str(gpus)},
                    },
                }
            ],
        },
    }


def test_the_control_plane_runs_the_kubernetes_release_asked_for(
    api: k8s.ApiClient, bin_dir: Path
) -> None:
    # K8S_VERSION=v1.35.4 make test-oldest must really test 1.35.4: every binary
    # reports the release its wrapper module pinned (hack/version-ldflags.sh).
    want = os.environ.get(VERSION_ENV)
    if not want:
        default = [
            line.split("=", 1)[1]
            for line in BUILD_SCRIPT.read_text().splitlines()
            if line.startswith("DEFAULT_K8S_VERSION=")
        ]
        want = binary_version(bin_dir) if os.environ.get(BIN_DIR_ENV) else default[0]
    assert k8s.VersionApi(api).get_code().git_version == want
    for binary in ("kube-apiserver", "kube-controller-manager", "kube-scheduler"):
        out = subprocess.run(
            [str(bin_dir / binary), "--version"], capture_output=True, text=True, check=True
        ).stdout
        assert out.split() == ["Kubernetes", want], (binary, out)
    client = json.loads(
        subprocess.run(
            [str(bin_dir / "kubectl"), "version", "--client", "-o", "json"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    assert client["clientVersion"]["gitVersion"] == want


def test_pod_requesting_a_gpu_is_bound_to_a_fake_gpu_node_and_runs(
    core: k8s.CoreV1Api, namespace: str, gpu_nodes: Any
) -> None:
    pool = gpu_nodes(2, gpus=8)

    core.create_namespaced_pod(namespace, gpu_pod("trainer", 1, pool.node_selector))

    def running() -> k8s.V1Pod | None:
        pod = core.read_namespaced_pod("trainer", namespace)
        return pod if pod.status.phase == "Running" else None

    pod = eventually("the pod to reach phase Running", running)
    assert pod.spec.node_name in pool.nodes
    node = core.read_node(pod.spec.node_name)
    assert node.status.allocatable["nvidia.com/gpu"] == "8"
    assert pod.status.pod_ip, "kwok should have given the pod an IP"


def test_pod_asking_for_more_gpus_than_any_node_has_stays_pending_with_failed_scheduling(
    core: k8s.CoreV1Api, namespace: str, gpu_nodes: Any
) -> None:
    pool = gpu_nodes(2, gpus=8)

    core.create_namespaced_pod(namespace, gpu_pod("too-big", 9, pool.node_selector))

    def failed_scheduling_event() -> k8s.CoreV1Event | None:
        events = core.list_namespaced_event(
            namespace, field_selector="involvedObject.name=too-big,reason=FailedScheduling"
        ).items
        return events[0] if events else None

    event = eventually("a FailedScheduling event for the pod", failed_scheduling_event)
    assert "default-scheduler" in (event.reporting_component, event.source.component)
    assert "Insufficient nvidia.com/gpu" in event.message

    # kube-scheduler records the event and patches the pod's condition separately, in
    # no set order: read the pod once its PodScheduled condition is there.
    def scheduled_condition() -> tuple[k8s.V1Pod, k8s.V1PodCondition] | None:
        pod = core.read_namespaced_pod("too-big", namespace)
        found = [c for c in pod.status.conditions or [] if c.type == "PodScheduled"]
        return (pod, found[0]) if found else None

    pod, scheduled = eventually("the pod's PodScheduled condition", scheduled_condition)
    assert pod.status.phase == "Pending"
    assert pod.spec.node_name is None
    assert (scheduled.status, scheduled.reason) == ("False", "Unschedulable")


@pytest.mark.parametrize("propagation", ["Foreground", "Background"])
def test_deployment_creates_its_pods_and_deleting_it_deletes_them(
    core: k8s.CoreV1Api, apps: k8s.AppsV1Api, namespace: str, gpu_nodes: Any, propagation: str
) -> None:
    pool = gpu_nodes(1)
    labels = {"app": "web"}
    deployment: Any = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": pool.node_selector,
                    "containers": [{"name": "web", "image": "registry.example/web:1"}],
                },
            },
        },
    }
    apps.create_namespaced_deployment(namespace, deployment)

    def pods() -> list[k8s.V1Pod]:
        return core.list_namespaced_pod(namespace, label_selector="app=web").items

    def three_running_pods() -> list[k8s.V1Pod] | None:
        current = pods()
        running = [p for p in current if p.status.phase == "Running"]
        return running if len(current) == 3 and len(running) == 3 else None

    eventually("3 running pods of the Deployment", three_running_pods)

    apps.delete_namespaced_deployment(
        "web", namespace, body=k8s.V1DeleteOptions(propagation_policy=propagation)
    )

    eventually("the Deployment's pods to be deleted", lambda: not pods())
    eventually(
        "the Deployment's ReplicaSet to be deleted",
        lambda: not apps.list_namespaced_replica_set(namespace).items,
    )
    eventually(
        "the Deployment to be gone",
        lambda: not apps.list_namespaced_deployment(namespace).items,
    )


def _is_running(pid: int) -> bool:
    """True if ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    state = stat.rsplit(")", 1)[1].split()[0]
    return state != "Z"


def _processes_mentioning(text: str, ignore: Collection[int] = ()) -> list[str]:
    """``"pid: cmdline"`` of every process (but this one and ``ignore``) whose cmdline has ``text``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in {os.getpid(), *ignore}:
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if text in cmdline:
            found.append(f"{entry.name}: {cmdline.strip()}")
    return found


def _sleeper_with_child(marker: str) -> list[str]:
    """argv of a shell that runs a Python child; both name ``marker`` on their command line."""
    script = '"$1" -c "import time; time.sleep(600)" "$0" & wait'
    return ["/bin/sh", "-c", script, marker, sys.executable]


def test_stopping_a_cluster_leaves_no_process_behind(bin_dir: Path, tmp_path: Path) -> None:
    workdir = tmp_path / "second-cluster"
    marker = str(workdir / "extra-marker")
    cluster = LocalCluster(workdir, bin_dir)
    try:
        cluster.start()
        # The extra process has a child of its own (a grandchild of ours):
        # stop() must end the whole process group, not just the pid it started.
        extra = cluster.start_process("extra", _sleeper_with_child(marker))
        eventually("the shell and its child", lambda: len(_processes_mentioning(marker)) == 2)
        pids = cluster.pids()
        assert len(pids) == 6  # etcd, apiserver, controller-manager, scheduler, kwok, extra
        assert extra.pid in pids
        assert all(_is_running(pid) for pid in pids)
    finally:
        cluster.stop()

    assert [pid for pid in pids if _is_running(pid)] == []
    assert _processes_mentioning(str(workdir)) == []
    assert not extra.alive()
    cluster.stop()  # a second stop is harmless


CRASHING_OWNER = """
import os, sys
from pathlib import Path
from extender.devcluster.cluster import BIN_DIR_ENV, BUILD_SCRIPT, VERSION_ENV, LocalCluster, binary_version
cluster = LocalCluster(Path(sys.argv[1]), Path(sys.argv[2]))
cluster.start()
cluster.start_process("extra", sys.argv[3:])
print("started", flush=True)
sys.stdin.read()  # until the test kills us
"""


def test_killing_the_python_process_that_owns_a_cluster_leaves_no_process_behind(
    bin_dir: Path, tmp_path: Path
) -> None:
    workdir = tmp_path / "orphaned-cluster"
    marker = str(workdir / "extra-marker")
    owner = subprocess.Popen(
        [sys.executable, "-c", CRASHING_OWNER, str(workdir), str(bin_dir)]
        + _sleeper_with_child(marker),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert owner.stdout is not None
        assert owner.stdout.readline().strip() == "started"
        # (the owner's own command line names the workdir and marker too)
        eventually(
            "the shell and its child",
            lambda: len(_processes_mentioning(marker, ignore={owner.pid})) == 2,
        )
        cluster_processes = _processes_mentioning(str(workdir), ignore={owner.pid})
        assert len(cluster_processes) >= 7  # 5 components, shell, child (and the watchdog)

        owner.kill()  # SIGKILL: no atexit, no stop()
        owner.wait()

        eventually(
            "every process of the orphaned cluster to end",
            lambda: not _processes_mentioning(str(workdir)),
        )
    finally:
        owner.kill()
        owner.wait()


def test_kubectl_and_kubeconfig_work_against_the_cluster(cluster: LocalCluster) -> None:
    out = subprocess.run(
        [str(cluster.bin_dir / "kubectl"), f"--kubeconfig={cluster.kubeconfig}", "get", "ns"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    assert "kube-system" in out
    assert cluster.server.startswith("https://127.0.0.1:")


class _AnnotatingWebhook(BaseHTTPRequestHandler):
    """A mutating admission webhook that adds one annotation to every pod."""

    def do_POST(self) -> None:
        review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        patch = [{"op": "add", "path": "/metadata/annotations", "value": {"webhook": "called"}}]
        response = {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "response": {
                "uid": review["request"]["uid"],
                "allowed": True,
                "patchType": "JSONPatch",
                "patch": base64.b64encode(json.dumps(patch).encode()).decode(),
            },
        }
        body = json.dumps(response).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_apiserver_calls_an_admission_webhook_served_on_loopback(
    cluster: LocalCluster, api: k8s.ApiClient, core: k8s.CoreV1Api, namespace: str, tmp_path: Path
) -> None:
    serving = issue_cert(
        CertPair(cluster.pki_dir / "ca.crt", cluster.pki_dir / "ca.key"),
        tmp_path,
        "webhook",
        common_name="test-webhook",
        sans=["127.0.0.1"],
        server=True,
    )
    server = ThreadingHTTPServer(("127.0.0.1", 0), _AnnotatingWebhook)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(serving.cert, serving.key)
    server.socket = tls.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    admission = k8s.AdmissionregistrationV1Api(api)
    config_name = f"annotate-{namespace}"
    webhook: Any = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": config_name},
        "webhooks": [
            {
                "name": "annotate.e2e.gang-extender.io",
                "clientConfig": {
                    "url": f"https://127.0.0.1:{server.server_address[1]}/mutate",
                    "caBundle": base64.b64encode(cluster.ca_cert.read_bytes()).decode(),
                },
                "rules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["pods"],
                    }
                ],
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "failurePolicy": "Fail",
            }
        ],
    }
    admission.create_mutating_webhook_configuration(webhook)
    try:
        pod = core.create_namespaced_pod(namespace, gpu_pod("annotated", 1, {"no": "node"}))
        assert pod.metadata.annotations == {"webhook": "called"}
    finally:
        admission.delete_mutating_webhook_configuration(config_name)
        server.shutdown()
        server.server_close()
