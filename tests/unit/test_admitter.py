"""The Admitter against a stand-in allocator: the use case needs only the port, not kube/.

The full answers (patches, messages) are pinned through the route by
tests/unit/test_webhook_admission.py; these check how the Admitter uses the port.
"""

from __future__ import annotations

import asyncio
from typing import Any

from extender.admitter import Admitter
from extender.injection.admission import AdmissionRequest
from extender.ports.indexes import (
    Claimant,
    IndexAllocatorPort,
    IndexTakenError,
    NoFreeIndexError,
    PodsUnreadableError,
)
from tests.builders import make_pod


class FakeAllocator:
    """Answers with `index`, or raises `error`; records every call."""

    def __init__(self, *, index: int = 0, error: Exception | None = None) -> None:
        self.index = index
        self.error = error
        self.calls: list[tuple[str, dict[str, Any]]] = []

    async def allocate(
        self,
        *,
        namespace: str,
        group: str,
        task: str,
        limit: int | None,
        dry_run: bool,
        claimant: Claimant | None = None,
    ) -> int:
        self.calls.append(("allocate", {"group": group, "task": task, "dry_run": dry_run}))
        if self.error is not None:
            raise self.error
        return self.index

    async def claim(
        self,
        *,
        namespace: str,
        group: str,
        task: str,
        index: int,
        claimant: Claimant,
        dry_run: bool,
    ) -> None:
        self.calls.append(("claim", {"group": group, "index": index, "name": claimant.name}))
        if self.error is not None:
            raise self.error

    def release(self, *, namespace: str, group: str, task: str, index: int) -> None:
        self.calls.append(("release", {"group": group, "task": task, "index": index}))


def request(pod: dict[str, Any], *, dry_run: bool = False) -> AdmissionRequest:
    return AdmissionRequest(
        uid="u1",
        operation="CREATE",
        namespace="ns",
        dry_run=dry_run,
        is_pod=True,
        sub_resource=None,
        pod=pod,
    )


def admit(allocator: IndexAllocatorPort, pod: dict[str, Any], **kw: Any) -> dict[str, Any]:
    response: dict[str, Any] = asyncio.run(Admitter(allocator).admit(request(pod, **kw)))[
        "response"
    ]
    return response


def test_a_pod_without_an_index_is_allocated_one_and_patched() -> None:
    allocator = FakeAllocator(index=2)
    answer = admit(allocator, make_pod("p").group("hvd").obj())
    assert answer["allowed"] is True and answer["patchType"] == "JSONPatch"
    assert [name for name, _ in allocator.calls] == ["allocate"]


def test_a_pod_that_brings_an_index_claims_it() -> None:
    allocator = FakeAllocator()
    pod = make_pod("p").group("hvd").annotation("gang-extender.io/task-index", "3").obj()
    assert admit(allocator, pod)["allowed"] is True
    assert allocator.calls == [("claim", {"group": "hvd", "index": 3, "name": "p"})]


def test_a_pod_without_a_group_never_reaches_the_allocator() -> None:
    allocator = FakeAllocator()
    assert admit(allocator, make_pod("p").obj()) == {"uid": "u1", "allowed": True}
    assert allocator.calls == []


def test_unreadable_pods_are_a_retryable_denial() -> None:
    allocator = FakeAllocator(error=PodsUnreadableError("API server answered 503 Busy"))
    answer = admit(allocator, make_pod("p").group("hvd").obj())
    assert answer["allowed"] is False
    assert answer["status"]["code"] == 503
    assert answer["status"]["reason"] == "ServiceUnavailable"
    assert (
        "(API server answered 503 Busy); the create can be retried" in answer["status"]["message"]
    )


def test_no_free_index_and_a_taken_index_are_denials() -> None:
    full = admit(
        FakeAllocator(error=NoFreeIndexError(task="worker", limit=2)),
        make_pod("p").group("hvd").obj(),
    )
    assert (full["allowed"], full["status"]["code"]) == (False, 400)
    taken = admit(
        FakeAllocator(error=IndexTakenError(task="worker", index=0, holder="q", stored=True)),
        make_pod("p").group("hvd").annotation("gang-extender.io/task-index", "0").obj(),
    )
    assert taken["allowed"] is False and "already taken by pod 'q'" in taken["status"]["message"]


def test_an_index_given_to_a_pod_then_denied_is_released_unless_dry_run() -> None:
    pod = make_pod("p").group("hvd").obj()
    pod["spec"]["volumes"] = [{"name": "gang-ssh", "emptyDir": {}}]  # in the webhook's way
    allocator = FakeAllocator(index=1)
    assert admit(allocator, pod)["allowed"] is False
    assert allocator.calls[-1] == ("release", {"group": "hvd", "task": "worker", "index": 1})
    dry = FakeAllocator(index=1)
    assert admit(dry, pod, dry_run=True)["allowed"] is False
    assert [name for name, _ in dry.calls] == ["allocate"]
