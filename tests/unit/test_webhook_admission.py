"""`POST /mutate`: AdmissionReview in, AdmissionReview out, pinned by golden files.

Each tests/golden/admission/<case>.json holds the AdmissionReview request, the
response exactly as sent, the decoded JSON patch (for reading), and the group's
existing pods and PodGroup the case ran against. Regenerate after a deliberate
change with UPDATE_GOLDEN=1 and read the diff.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

import httpx
import pytest
import urllib3

from extender.api.webhook import create_webhook_app
from extender.domain.membership import (
    JOB_COMPLETION_INDEX_ANNOTATION,
    MIN_AVAILABLE_ANNOTATION,
    STATEFULSET_POD_INDEX_LABEL,
    TASK_INDEX_ANNOTATION,
    TASKS_ANNOTATION,
)
from extender.injection.patch import apply_patch
from extender.kube.indexes import IndexAllocator
from tests.builders import make_pod, make_podgroup

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "admission"
NS = "team"


def review(
    pod: dict[str, Any], *, uid: str = "7f0c2a4e-0000-4000-8000-000000000001", dry_run: bool = False
) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "name": pod["metadata"].get("name", ""),
            "namespace": NS,
            "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller"},
            "object": pod,
            "oldObject": None,
            "dryRun": dry_run,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }


def as_admitted(pod: dict[str, Any]) -> dict[str, Any]:
    """A pod as the API server sends it to admission: no uid or status yet."""
    pod["metadata"].pop("uid", None)
    pod["metadata"].pop("creationTimestamp", None)
    pod.pop("status", None)
    return pod


def deployment_pod(task: str = "worker") -> dict[str, Any]:
    pod = make_pod("", NS).group("hvd").task(task).annotation(TASKS_ANNOTATION, "master=1,worker=3")
    obj = as_admitted(pod.annotation(MIN_AVAILABLE_ANNOTATION, "4").obj())
    obj["metadata"].pop("name")
    obj["metadata"]["generateName"] = f"hvd-{task}-5d8f7c9b6-"
    obj["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "name": f"hvd-{task}-5d8f7c9b6",
            "uid": "rs-uid",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    return obj


def horovod_master() -> dict[str, Any]:
    pod = make_pod("hvd-master", NS).group("hvd").task("master")
    pod = pod.annotation(TASKS_ANNOTATION, "master=1,worker=3").annotation(
        MIN_AVAILABLE_ANNOTATION, "4"
    )
    obj = as_admitted(pod.obj())
    obj["spec"]["initContainers"] = [
        {
            "name": "wait-for-workers",
            "image": "busybox",
            "command": ["sh", "-c", "until nslookup hvd-worker-2.hvd; do sleep 1; done"],
        }
    ]
    obj["spec"]["containers"][0]["env"] = [{"name": "NCCL_DEBUG", "value": "INFO"}]
    return obj


def indexed_job_pod(index: int) -> dict[str, Any]:
    pod = make_pod(f"ds-{index}-x7k2p", NS).group("ds").gpus(2)
    pod = pod.annotation(JOB_COMPLETION_INDEX_ANNOTATION, str(index))
    obj = as_admitted(pod.label("batch.kubernetes.io/job-name", "ds").obj())
    obj["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": "ds",
            "uid": "job-uid",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    obj["spec"]["hostname"] = f"ds-{index}"
    obj["spec"]["subdomain"] = "ds"
    return obj


def statefulset_pod(index: int) -> dict[str, Any]:
    pod = (
        make_pod(f"train-{index}", NS).group("train").label(STATEFULSET_POD_INDEX_LABEL, str(index))
    )
    obj = as_admitted(pod.obj())
    obj["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "name": "train",
            "uid": "sts-uid",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    obj["spec"].update(hostname=f"train-{index}", subdomain="train-headless")
    return obj


def existing_worker(index: int, group: str = "hvd") -> dict[str, Any]:
    return (
        make_pod(f"{group}-worker-{index}", NS)
        .group(group)
        .annotation(TASK_INDEX_ANNOTATION, str(index))
        .obj()
    )


def already_wired() -> dict[str, Any]:
    pod = deployment_pod()
    ops = json.loads(
        base64.b64decode(
            json.loads((GOLDEN / "deployment-worker-allocated.json").read_text())["response"][
                "response"
            ]["patch"]
        )
    )
    wired: dict[str, Any] = apply_patch(pod, ops)
    return wired


CASES: dict[str, dict[str, Any]] = {
    "deployment-worker-allocated": {
        "pod": deployment_pod(),
        "existing": [existing_worker(0), existing_worker(2)],
    },
    "horovod-master-with-init-container": {"pod": horovod_master(), "existing": []},
    "indexed-job-deepspeed": {"pod": indexed_job_pod(2), "existing": []},
    "statefulset-pod": {"pod": statefulset_pod(1), "existing": []},
    "podgroup-min-task-member": {
        "pod": as_admitted(make_pod("ps-0", NS).group("tf").task("ps").obj()),
        "existing": [],
        "podgroup": make_podgroup("tf", 3, namespace=NS, minTaskMember={"ps": 1, "worker": 2}),
    },
    "dry-run": {"pod": deployment_pod(), "existing": [], "dry_run": True},
    "pod-without-group": {"pod": as_admitted(make_pod("plain", NS).obj()), "existing": []},
    "denied-unknown-task": {"pod": deployment_pod(task="launcher"), "existing": []},
    "denied-layout-full": {
        "pod": deployment_pod(),
        "existing": [existing_worker(i) for i in range(3)],
    },
    "denied-two-groups": {
        "pod": as_admitted(
            make_pod("p", NS).group("a").label("scheduling.x-k8s.io/pod-group", "b").obj()
        ),
        "existing": [],
    },
}


def build_app(
    existing: list[dict[str, Any]], podgroup: dict[str, Any] | None
) -> tuple[httpx.AsyncClient, IndexAllocator]:
    allocator = IndexAllocator(lister=lambda namespace, group: list(existing))
    app = create_webhook_app(
        allocator=allocator,
        podgroup_reader=lambda namespace, name: podgroup if podgroup is not None else None,
    )
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="https://webhook")
    return client, allocator


async def post(client: httpx.AsyncClient, body: Any) -> httpx.Response:
    return await client.post("/mutate", content=json.dumps(body))


@pytest.mark.parametrize("case", list(CASES))
async def test_golden(case: str) -> None:
    spec = CASES[case]
    request = review(spec["pod"], dry_run=spec.get("dry_run", False))
    client, _ = build_app(spec["existing"], spec.get("podgroup"))
    async with client:
        answer = await post(client, request)
    assert answer.status_code == 200
    response = answer.json()
    patch_b64 = response["response"].get("patch")
    patch = json.loads(base64.b64decode(patch_b64)) if patch_b64 else None
    actual = {
        "existing": spec["existing"],
        "podgroup": spec.get("podgroup"),
        "request": request,
        "response": response,
        "patch": patch,
    }
    path = GOLDEN / f"{case}.json"
    if os.environ.get("UPDATE_GOLDEN") == "1" or not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(actual, indent=2, sort_keys=True) + "\n")
    expected = json.loads(path.read_text())
    assert actual == expected
    if patch is not None:
        # The patch applies to the very pod it was made for, as the API server applies it.
        apply_patch(spec["pod"], patch)


async def test_a_reinvoked_pod_is_allowed_without_a_patch() -> None:
    client, _ = build_app([], None)
    async with client:
        answer = await post(client, review(already_wired()))
    assert answer.json()["response"] == {
        "uid": "7f0c2a4e-0000-4000-8000-000000000001",
        "allowed": True,
    }


async def test_dry_run_leaves_no_index_remembered() -> None:
    client, allocator = build_app([], None)
    async with client:
        await post(client, review(deployment_pod(), dry_run=True))
    assert allocator.remembered(namespace=NS, group="hvd") == {}


async def test_a_real_create_remembers_its_index_until_the_pod_shows_up() -> None:
    client, allocator = build_app([], None)
    async with client:
        await post(client, review(deployment_pod()))
    assert list(allocator.remembered(namespace=NS, group="hvd")) == [("worker", 0)]


async def test_an_index_denied_after_allocation_is_given_back() -> None:
    group = "g" + "x" * 53  # "<group>-worker-9" is 63 characters, "-10" makes 64
    existing = [existing_worker(i, group) for i in range(10)]
    pod = as_admitted(make_pod("p", NS).group(group).obj())
    client, allocator = build_app(existing, None)
    async with client:
        answer = (await post(client, review(pod))).json()
    assert answer["response"]["allowed"] is False
    assert "would be 64 characters" in answer["response"]["status"]["message"]
    assert allocator.remembered(namespace=NS, group=group) == {}


async def test_an_unreadable_api_server_is_a_retryable_denial() -> None:
    def lister(namespace: str, group: str) -> list[dict[str, Any]]:
        raise urllib3.exceptions.ProtocolError("connection reset by peer")

    app = create_webhook_app(allocator=IndexAllocator(lister=lister))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="https://w") as c:
        answer = (await post(c, review(deployment_pod()))).json()
    status = answer["response"]["status"]
    assert (answer["response"]["allowed"], status["code"]) == (False, 503)
    assert "could not list the pods of group 'hvd'" in status["message"]
    assert "can be retried" in status["message"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        pytest.param("{not json", "body is not JSON", id="not JSON"),
        pytest.param(
            json.dumps({"kind": "AdmissionReview"}), "expected apiVersion", id="no apiVersion"
        ),
        pytest.param(
            json.dumps(
                {
                    "apiVersion": "admission.k8s.io/v1",
                    "kind": "AdmissionReview",
                    "request": {"uid": "u", "kind": {"kind": "Pod"}, "object": {"metadata": {}}},
                }
            ),
            "not a pod",
            id="pod without spec",
        ),
    ],
)
async def test_a_malformed_review_is_http_400_with_a_reason(body: str, message: str) -> None:
    client, _ = build_app([], None)
    async with client:
        answer = await client.post("/mutate", content=body)
    assert answer.status_code == 400
    assert message in answer.json()["error"]
