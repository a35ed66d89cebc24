"""`POST /mutate`: AdmissionReview in, AdmissionReview out, pinned by golden files.

Each tests/golden/admission/<case>.json holds the AdmissionReview request, the
response exactly as sent, the decoded JSON patch (for reading), and the group's
existing pods and PodGroup the case ran against. Regenerate after a deliberate
change with UPDATE_GOLDEN=1 and read the diff; without it, a missing golden file
fails the test (tests/golden_files.py).
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from extender.admitter import Admitter
from extender.api.webhook import MAX_REQUEST_BYTES, create_webhook_app
from extender.domain.objects.membership import (
    JOB_COMPLETION_INDEX_ANNOTATION,
    MIN_AVAILABLE_ANNOTATION,
    STATEFULSET_POD_INDEX_LABEL,
    TASK_INDEX_ANNOTATION,
    TASKS_ANNOTATION,
)
from extender.injection.patch import apply_patch
from extender.kube.indexes import IndexAllocator
from extender.kube.rawapi import KubeError
from tests.builders import make_pod, make_podgroup
from tests.golden_files import UPDATE_ENV, expected_golden
from tests.unit.test_webhook_index_allocator import FakeCluster

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


def master_depending_on_workers() -> dict[str, Any]:
    """The seed's master, declaring that it starts once every worker is Ready."""
    obj = as_admitted(
        make_pod("hvd-master", NS)
        .group("hvd")
        .task("master")
        .annotation("gang-extender.io/depends-on", "worker")
        .obj()
    )
    obj["spec"]["containers"][0]["imagePullPolicy"] = "IfNotPresent"
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
    "master-depends-on-workers": {
        "pod": master_depending_on_workers(),
        "existing": [],
        "podgroup": make_podgroup("hvd", 4, namespace=NS, minTaskMember={"master": 1, "worker": 3}),
    },
    "dry-run": {"pod": deployment_pod(), "existing": [], "dry_run": True},
    "pod-without-group": {"pod": as_admitted(make_pod("plain", NS).obj()), "existing": []},
    "denied-unknown-task": {"pod": deployment_pod(task="launcher"), "existing": []},
    "denied-layout-full": {
        "pod": deployment_pod(),
        "existing": [existing_worker(i) for i in range(3)],
    },
    "denied-index-taken": {
        "pod": as_admitted(
            make_pod("hvd-worker-copy", NS)
            .group("hvd")
            .annotation(TASK_INDEX_ANNOTATION, "0")
            .obj()
        ),
        "existing": [existing_worker(0)],
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
        admitter=Admitter(
            allocator,
            podgroup_reader=lambda namespace, name: podgroup if podgroup is not None else None,
        )
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
    # A missing golden file fails the test; UPDATE_GOLDEN=1 writes it (tests/golden_files.py).
    expected = expected_golden(path, actual)
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
        raise KubeError(0, "API server unreachable: connection reset by peer")

    app = create_webhook_app(admitter=Admitter(IndexAllocator(lister=lister)))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="https://w") as c:
        answer = (await post(c, review(deployment_pod()))).json()
    status = answer["response"]["status"]
    assert (answer["response"]["allowed"], status["code"]) == (False, 503)
    assert "could not list the pods of group 'hvd'" in status["message"]
    assert "(API server unreachable: connection reset by peer)" in status["message"]
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


def test_a_missing_golden_file_fails_unless_update_golden_is_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "golden" / "case.json"
    monkeypatch.delenv(UPDATE_ENV, raising=False)
    with pytest.raises(pytest.fail.Exception, match=f"missing; run the test with {UPDATE_ENV}=1"):
        expected_golden(path, {"a": 1})
    assert not path.exists()
    monkeypatch.setenv(UPDATE_ENV, "1")
    assert expected_golden(path, {"a": 1}) == {"a": 1}
    monkeypatch.delenv(UPDATE_ENV)
    assert expected_golden(path, {"a": 2}) == {"a": 1}  # the file, not the actual, is expected


# ---- an index the pod brings is checked: never two live members with one task+index ----


def explicit_pod(name: str, index: int, group: str = "hvd") -> dict[str, Any]:
    pod = make_pod(name, NS).group(group).annotation(TASK_INDEX_ANNOTATION, str(index))
    return as_admitted(pod.obj())


def holder(
    name: str,
    index: int,
    group: str,
    *,
    task: str = "worker",
    metadata: dict[str, Any] | None = None,
    status: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A stored member of `group` that shows `index` of `task`."""
    pod = existing_worker(index, group)
    pod["metadata"]["name"] = name
    pod["metadata"]["labels"]["gang-extender.io/task"] = task
    pod["metadata"].update(metadata or {})
    pod["status"].update(status or {})
    return pod


def verdict(answer: httpx.Response) -> tuple[bool, str]:
    response = answer.json()["response"]
    return response["allowed"], (response.get("status") or {}).get("message", "")


@pytest.mark.parametrize(
    ("pod", "existing", "fix"),
    [
        pytest.param(
            explicit_pod("hvd-worker-copy", 0),
            holder("hvd-worker-0", 0, "hvd"),
            "give this pod another gang-extender.io/task-index or remove it to have one allocated",
            id="task-index annotation",
        ),
        pytest.param(
            indexed_job_pod(2),
            holder("other-job-2-abcde", 2, "ds"),
            "this pod's index comes from annotation batch.kubernetes.io/job-completion-index "
            "(Indexed Job): give each workload of the group its own task",
            id="Indexed Job",
        ),
        pytest.param(
            statefulset_pod(1),
            holder("other-set-1", 1, "train"),
            "this pod's index comes from label apps.kubernetes.io/pod-index (StatefulSet)",
            id="StatefulSet",
        ),
        pytest.param(
            as_admitted(
                make_pod("mpi-worker-1", NS)
                .group("mpi")
                .annotation("volcano.sh/task-index", "1")
                .obj()
            ),
            holder("other-mpi-worker-1", 1, "mpi"),
            "this pod's index comes from annotation volcano.sh/task-index (Volcano job)",
            id="Volcano job",
        ),
    ],
)
async def test_an_index_a_live_member_holds_is_denied_saying_what_to_fix(
    pod: dict[str, Any], existing: dict[str, Any], fix: str
) -> None:
    client, allocator = build_app([existing], None)
    async with client:
        allowed, message = verdict(await post(client, review(pod)))
    group = existing["metadata"]["labels"]["gang-extender.io/group"]
    index = existing["metadata"]["annotations"][TASK_INDEX_ANNOTATION]
    assert not allowed
    assert message.startswith(
        f"task 'worker' index {index} of group {NS}/{group} is already taken by pod "
        f"{existing['metadata']['name']!r}; "
    )
    assert fix in message
    assert allocator.remembered(namespace=NS, group=group) == {}


@pytest.mark.parametrize(
    "existing",
    [
        pytest.param(holder("old", 0, "hvd", status={"phase": "Failed"}), id="holder failed"),
        pytest.param(holder("old", 0, "hvd", status={"phase": "Succeeded"}), id="holder succeeded"),
        pytest.param(
            holder("old", 0, "hvd", metadata={"deletionTimestamp": "2030-01-01T00:00:00Z"}),
            id="holder terminating",
        ),
        pytest.param(holder("hvd-worker-copy", 0, "hvd"), id="same name"),
        pytest.param(holder("hvd-master-0", 0, "hvd", task="master"), id="other task"),
    ],
)
async def test_an_index_no_live_member_of_the_task_holds_is_admitted(
    existing: dict[str, Any],
) -> None:
    client, allocator = build_app([existing], None)
    async with client:
        allowed, message = verdict(await post(client, review(explicit_pod("hvd-worker-copy", 0))))
    assert (allowed, message) == (True, "")
    assert list(allocator.remembered(namespace=NS, group="hvd")) == [("worker", 0)]


async def test_of_two_concurrent_creates_with_one_index_one_is_denied() -> None:
    # The API server stores a pod only after the webhook answered: the second create
    # must be refused by what the first one was given, not by what a list shows.
    cluster = FakeCluster(latency=0.02)
    app = create_webhook_app(admitter=Admitter(IndexAllocator(lister=cluster.list)))

    async def create(client: httpx.AsyncClient, name: str) -> tuple[bool, str]:
        answer = await post(client, review(explicit_pod(name, 0)))
        allowed, message = verdict(answer)
        if allowed:
            await asyncio.sleep(0.01)
            cluster.store(holder(name, 0, "hvd"))
        return allowed, message

    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="https://webhook") as client:
        results = await asyncio.gather(*(create(client, f"p{i}") for i in range(5)))
    assert sorted(allowed for allowed, _ in results) == [False] * 4 + [True]
    winner = next(f"p{i}" for i, (allowed, _) in enumerate(results) if allowed)
    for allowed, message in results:
        if not allowed:
            assert f"task 'worker' index 0 of group {NS}/hvd " in message
            assert f"pod {winner!r}" in message


async def test_an_explicit_index_is_denied_while_an_allocated_one_is_not_stored_yet() -> None:
    client, _ = build_app([], None)
    async with client:
        first = (await post(client, review(deployment_pod()))).json()["response"]
        allowed, message = verdict(await post(client, review(explicit_pod("late", 0))))
    assert first["allowed"] is True
    assert not allowed
    assert message.startswith(
        f"task 'worker' index 0 of group {NS}/hvd was given to another pod moments ago, "
        f"which the API server has not stored yet (if that create failed, the index is free "
        f"again in 60 s); give this pod another gang-extender.io/task-index"
    )


async def test_a_reinvoked_pod_keeps_the_index_allocated_on_its_first_call() -> None:
    # reinvocationPolicy: IfNeeded: after another webhook added a sidecar, the API
    # server sends the pod again, now carrying the index the first call gave it.
    client, allocator = build_app([], None)
    pod = deployment_pod()
    async with client:
        first = (await post(client, review(pod))).json()["response"]
        wired = apply_patch(pod, json.loads(base64.b64decode(first["patch"])))
        wired["spec"]["containers"].append({"name": "sidecar", "image": "envoy"})
        again = (await post(client, review(wired))).json()["response"]
        rival = (await post(client, review(explicit_pod("rival", 0)))).json()["response"]
    assert again["allowed"] is True
    assert rival["allowed"] is False
    assert list(allocator.remembered(namespace=NS, group="hvd")) == [("worker", 0)]


async def test_a_dry_run_explicit_index_is_checked_and_nothing_is_remembered() -> None:
    client, allocator = build_app([holder("hvd-worker-0", 0, "hvd")], None)
    async with client:
        taken = verdict(await post(client, review(explicit_pod("p", 0), dry_run=True)))
        free = verdict(await post(client, review(explicit_pod("p", 1), dry_run=True)))
    assert taken[0] is False and "already taken by pod 'hvd-worker-0'" in taken[1]
    assert free == (True, "")
    assert allocator.remembered(namespace=NS, group="hvd") == {}


async def test_an_explicit_index_denied_later_is_given_back() -> None:
    pod = explicit_pod("p", 0)
    pod["spec"]["volumes"] = [{"name": "gang-ssh", "emptyDir": {}}]  # in the webhook's way
    client, allocator = build_app([], None)
    async with client:
        allowed, message = verdict(await post(client, review(pod)))
    assert not allowed and "already has a volume named 'gang-ssh'" in message
    assert allocator.remembered(namespace=NS, group="hvd") == {}


async def test_checking_an_explicit_index_against_an_unreadable_api_server_is_retryable() -> None:
    def lister(namespace: str, group: str) -> list[dict[str, Any]]:
        raise KubeError(0, "API server unreachable: connection reset by peer")

    app = create_webhook_app(admitter=Admitter(IndexAllocator(lister=lister)))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="https://w") as c:
        answer = (await post(c, review(explicit_pod("p", 3)))).json()
    status = answer["response"]["status"]
    assert (answer["response"]["allowed"], status["code"]) == (False, 503)
    assert "to check that task index 3 is free" in status["message"]


# ---- the request body is read with a byte limit ----


def limited_client(max_bytes: int) -> httpx.AsyncClient:
    app = create_webhook_app(
        admitter=Admitter(IndexAllocator(lister=lambda namespace, group: [])),
        max_request_bytes=max_bytes,
    )
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="https://webhook")


async def test_a_body_over_the_limit_is_http_400_with_a_reason() -> None:
    async with limited_client(1024) as client:
        answer = await client.post("/mutate", content=b" " * 1025)
    assert answer.status_code == 400
    assert answer.json() == {"error": "request body of 1025 bytes exceeds the 1024 byte limit"}


async def test_a_chunked_body_is_read_only_until_it_is_over_the_limit() -> None:
    sent = 0

    async def endless() -> AsyncIterator[bytes]:
        nonlocal sent
        for _ in range(10_000):  # 10 MB if read to the end
            sent += 1
            yield b" " * 1000

    async with limited_client(4096) as client:
        answer = await client.post("/mutate", content=endless())  # no Content-Length
    assert answer.status_code == 400
    assert answer.json()["error"].startswith("request body exceeds the 4096 byte limit")
    assert sent <= 6


async def test_a_body_at_the_limit_is_read() -> None:
    body = json.dumps(review(explicit_pod("p", 0))).encode()
    async with limited_client(len(body)) as client:
        answer = await client.post("/mutate", content=body)
    assert answer.status_code == 200
    assert answer.json()["response"]["allowed"] is True


def test_the_default_limit_is_above_what_the_api_server_accepts() -> None:
    assert MAX_REQUEST_BYTES >= 2 * 3 * 1024 * 1024  # object and oldObject of 3 MiB each
