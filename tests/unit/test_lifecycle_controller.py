"""The lifecycle edge (controller/lifecycle.py, lifecycle_writes.py) inside the real service, the API faked.

What order a restart writes in, what a bare member is recreated as, and what a
user is told about a policy that does not parse.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest

from extender.config import Settings
from extender.controller import lifecycle_writes as edge
from extender.domain.lifecycle.lifecycle import RESTART_GENERATION_LABEL
from extender.domain.objects.membership import GroupKey
from extender.kube.rawapi import KubeError
from extender.service import Deps, GangService, create_service
from tests.builders import make_pod, make_podgroup
from tests.unit.test_service_effects import FakeRaw, FakeWiring, conditions_of, observe

GROUP = GroupKey("default", "job")


@pytest.fixture
def raw() -> FakeRaw:
    fake = FakeRaw()

    def names_are_free(method: str, path: str, body: Any) -> None:
        if method == "GET":
            raise KubeError(404, "not found", "NotFound")

    fake.hook = names_are_free
    return fake


@pytest.fixture
def service(raw: FakeRaw, monkeypatch: pytest.MonkeyPatch) -> Iterator[GangService]:
    monkeypatch.setattr(edge, "RECREATE_SETTLE_SECONDS", 0.0)
    settings = Settings(
        api_write_attempts=1, api_write_backoff_seconds=0.001, webhook_config_name=None
    )
    svc = create_service(settings, Deps(raw=raw, wiring=FakeWiring()))  # type: ignore[arg-type]
    yield svc
    svc.binder.close()


def running(name: str, **labels: str) -> dict[str, Any]:
    builder = make_pod(name).group("job").node("n1")
    for key, value in labels.items():
        builder = builder.label(key, value)
    pod = builder.obj()
    pod["metadata"]["uid"] = f"uid-{name}"
    pod["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-11-22T10:00:01Z"},
        {"type": "Ready", "status": "True"},
    ]
    return pod


def evicted(pod: dict[str, Any]) -> dict[str, Any]:
    pod = {**pod, "metadata": {**pod["metadata"], "deletionTimestamp": "2026-11-22T11:00:00Z"}}
    pod["status"] = {
        **pod["status"],
        "conditions": [
            *pod["status"]["conditions"],
            {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"},
        ],
    }
    return pod


async def settle(svc: GangService) -> None:
    await svc.queues.join()
    for _ in range(50):  # the background recreation of bare members
        if not svc.reconciler.lifecycle.writes.tasks:  # type: ignore[union-attr]
            break
        await asyncio.sleep(0.01)


def index(calls: list[tuple[str, str, Any]], predicate: Any) -> int:
    return next(i for i, call in enumerate(calls) if predicate(*call))


async def test_an_eviction_restarts_every_member_status_first_then_recreates_bare_ones(
    service: GangService, raw: FakeRaw
) -> None:
    pg = make_podgroup("job", 2, policies=[{"event": "PodEvicted", "action": "RestartJob"}])
    pg["metadata"]["uid"] = "pg-uid"
    observe(service, "podgroups", pg)
    observe(service, "pods", running("w0"), running("w1"))
    await service.reconciler.reconcile_group(GROUP)
    await settle(service)
    assert not [c for c in raw.calls if c[0] == "DELETE"]

    service.state.on_event("pods", "MODIFIED", evicted(running("w1")))
    await service.reconciler.reconcile_group(GROUP)
    await settle(service)

    calls = raw.calls
    status = index(
        calls,
        lambda m, p, b: (
            m == "PATCH"
            and p.endswith("/podgroups/job/status")
            and b["status"].get("restarts") == 1
        ),
    )
    marked = index(calls, lambda m, p, b: m == "PATCH" and p.endswith("/pods/w0/status"))
    deleted = index(calls, lambda m, p, b: m == "DELETE" and p.endswith("/pods/w0"))
    assert status < marked < deleted, "restart count first, then DisruptionTarget, then delete"
    mark = calls[marked][2]["status"]["conditions"][0]
    assert (mark["type"], mark["reason"]) == ("DisruptionTarget", "DeletedByGangPolicy")
    assert calls[deleted][2] == {"preconditions": {"uid": "uid-w0"}}
    # w1 was being deleted already: not deleted again; both recreated (no controller).
    assert not [c for c in calls if c[0] == "DELETE" and c[1].endswith("/pods/w1")]
    created = [b for m, p, b in calls if m == "POST" and p.endswith("/pods")]
    assert sorted(b["metadata"]["name"] for b in created) == ["w0", "w1"]
    for body in created:
        assert body["metadata"]["labels"][RESTART_GENERATION_LABEL] == "1"
        assert "nodeName" not in body["spec"] and "uid" not in body["metadata"]
    restarted = raw.events("GangRestarted")
    kinds = {e["involvedObject"]["kind"] for e in restarted}
    assert kinds == {"PodGroup", "Pod"}
    assert all("default/w1" in e["message"] and "PodEvicted" in e["message"] for e in restarted)
    assert raw.status_patches("job")[-1]["restarts"] == 1
    assert conditions_of(raw.status_patches("job")[-1])["Lifecycle"]["reason"] == "PodEvicted"

    # The same eviction seen again (the watch, a resync): no second restart.
    service.state.on_event("pods", "DELETED", evicted(running("w1")))
    await service.reconciler.reconcile_group(GROUP)
    await settle(service)
    assert len([c for c in raw.calls if c[0] == "DELETE"]) == 1
    assert max(s.get("restarts", 0) for s in raw.status_patches("job")) == 1


async def test_a_plain_delete_is_the_owners_and_restarts_nothing(
    service: GangService, raw: FakeRaw
) -> None:
    await gang_running(service)
    service.state.on_event("pods", "DELETED", running("w1"))
    await service.reconciler.reconcile_group(GROUP)
    await settle(service)
    assert not [c for c in raw.calls if c[0] in ("DELETE", "POST") and "/pods" in c[1]]
    assert not raw.events("GangRestarted")


async def test_a_policy_annotation_that_does_not_parse_is_told_to_the_user(
    service: GangService, raw: FakeRaw
) -> None:
    observe(service, "podgroups", make_podgroup("job", 2, created=True))
    bad = [running(n) for n in ("w0", "w1")]
    for pod in bad:
        pod["metadata"]["annotations"]["gang-extender.io/policies"] = "PodEvicted=Reboot"
    observe(service, "pods", *bad)
    await service.reconciler.reconcile_group(GROUP)
    await settle(service)
    configured = conditions_of(raw.status_patches("job")[-1])["Configured"]
    assert configured["reason"] == "InvalidPolicy"
    assert "action 'Reboot' is not one of RestartJob, AbortJob" in configured["message"]
    assert raw.events("GangMisconfigured")


async def test_an_aborted_group_is_released_when_its_podgroup_changes(
    service: GangService, raw: FakeRaw
) -> None:
    pg = make_podgroup("job", 2, policies=[{"event": "PodEvicted", "action": "AbortJob"}])
    pg["metadata"]["generation"] = 1
    observe(service, "podgroups", pg)
    observe(service, "pods", running("w0"), running("w1"))
    await service.reconciler.reconcile_group(GROUP)
    service.state.on_event("pods", "MODIFIED", evicted(running("w1")))
    await service.reconciler.reconcile_group(GROUP)
    await settle(service)
    assert raw.status_patches("job")[-1]["phase"] == "Aborted"
    assert [c for c in raw.calls if c[0] == "DELETE" and c[1].endswith("/pods/w0")]
    assert not [c for c in raw.calls if c[0] == "POST" and c[1].endswith("/pods")]

    held = {**pg, "status": raw.status_patches("job")[-1]}
    service.state.on_event("podgroups", "MODIFIED", held)
    await service.reconciler.reconcile_group(GROUP)
    await settle(service)
    assert not raw.events("GangReleased")

    changed = {**held, "metadata": {**pg["metadata"], "generation": 2}}
    service.state.on_event("podgroups", "MODIFIED", changed)
    await service.reconciler.reconcile_group(GROUP)
    await settle(service)
    assert raw.events("GangReleased")
    assert raw.status_patches("job")[-1]["phase"] != "Aborted"


async def gang_running(service: GangService) -> None:
    """Members w0 and w1 running, their PodGroup restarting the gang on PodEvicted."""
    observe(
        service,
        "podgroups",
        make_podgroup("job", 2, policies=[{"event": "PodEvicted", "action": "RestartJob"}]),
    )
    observe(service, "pods", running("w0"), running("w1"))
    await service.reconciler.reconcile_group(GROUP)


def gc_deleted(pod: dict[str, Any]) -> dict[str, Any]:
    """The member as PodGC leaves it: DisruptionTarget reason DeletionByPodGC."""
    gone = evicted(pod)
    gone["status"]["conditions"][-1]["reason"] = "DeletionByPodGC"
    return gone


def terminating_namespace(name: str = "default") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "deletionTimestamp": "2026-11-22T11:00:00Z"},
        "status": {"phase": "Terminating"},
    }


def pod_writes(raw: FakeRaw) -> list[tuple[str, str, Any]]:
    return [c for c in raw.calls if c[0] in ("DELETE", "POST") and "/pods" in c[1]]


async def test_a_member_deleted_by_podgc_restarts_the_gang_as_an_eviction(
    service: GangService, raw: FakeRaw
) -> None:
    # PodGC deletes pods of a node that is gone: a node failure, so PodEvicted.
    await gang_running(service)
    service.state.on_event("pods", "DELETED", gc_deleted(running("w1")))
    await service.reconciler.reconcile_group(GROUP)
    await settle(service)
    [message] = {e["message"] for e in raw.events("GangRestarted")}
    assert "default/w1 evicted (DeletionByPodGC) (PodEvicted -> RestartJob)" in message


async def test_deleting_the_namespace_of_a_gang_restarts_nothing(
    service: GangService, raw: FakeRaw
) -> None:
    await gang_running(service)
    service.state.on_event("namespaces", "MODIFIED", terminating_namespace())
    assert service.state.terminating("default")
    service.state.on_event("pods", "DELETED", gc_deleted(running("w1")))
    await service.reconciler.reconcile_group(GROUP)
    await settle(service)
    assert not pod_writes(raw)
    assert not raw.events("GangRestarted")
    assert not [p for p in raw.status_patches("job") if p.get("restarts")]

    # Deleted, it stays gone: a bind refused while it was terminating is reported
    # seconds later, often after its DELETED event. Made again, it is live.
    service.state.on_event("namespaces", "DELETED", terminating_namespace())
    assert service.state.terminating("default")
    service.state.on_event("namespaces", "ADDED", {"metadata": {"name": "default"}})
    assert not service.state.terminating("default")


def test_deleted_namespaces_are_remembered_up_to_a_bound(service: GangService) -> None:
    from extender.controller.cluster_state import DELETED_NAMESPACE_MEMORY

    for i in range(DELETED_NAMESPACE_MEMORY + 1):
        service.state.on_event("namespaces", "DELETED", {"metadata": {"name": f"ns-{i}"}})
    assert len(service.state.deleted_namespaces) == DELETED_NAMESPACE_MEMORY
    assert not service.state.terminating("ns-0")  # the oldest, forgotten
    assert service.state.terminating(f"ns-{DELETED_NAMESPACE_MEMORY}")


async def test_a_restart_asks_the_api_server_when_the_namespace_watch_lags(
    service: GangService, raw: FakeRaw, monkeypatch: pytest.MonkeyPatch
) -> None:
    await gang_running(service)
    answer_of = raw.call
    asked: list[Any] = []

    def call(method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        if method == "GET" and path == "/api/v1/namespaces":
            asked.append(kwargs["query"])
            return {"items": [terminating_namespace()]}
        return answer_of(method, path, **kwargs)

    monkeypatch.setattr(raw, "call", call)
    # The pods' watch tells of the PodGC delete before the namespaces' watch tells
    # of the namespace's deletion.
    service.state.on_event("pods", "DELETED", gc_deleted(running("w1")))
    await service.reconciler.reconcile_group(GROUP)
    await settle(service)
    assert asked == [{"fieldSelector": "metadata.name=default"}]
    assert not pod_writes(raw)
    assert not raw.events("GangRestarted")


async def test_a_recreate_refused_by_a_terminating_namespace_is_no_error(
    service: GangService, raw: FakeRaw
) -> None:
    def namespace_goes_away(method: str, path: str, body: Any) -> None:
        if method == "GET":
            raise KubeError(404, "not found", "NotFound")
        if method == "POST" and path.endswith("/pods"):
            raise KubeError(
                403,
                'pods "w0" is forbidden: unable to create new content in namespace default '
                "because it is being terminated",
                "Forbidden",
            )

    raw.hook = namespace_goes_away
    await gang_running(service)
    service.state.on_event("pods", "MODIFIED", evicted(running("w1")))
    await service.reconciler.reconcile_group(GROUP)
    await settle(service)
    assert raw.events("GangRestarted")
    assert [a for a in raw.attempts if a[0] == "POST" and a[1].endswith("/pods")]
    assert not raw.events("GangRestartIncomplete")
    errors = service.metrics.api_write_errors.labels(kind="lifecycle-recreate")._value.get()
    assert errors == 0


def job_member(name: str, created: str = "2026-11-22T10:00:00Z") -> dict[str, Any]:
    """A member of an annotation-declared group a Job created, bound and Ready."""
    pod = running(name)
    owned = make_pod(name).owned_by("Job", "job").created(created).obj()["metadata"]
    pod["metadata"]["ownerReferences"] = owned["ownerReferences"]
    pod["metadata"]["creationTimestamp"] = owned["creationTimestamp"]
    pod["metadata"]["annotations"]["gang-extender.io/min-available"] = "2"
    pod["metadata"]["annotations"]["gang-extender.io/policies"] = "PodEvicted=RestartJob"
    pod["metadata"]["annotations"]["gang-extender.io/max-retry"] = "1"
    return pod


async def test_an_annotation_groups_restart_count_outlives_its_garbage_collected_podgroup(
    service: GangService, raw: FakeRaw
) -> None:
    observe(service, "podgroups", make_podgroup("job", 2, created=True))
    observe(service, "pods", job_member("w0"), job_member("w1"))
    await service.reconciler.reconcile_group(GROUP)
    service.state.on_event("pods", "MODIFIED", evicted(job_member("w1")))
    await service.reconciler.reconcile_group(GROUP)
    await settle(service)
    assert raw.status_patches("job")[-1]["restarts"] == 1

    # The restart deleted every member; the garbage collector deleted the PodGroup they
    # owned before the Job made new members.
    for name in ("w0", "w1"):
        service.state.on_event("pods", "DELETED", job_member(name))
    service.state.on_event("podgroups", "DELETED", make_podgroup("job", 2, created=True))
    await service.reconciler.reconcile_group(GROUP)
    await settle(service)

    later = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 60))
    new = [job_member("w2", later), job_member("w3", later)]
    observe(service, "pods", *new)
    observe(service, "podgroups", make_podgroup("job", 2, created=True))  # made again
    raw.calls.clear()
    await service.reconciler.reconcile_group(GROUP)
    await settle(service)
    labelled = {
        p.rsplit("/", 1)[1]: b["metadata"]["labels"][RESTART_GENERATION_LABEL]
        for m, p, b in raw.calls
        if m == "PATCH" and "/pods/" in p and RESTART_GENERATION_LABEL in str(b)
    }
    assert labelled == {"w2": "1", "w3": "1"}, "the new members carry the count"
    assert raw.status_patches("job")[-1]["restarts"] == 1, "the new PodGroup says it again"

    # maxRetry 1 is spent: the next eviction leaves the group Failed, no second restart.
    for pod in new:
        pod["metadata"]["labels"][RESTART_GENERATION_LABEL] = "1"
    service.state.on_event("pods", "MODIFIED", new[0])
    service.state.on_event("pods", "MODIFIED", evicted(new[1]))
    await service.reconciler.reconcile_group(GROUP)
    await settle(service)
    assert raw.status_patches("job")[-1]["phase"] == "Failed"
    assert not [c for c in raw.calls if c[0] == "DELETE"]


async def test_an_annotation_groups_count_is_read_back_from_its_members_labels(
    service: GangService, raw: FakeRaw
) -> None:
    # Memory lost (the service restarted) and the PodGroup made again without a status:
    # the members' restart-generation label still says 1 restart was done.
    observe(service, "podgroups", make_podgroup("job", 2, created=True))
    members = [job_member(n) for n in ("w0", "w1")]
    for pod in members:
        pod["metadata"]["labels"][RESTART_GENERATION_LABEL] = "1"
    observe(service, "pods", *members)
    await service.reconciler.reconcile_group(GROUP)
    service.state.on_event("pods", "MODIFIED", evicted(members[1]))
    await service.reconciler.reconcile_group(GROUP)
    await settle(service)
    last = raw.status_patches("job")[-1]
    assert last["phase"] == "Failed"
    assert "after 1 restart(s), maxRetry 1" in conditions_of(last)["Lifecycle"]["message"]
