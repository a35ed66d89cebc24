"""The service's API writes: per-group ordering, bounded retries, failures surfaced.

The API server is replaced by a fake `RawApi` (the project's own wrapper) and the
wiring controller by a fake, both handed to `create_service`; the service runs its
real effect queues, writer, reconciler, gauges and metrics.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from extender.api.health import create_health_app
from extender.config import Settings
from extender.domain.cluster.ledger import Plan
from extender.domain.objects.membership import (
    ADMISSION_GATE,
    INJECT_NAMESPACE_LABEL,
    PLANNED_NODE_ANNOTATION,
    TASKS_ANNOTATION,
    GroupKey,
    MembershipError,
)
from extender.domain.objects.model import PodInfo
from extender.domain.state.decisions import GangBound, LiftAdmissionGate, PlanCreated, PlanDropped
from extender.kube.rawapi import KubeError
from extender.kube.wiring import WiringConflictError
from extender.service import Deps, GangService, create_service
from tests.builders import make_node, make_pod, make_podgroup

GROUP = GroupKey("default", "job")
OTHER = GroupKey("default", "other")


class FakeRaw:
    """Stands in for RawApi: records each request when it completes; scriptable."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Any]] = []
        self.attempts: list[tuple[str, str, Any]] = []
        self.content_types: list[str] = []  # of each attempt
        self.lock = threading.Lock()
        # Called before a request completes; may sleep or raise.
        self.hook: Callable[[str, str, Any], None] = lambda method, path, body: None

    def call(
        self,
        method: str,
        path: str,
        *,
        query: Any = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float = 30.0,
    ) -> dict[str, Any]:
        with self.lock:
            self.attempts.append((method, path, body))
            self.content_types.append(content_type)
        self.hook(method, path, body)
        with self.lock:
            self.calls.append((method, path, body))
        return {}

    def patches_of(self, pod: str) -> list[str | None]:
        """The planned node each write of `pod` set (None: cleared); a write through the
        status subresource must nominate the same node."""
        nodes = []
        for method, path, body in self.calls:
            if method != "PATCH":
                continue
            if path.endswith(f"/pods/{pod}/status"):
                node = body["metadata"]["annotations"][PLANNED_NODE_ANNOTATION]
                assert body["status"] == {"nominatedNodeName": node}, body
                nodes.append(node)
            elif path.endswith(f"/pods/{pod}"):
                nodes.append(body["metadata"]["annotations"][PLANNED_NODE_ANNOTATION])
        return nodes

    def events(self, reason: str | None = None) -> list[dict[str, Any]]:
        return [
            body
            for method, path, body in self.calls
            if method == "POST"
            and path.endswith("/events")
            and (reason is None or body["reason"] == reason)
        ]

    def status_patches(self, group: str) -> list[dict[str, Any]]:
        return [
            body["status"]
            for method, path, body in self.calls
            if method == "PATCH" and path.endswith(f"/podgroups/{group}/status")
        ]


@pytest.fixture
def raw() -> FakeRaw:
    return FakeRaw()


class FakeWiring:
    def __init__(self) -> None:
        self.error: Exception | None = None
        self.failing_group: str | None = None  # raise `error` for this group only
        self.calls = 0
        self.cleared: list[dict[str, Any]] = []

    def reconcile(self, **kwargs: Any) -> None:
        self.calls += 1
        if self.error is not None and self.failing_group in (None, kwargs.get("group")):
            raise self.error

    def clear_ready_hosts(self, **kwargs: Any) -> None:
        self.cleared.append(kwargs)


@pytest.fixture
def wiring() -> FakeWiring:
    return FakeWiring()


@pytest.fixture
def service(raw: FakeRaw, wiring: FakeWiring) -> Iterator[GangService]:
    svc = service_with(raw, wiring)
    yield svc
    svc.binder.close()


@pytest.fixture
def nominating(raw: FakeRaw, wiring: FakeWiring) -> Iterator[GangService]:
    """The service with `nominate_planned_node` on."""
    svc = service_with(raw, wiring, nominate_planned_node=True)
    yield svc
    svc.binder.close()


def service_with(raw: FakeRaw, wiring: FakeWiring, **more: Any) -> GangService:
    settings = Settings(
        api_write_attempts=3,
        api_write_backoff_seconds=0.001,
        api_write_backoff_max_seconds=0.002,
        webhook_config_name=None,
        **more,
    )
    return create_service(settings, Deps(raw=raw, wiring=wiring))  # type: ignore[arg-type]


def plan(group: GroupKey, pods: dict[str, str], plan_id: int = 1) -> Plan:
    """`pods`: pod name -> planned node."""
    return Plan(
        group=group,
        plan_id=plan_id,
        placements={f"uid-{name}": node for name, node in pods.items()},
        requests={},
        names={f"uid-{name}": f"{group.namespace}/{name}" for name in pods},
        created_at=0.0,
        deadline=60.0,
    )


def write_errors(svc: GangService) -> dict[str, float]:
    return {
        sample.labels["kind"]: sample.value
        for metric in svc.metrics.registry.collect()
        if metric.name == "gang_extender_api_write_errors"
        for sample in metric.samples
        if sample.name.endswith("_total")
    }


def pod_of(path: str) -> str:
    """The pod a PATCH path names, itself or its status subresource."""
    return path.split("/pods/", 1)[1].split("/", 1)[0]


def slow_sets(seconds: float) -> Callable[[str, str, Any], None]:
    """Setting a planned node takes `seconds`; clearing it is instant."""

    def hook(method: str, path: str, body: Any) -> None:
        if method == "PATCH" and body["metadata"]["annotations"][PLANNED_NODE_ANNOTATION]:
            time.sleep(seconds)

    return hook


async def test_a_plan_drop_never_overtakes_the_plan_it_drops(
    service: GangService, raw: FakeRaw
) -> None:
    raw.hook = slow_sets(0.2)
    the_plan = plan(GROUP, {"w0": "n1", "w1": "n2"})
    service.writer.queue_effects([PlanCreated(the_plan)])
    service.writer.queue_effects([PlanDropped(the_plan, reason="a member was deleted")])
    await service.queues.join()
    # Set first, then cleared: no stale planned-node annotation is left behind.
    assert raw.patches_of("w0") == ["n1", None]
    assert raw.patches_of("w1") == ["n2", None]


MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"


@pytest.mark.parametrize("nominate", [False, True], ids=["annotation", "nominated"])
async def test_a_planned_gated_member_is_ungated_by_its_planned_node_write(
    raw: FakeRaw, wiring: FakeWiring, nominate: bool
) -> None:
    service = service_with(raw, wiring, nominate_planned_node=nominate)
    for pod in (make_pod("w0").group("job").gate(ADMISSION_GATE), make_pod("w1").group("job")):
        obj = pod.obj()
        obj["metadata"]["uid"] = f"uid-{obj['metadata']['name']}"  # as `plan` names them
        service.core.observe_pod(PodInfo.from_api(obj), time.time())
    service.core.drain_effects()
    service.writer.queue_effects([PlanCreated(plan(GROUP, {"w0": "n1", "w1": "n1"}))])
    await service.queues.join()
    writes = {
        path: (body, kind)
        for (method, path, body), kind in zip(raw.calls, raw.content_types, strict=True)
        if method == "PATCH"
    }
    # The gate is spec, which only the pod itself takes; with `nominate_planned_node`
    # each member's nomination goes through the status subresource, and the gated one's
    # gate is lifted by a second write, after it, so that it enters kube-scheduler's
    # queue already nominated.
    planned = {"metadata": {"annotations": {PLANNED_NODE_ANNOTATION: "n1"}}}
    nominated = planned | {"status": {"nominatedNodeName": "n1"}}
    lift = {"spec": {"schedulingGates": [{"name": ADMISSION_GATE, "$patch": "delete"}]}}
    pods = "/api/v1/namespaces/default/pods"
    if nominate:
        assert writes == {
            f"{pods}/w0/status": (nominated, MERGE),
            f"{pods}/w0": (lift, STRATEGIC),
            f"{pods}/w1/status": (nominated, MERGE),
        }
        w0_writes = [path for method, path, _ in raw.calls if path.startswith(f"{pods}/w0")]
        assert w0_writes == [f"{pods}/w0/status", f"{pods}/w0"]
    else:
        assert writes == {
            f"{pods}/w0": (planned | lift, STRATEGIC),
            f"{pods}/w1": (planned, MERGE),
        }
    service.binder.close()


async def test_a_preemptors_planned_node_write_keeps_the_gate_while_its_victims_hold_the_node(
    nominating: GangService, raw: FakeRaw
) -> None:
    service = nominating
    obj = make_pod("w0").group("job").gate(ADMISSION_GATE).obj()
    obj["metadata"]["uid"] = "uid-w0"
    service.core.observe_pod(PodInfo.from_api(obj), time.time())
    service.core.drain_effects()
    held = plan(GROUP, {"w0": "n1"})
    held.gates_held = True
    service.writer.queue_effects([PlanCreated(held)])
    await service.queues.join()
    assert [(path, body) for method, path, body in raw.calls if method == "PATCH"] == [
        (
            "/api/v1/namespaces/default/pods/w0/status",
            {
                "metadata": {"annotations": {PLANNED_NODE_ANNOTATION: "n1"}},
                "status": {"nominatedNodeName": "n1"},
            },
        )
    ]


async def test_a_gangs_gate_lifts_are_written_at_once_not_one_after_another(
    service: GangService, raw: FakeRaw
) -> None:
    # A preemptor's members are let out together once its victims are gone: written one
    # after another, each behind the API server's latency, the last went 50 s after the
    # first at 5,000 nodes. The barrier lets a write finish only while all 3 are in flight.
    together = threading.Barrier(3, timeout=5)
    raw.hook = lambda method, path, body: together.wait()
    service.writer.queue_effects(
        [LiftAdmissionGate(GROUP, f"default/w{i}", "victims gone") for i in range(3)]
    )
    await service.queues.join()
    assert not together.broken
    assert sorted(path for _, path, _ in raw.calls) == [
        f"/api/v1/namespaces/default/pods/w{i}" for i in range(3)
    ]


async def test_a_gate_lifted_without_a_plan_removes_only_that_gate(
    service: GangService, raw: FakeRaw
) -> None:
    service.writer.queue_effects([LiftAdmissionGate(GROUP, "default/w0", "misdeclared")])
    await service.queues.join()
    assert [(m, p, b) for m, p, b in raw.calls] == [
        (
            "PATCH",
            "/api/v1/namespaces/default/pods/w0",
            {"spec": {"schedulingGates": [{"name": ADMISSION_GATE, "$patch": "delete"}]}},
        )
    ]
    assert raw.content_types == ["application/strategic-merge-patch+json"]


async def test_other_groups_are_not_held_up_by_a_slow_group(
    service: GangService, raw: FakeRaw
) -> None:
    raw.hook = slow_sets(0.3)
    service.writer.queue_effects([PlanCreated(plan(GROUP, {"w0": "n1"}))])
    service.writer.queue_effects([PlanDropped(plan(OTHER, {"o0": "n3"}), reason="gone")])
    await service.queues.join()
    order = [pod_of(path) for method, path, _ in raw.calls if method == "PATCH"]
    assert order == ["o0", "w0"]


async def test_a_transient_failure_is_retried(service: GangService, raw: FakeRaw) -> None:
    failures = [KubeError(503, "try later", "ServiceUnavailable"), KubeError(0, "refused")]

    def hook(method: str, path: str, body: Any) -> None:
        if failures:
            raise failures.pop(0)

    raw.hook = hook
    service.writer.queue_effects([PlanCreated(plan(GROUP, {"w0": "n1"}))])
    await service.queues.join()
    assert raw.patches_of("w0") == ["n1"]
    assert len(raw.attempts) == 3
    assert write_errors(service) == {}


async def test_a_write_that_keeps_failing_is_logged_with_status_and_counted(
    service: GangService, raw: FakeRaw, caplog: pytest.LogCaptureFixture
) -> None:
    def hook(method: str, path: str, body: Any) -> None:
        raise KubeError(500, "etcd said: SECRET-DATA-FROM-THE-BODY", "InternalError")

    raw.hook = hook
    with caplog.at_level(logging.WARNING, logger="extender.controller.effects"):
        service.writer.queue_effects([PlanCreated(plan(GROUP, {"w0": "n1"}))])
        await service.queues.join()
    assert len(raw.attempts) == service.settings.api_write_attempts
    assert write_errors(service) == {"planned-node": 1.0}
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "default/job" in warnings[0]
    assert "500 InternalError" in warnings[0]
    assert "SECRET-DATA" not in caplog.text


async def test_a_refused_write_is_not_retried(service: GangService, raw: FakeRaw) -> None:
    def hook(method: str, path: str, body: Any) -> None:
        raise KubeError(403, "pods is forbidden", "Forbidden")

    raw.hook = hook
    service.writer.queue_effects([PlanCreated(plan(GROUP, {"w0": "n1"}))])
    await service.queues.join()
    assert len(raw.attempts) == 1
    assert write_errors(service) == {"planned-node": 1.0}


async def test_a_pod_deleted_meanwhile_is_not_an_error(
    service: GangService, raw: FakeRaw, caplog: pytest.LogCaptureFixture
) -> None:
    def hook(method: str, path: str, body: Any) -> None:
        raise KubeError(404, 'pods "w0" not found', "NotFound")

    raw.hook = hook
    with caplog.at_level(logging.WARNING, logger="extender.controller.effects"):
        service.writer.queue_effects([PlanDropped(plan(GROUP, {"w0": "n1"}), reason="deleted")])
        await service.queues.join()
    assert len(raw.attempts) == 1
    assert write_errors(service) == {}
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


async def test_a_member_bound_before_its_nomination_is_not_an_error(
    nominating: GangService, raw: FakeRaw, caplog: pytest.LogCaptureFixture
) -> None:
    service = nominating
    # The API server's answer when the nomination reaches a pod kube-scheduler has bound.
    bound = (
        'Pod "w0" is invalid: status.nominatedNodeName: Forbidden: may not be set on pods '
        "that are already bound to a node"
    )

    def hook(method: str, path: str, body: Any) -> None:
        if pod_of(path) == "w0":
            raise KubeError(422, bound, "Invalid")
        raise KubeError(422, 'Pod "w1" is invalid: metadata.annotations: Invalid value', "Invalid")

    raw.hook = hook
    with caplog.at_level(logging.WARNING, logger="extender.controller.api_writes"):
        service.writer.queue_effects([PlanCreated(plan(GROUP, {"w0": "n1", "w1": "n1"}))])
        await service.queues.join()
    assert len(raw.attempts) == 2
    # Any other refusal is still one: counted and logged.
    assert write_errors(service) == {"planned-node": 1.0}
    assert [r.getMessage() for r in caplog.records if "w0" in r.getMessage()] == []
    assert any("w1" in r.getMessage() for r in caplog.records)


def observe(svc: GangService, kind: str, *objects: dict[str, Any]) -> None:
    svc.state.on_page(kind, list(objects), True, False)


async def test_event_failures_are_counted_not_dropped(service: GangService, raw: FakeRaw) -> None:
    pods = [make_pod(n).group("job").min_available(2).obj() for n in ("w0", "w1")]
    observe(service, "pods", *pods)

    def hook(method: str, path: str, body: Any) -> None:
        if path.endswith("/events"):
            raise KubeError(429, "slow down", "TooManyRequests")

    raw.hook = hook
    service.writer.queue_effects([GangBound(plan(GROUP, {"w0": "n1", "w1": "n1"}))])
    await service.queues.join()
    assert write_errors(service) == {"event": 1.0}
    posts = [a for a in raw.attempts if a[1].endswith("/events")]
    assert len(posts) == service.settings.api_write_attempts


# The PodGroup kinds a gang can have, as a list delivers them: items of a list of a
# built-in kind carry no apiVersion or kind, so the Event must not rely on them.
PODGROUP_KINDS = [
    ("podgroups", "scheduling.gang-extender.io/v1alpha1", {"minMember": 2}),
    ("coscheduling-podgroups", "scheduling.x-k8s.io/v1alpha1", {"minMember": 2}),
    ("volcano-podgroups", "scheduling.volcano.sh/v1beta1", {"minMember": 2}),
    (
        "upstream-podgroups",
        "scheduling.k8s.io/v1beta1",
        {"schedulingPolicy": {"gang": {"minCount": 2}}},
    ),
]


@pytest.mark.parametrize(("store", "api_version", "spec"), PODGROUP_KINDS, ids=lambda v: v)
async def test_a_bound_gang_gets_one_gang_scheduled_event_on_its_podgroup(
    service: GangService, raw: FakeRaw, store: str, api_version: str, spec: dict[str, Any]
) -> None:
    podgroup = {"metadata": {"name": "job", "namespace": "default", "uid": "pg-1"}, "spec": spec}
    observe(service, store, podgroup)
    observe(service, "pods", *[make_pod(n).group("job").obj() for n in ("w0", "w1")])
    service.writer.queue_effects([GangBound(plan(GROUP, {"w0": "n1", "w1": "n2"}))])
    await service.queues.join()
    [event] = raw.events()
    assert event["reason"] == "GangScheduled"
    assert event["involvedObject"] == {
        "apiVersion": api_version,
        "kind": "PodGroup",
        "namespace": "default",
        "name": "job",
        "uid": "pg-1",
    }
    assert event["message"] == "gang default/job bound: w0->n1, w1->n2"


async def test_a_bound_gang_without_a_podgroup_gets_its_event_on_its_first_member(
    service: GangService, raw: FakeRaw
) -> None:
    pods = [make_pod(n).group("job").min_available(2).obj() for n in ("w1", "w0")]
    observe(service, "pods", *pods)
    service.writer.queue_effects([GangBound(plan(GROUP, {"w0": "n1", "w1": "n1"}))])
    await service.queues.join()
    [event] = raw.events("GangScheduled")
    assert (event["involvedObject"]["kind"], event["involvedObject"]["name"]) == ("Pod", "w0")


async def test_a_planned_member_bound_before_the_write_gets_no_planned_node_annotation(
    service: GangService, raw: FakeRaw
) -> None:
    # Under load the plan's write runs after kube-scheduler bound some members: on
    # them the annotation would nudge nothing and recovery never reads it.
    the_plan = plan(GROUP, {"w0": "n1", "w1": "n2", "w2": "n2"})
    the_plan.bound.add("uid-w0")
    the_plan.lost["uid-w2"] = "deleted"
    service.writer.queue_effects([PlanCreated(the_plan)])
    await service.queues.join()
    assert raw.patches_of("w0") == []
    assert raw.patches_of("w2") == []
    assert raw.patches_of("w1") == ["n2"]


def gpu_samples(svc: GangService) -> dict[tuple[str, str], float]:
    return {
        (s.labels["pool"], s.labels["state"]): s.value
        for metric in svc.metrics.registry.collect()
        if metric.name == "gang_extender_gpus"
        for s in metric.samples
    }


def test_gpu_gauges_of_a_pool_that_is_gone_are_removed(service: GangService) -> None:
    a100 = make_node("a1").gpus(8).label("gang-extender.io/pool", "a100").obj()
    t4 = make_node("t1").gpus(4).label("gang-extender.io/pool", "t4").obj()
    observe(service, "nodes", a100, t4)
    service.gauges.update()
    assert {pool for pool, _ in gpu_samples(service)} == {"a100", "t4"}
    service.state.on_event("nodes", "DELETED", t4)
    service.gauges.update()
    assert gpu_samples(service) == {
        ("a100", "bound"): 0.0,
        ("a100", "reserved"): 0.0,
        ("a100", "free"): 8.0,
    }


class SyncedCache:
    """The watch cache as the gauges ask it: synced."""

    def synced(self) -> bool:
        return True


def scrape(svc: GangService) -> str:
    with TestClient(create_health_app(svc.ready, svc.metrics, svc.update_gauges)) as client:
        return client.get("/metrics").text


def pending_groups(text: str) -> float | None:
    """The Pending sample, None while the gauge was never drawn."""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "gang_extender_groups" and sample.labels["phase"] == "Pending":
                return sample.value
    return None


def test_a_scrape_draws_the_group_gauges_from_the_core_of_a_synced_leader(
    service: GangService,
) -> None:
    observe(
        service, "pods", *[make_pod(n).group("job").min_available(2).obj() for n in ("w0", "w1")]
    )
    service.cache = SyncedCache()  # type: ignore[assignment]
    assert pending_groups(scrape(service)) == 1
    observe(
        service, "pods", *[make_pod(n).group("other").min_available(2).obj() for n in ("o0", "o1")]
    )
    assert pending_groups(scrape(service)) == 2  # drawn again at each scrape, not on a timer


def test_a_group_with_no_size_is_counted_pending(service: GangService) -> None:
    """The commonest first mistake (no PodGroup, no min-available: `Pending 0/?` in
    `gang-extender status`) must show in the metric GangExtenderGangsStuckPending reads."""
    observe(service, "pods", *[make_pod(n).group("unsized").obj() for n in ("u0", "u1")])
    observe(service, "pods", *[make_pod(n).group("sized").min_available(2).obj() for n in ("s0",)])
    service.cache = SyncedCache()  # type: ignore[assignment]
    assert pending_groups(scrape(service)) == 2


def test_a_scrape_before_the_cache_syncs_or_on_a_follower_leaves_the_gauges_alone(
    service: GangService, monkeypatch: pytest.MonkeyPatch
) -> None:
    observe(
        service, "pods", *[make_pod(n).group("job").min_available(2).obj() for n in ("w0", "w1")]
    )
    assert pending_groups(scrape(service)) is None  # no cache yet: nothing is drawn
    service.cache = SyncedCache()  # type: ignore[assignment]
    monkeypatch.setattr(service.failover, "acting", lambda: False)
    assert pending_groups(scrape(service)) is None


def injected_namespace() -> dict[str, Any]:
    return {"metadata": {"name": "default", "labels": {INJECT_NAMESPACE_LABEL: "enabled"}}}


def observe_injected_job(service: GangService) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The watch delivers an injected namespace, PodGroup job (minMember 2) and its
    members w0 and w1; the PodGroup and the pods."""
    observe(service, "namespaces", injected_namespace())
    pg = make_podgroup("job", 2)
    pg["metadata"]["resourceVersion"] = "1"
    observe(service, "podgroups", pg)
    pods = [make_pod(n).group("job").obj() for n in ("w0", "w1")]
    observe(service, "pods", *pods)
    return pg, pods


def conditions_of(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in status["conditions"]}


async def test_a_namespace_seen_after_its_pods_gets_their_group_wired_at_once(
    service: GangService, wiring: FakeWiring
) -> None:
    """The namespaces and pods watches are separate streams: the pods of a new injected
    namespace may arrive first. Their group is not wired then; the namespace's arrival
    marks it for the next pass (it used to wait for the next resync)."""
    pg = make_podgroup("job", 2)
    pg["metadata"]["resourceVersion"] = "1"
    observe(service, "podgroups", pg)
    observe(service, "pods", *[make_pod(n).group("job").obj() for n in ("w0", "w1")])
    for key in sorted(service.state.dirty):
        await service.reconciler.reconcile_contained(key)
    service.state.dirty.clear()
    assert wiring.calls == 0  # not injected, as far as the service knows yet

    observe(service, "namespaces", injected_namespace())

    assert service.state.dirty == {GROUP}
    await service.reconciler.reconcile_contained(GROUP)
    assert wiring.calls == 1
    # A namespace event that changes nothing of it marks nothing.
    service.state.dirty.clear()
    observe(service, "namespaces", injected_namespace())
    assert service.state.dirty == set()


async def test_a_failing_reconcile_pass_keeps_its_groups_and_the_loop_goes_on(
    service: GangService, wiring: FakeWiring, caplog: pytest.LogCaptureFixture
) -> None:
    """A pass that raises outside any one group (here the coordinator's tick) used to
    end the reconcile loop for good: filters still answered, nothing was wired again."""
    observe_injected_job(service)
    service.settings.reconcile_interval_seconds = 0.001
    ticks = [0]
    real_tick = service.reconciler.tick

    def tick_failing_once() -> None:
        ticks[0] += 1
        if ticks[0] == 1:
            raise RuntimeError("a defect in the tick")
        real_tick()

    service.reconciler.tick = tick_failing_once
    with caplog.at_level(logging.ERROR):
        loop = asyncio.create_task(service.reconciler.run(lambda: True))
        try:
            async with asyncio.timeout(30):  # a hang guard, not a timing assertion
                while wiring.calls == 0:
                    await asyncio.sleep(0.001)
        finally:
            loop.cancel()
    assert ticks[0] >= 2
    assert wiring.calls >= 1
    assert fault_samples(service) == {"reconcile-pass": 1.0}
    assert [r.getMessage() for r in caplog.records if r.exc_info] == [
        "a reconcile pass failed; the next pass runs as usual"
    ]


async def test_a_wiring_conflict_is_told_to_the_user(
    service: GangService, raw: FakeRaw, wiring: FakeWiring
) -> None:
    observe_injected_job(service)
    wiring.error = WiringConflictError(
        "Secret default/job-ssh is not managed by gang-extender; delete or rename it"
    )

    await service.reconciler.reconcile_group(GROUP)
    await service.queues.join()
    warnings = raw.events("GangMisconfigured")
    assert sorted(e["involvedObject"]["name"] for e in warnings) == ["w0", "w1"]
    assert all(e["type"] == "Warning" for e in warnings)
    assert "delete or rename it" in warnings[0]["message"]
    configured = conditions_of(raw.status_patches("job")[-1])["Configured"]
    assert configured["status"] == "False"
    assert configured["reason"] == "WiringConflict"
    assert "Secret default/job-ssh" in configured["message"]
    assert raw.status_patches("job")[-1]["conditions"][0]["type"] == "Scheduled"

    # The same problem again: no second round of Events.
    await service.reconciler.reconcile_group(GROUP)
    await service.queues.join()
    assert len(raw.events("GangMisconfigured")) == 2

    # Fixed: the condition goes away.
    wiring.error = None
    await service.reconciler.reconcile_group(GROUP)
    await service.queues.join()
    assert "Configured" not in conditions_of(raw.status_patches("job")[-1])
    assert len(raw.events("GangMisconfigured")) == 2


async def test_a_bad_task_layout_of_the_podgroup_is_told_to_the_user(
    service: GangService, raw: FakeRaw, wiring: FakeWiring
) -> None:
    wiring.error = MembershipError("PodGroup default/job: spec.minTaskMember.master must be >= 1")
    observe(service, "namespaces", injected_namespace())
    observe(service, "podgroups", make_podgroup("job", 1))
    observe(service, "pods", make_pod("w0").group("job").obj())
    await service.reconciler.reconcile_group(GROUP)
    await service.queues.join()
    [event] = raw.events("GangMisconfigured")
    assert "spec.minTaskMember.master must be >= 1" in event["message"]
    assert conditions_of(raw.status_patches("job")[-1])["Configured"]["reason"] == "InvalidSpec"


async def test_a_malformed_tasks_annotation_is_not_silently_ignored(
    service: GangService, raw: FakeRaw
) -> None:
    pods = [
        make_pod(n).group("job").min_available(2).annotation(TASKS_ANNOTATION, "master=one").obj()
        for n in ("w0", "w1")
    ]
    observe(service, "pods", *pods)
    await service.reconciler.reconcile_group(GROUP)
    await service.queues.join()
    # The PodGroup is still created (without a layout) ...
    [created] = [b for m, p, b in raw.calls if m == "POST" and p.endswith("/podgroups")]
    assert "minTaskMember" not in created["spec"]
    # ... and the members say why the layout was ignored and what to fix.
    warnings = raw.events("GangMisconfigured")
    assert len(warnings) == 2
    assert TASKS_ANNOTATION in warnings[0]["message"]
    assert "'one' is not a whole number" in warnings[0]["message"]
    assert "minTaskMember" in warnings[0]["message"]

    # Once the PodGroup is seen, its status carries the same message.
    observe(service, "podgroups", created)
    await service.reconciler.reconcile_group(GROUP)
    await service.queues.join()
    configured = conditions_of(raw.status_patches("job")[-1])["Configured"]
    assert configured["reason"] == "InvalidTaskLayout"
    assert TASKS_ANNOTATION in configured["message"]
    assert len(raw.events("GangMisconfigured")) == 2


async def test_waiting_events_go_through_the_group_queue(
    service: GangService, raw: FakeRaw
) -> None:
    observe(service, "pods", make_pod("w0").group("job").min_available(2).obj())
    await service.reconciler.reconcile_group(GROUP)
    assert raw.events("GangWaiting") == []  # queued, not written inline by the reconciler
    await service.queues.join()
    assert [e["involvedObject"]["name"] for e in raw.events("GangWaiting")] == ["w0"]


async def test_a_group_that_is_gone_leaves_nothing_in_the_services_memory(
    service: GangService, raw: FakeRaw, wiring: FakeWiring
) -> None:
    pg, pods = observe_injected_job(service)
    await service.reconciler.reconcile_group(GROUP)
    await service.queues.join()
    reconciler = service.reconciler
    assert {"status", "wiring"} <= reconciler.remembered(GROUP)

    for pod in pods:
        service.state.on_event("pods", "DELETED", pod)
    service.state.on_event("podgroups", "DELETED", pg)
    await service.reconciler.reconcile_group(GROUP)
    assert reconciler.remembered(GROUP) == set()


def podgroup_writes(raw: FakeRaw, method: str) -> list[tuple[str, Any]]:
    return [
        (p, b)
        for m, p, b in raw.calls
        if m == method and "/podgroups" in p and not p.endswith("/status")
    ]


async def test_a_created_podgroup_follows_its_members_when_they_agree_on_a_new_size(
    service: GangService, raw: FakeRaw
) -> None:
    pg = make_podgroup("job", 5, created=True)
    pg["metadata"]["resourceVersion"] = "7"
    observe(service, "podgroups", pg)
    observe(
        service, "pods", *(make_pod(f"w{i}").group("job").min_available(3).obj() for i in range(3))
    )
    await service.reconciler.reconcile_group(GROUP)
    [(path, body)] = podgroup_writes(raw, "PATCH")
    assert path.endswith("/podgroups/job")
    assert body["spec"] == {"minMember": 3}
    assert body["metadata"]["uid"] == "pg-uid-job"
    assert body["metadata"]["resourceVersion"] == "7"
    assert [o["name"] for o in body["metadata"]["ownerReferences"]] == ["w0", "w1", "w2"]


async def test_a_created_podgroup_is_owned_by_every_pod_of_its_group_so_it_goes_with_the_last(
    service: GangService, raw: FakeRaw
) -> None:
    first = make_pod("w0").group("job").min_available(2).obj()
    observe(service, "pods", first)
    await service.reconciler.reconcile_group(GROUP)
    [(_, created)] = podgroup_writes(raw, "POST")
    assert created["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Pod", "name": "w0", "uid": "uid-default-w0"}
    ]
    # Seen by the watch, then a second member: it becomes an owner too.
    created["metadata"].update(uid="pg-uid-job", resourceVersion="1")
    observe(service, "podgroups", created)
    observe(service, "pods", make_pod("w1").group("job").min_available(2).obj())
    await service.reconciler.reconcile_group(GROUP)
    [(_, patched)] = podgroup_writes(raw, "PATCH")
    assert [o["uid"] for o in patched["metadata"]["ownerReferences"]] == [
        "uid-default-w0",
        "uid-default-w1",
    ]
    assert patched["spec"] == {"minMember": 2}
    assert podgroup_writes(raw, "DELETE") == []  # the garbage collector's job, not ours


async def test_a_users_podgroup_is_never_changed_or_deleted(
    service: GangService, raw: FakeRaw
) -> None:
    observe(service, "podgroups", make_podgroup("job", 5))
    pod = make_pod("w0").group("job").min_available(1).obj()
    observe(service, "pods", pod)
    await service.reconciler.reconcile_group(GROUP)
    service.state.on_event("pods", "DELETED", pod)
    await service.reconciler.reconcile_group(GROUP)
    assert [
        (m, p) for m, p, _ in raw.calls if "/podgroups" in p and not p.endswith("/status")
    ] == []


async def test_no_gang_event_goes_to_a_pod_of_another_scheduler(
    service: GangService, raw: FakeRaw
) -> None:
    observe(
        service,
        "pods",
        make_pod("master").group("job").min_available(2).obj(),
        make_pod("worker").group("job").scheduler("default-scheduler").obj(),
    )
    await service.reconciler.reconcile_group(GROUP)
    await service.queues.join()
    [event] = raw.events("GangWaiting")
    assert event["involvedObject"]["name"] == "master"
    assert "1 pod of this group uses schedulerName default-scheduler" in event["message"]


def released_gang_of_two(service: GangService) -> list[dict[str, Any]]:
    """Gang default/job (w0, w1, 2 GPUs each) planned on n1 and released to bind."""
    observe(service, "nodes", make_node("n1").gpus(4).obj())
    pods = [make_pod(f"w{i}").group("job").min_available(2).gpus(2).obj() for i in range(2)]
    observe(service, "pods", *pods)
    for pod in pods:
        service.coordinator.filter(pod, ["n1"])
    now = time.time()
    for pod in pods:
        service.core.arrive(pod["metadata"]["uid"], "n1", now)
    return pods


async def test_a_partial_gang_is_told_on_its_members_in_the_words_of_its_status(
    service: GangService, raw: FakeRaw
) -> None:
    """Released, one member bound, the other deleted: a GangPartial Warning whose text
    is the sentence the core put in the group's status when it saw the loss."""
    pods = released_gang_of_two(service)
    bound = {**pods[0], "spec": {**pods[0]["spec"], "nodeName": "n1"}}
    service.state.on_event("pods", "MODIFIED", bound)
    service.state.on_event("pods", "DELETED", pods[1])
    await service.queues.join()
    events = raw.events("GangPartial")
    assert [e["involvedObject"]["name"] for e in events] == ["w0"]
    assert events[0]["type"] == "Warning"
    assert events[0]["message"] == (
        "gang default/job is partial: default/w1 cannot be bound "
        "(member default/w1 was deleted); 1/2 planned members bound"
    )


async def test_a_gang_deleted_with_its_namespace_while_binding_is_not_told_or_counted_partial(
    service: GangService, raw: FakeRaw, caplog: pytest.LogCaptureFixture
) -> None:
    """The namespace is being deleted (a user's `kubectl delete namespace`, or the
    bench's cleanup) while the gang binds: no GangPartial, no Warning, no count."""
    observe(
        service,
        "namespaces",
        {
            "metadata": {"name": "default", "deletionTimestamp": "2026-11-29T17:00:00Z"},
            "status": {"phase": "Terminating"},
        },
    )
    pods = released_gang_of_two(service)
    bound = {**pods[0], "spec": {**pods[0]["spec"], "nodeName": "n1"}}
    with caplog.at_level(logging.INFO, logger="extender"):
        service.state.on_event("pods", "MODIFIED", bound)
        service.state.on_event("pods", "DELETED", pods[1])
        await service.queues.join()
    assert raw.events("GangPartial") == []
    assert not [
        r for r in caplog.records if r.levelno >= logging.WARNING and "partial" in r.message
    ]
    assert any("gone with its namespace" in r.message for r in caplog.records)
    assert service.metrics.registry.get_sample_value("gang_extender_partial_gangs_total") == 0


async def test_when_the_last_member_goes_the_ready_list_is_cleared_once(
    service: GangService, raw: FakeRaw, wiring: FakeWiring
) -> None:
    _, pods = observe_injected_job(service)
    await service.reconciler.reconcile_group(GROUP)
    assert wiring.cleared == []
    for pod in pods:
        service.state.on_event("pods", "DELETED", pod)
    await service.reconciler.reconcile_group(GROUP)
    await service.reconciler.reconcile_group(GROUP)
    assert wiring.cleared == [{"namespace": GROUP.namespace, "group": GROUP.name}]


def fault_samples(svc: GangService) -> dict[str, float]:
    return {
        sample.labels["where"]: sample.value
        for family in text_string_to_metric_families(scrape(svc))
        if family.name == "gang_extender_gang_faults"
        for sample in family.samples
        if sample.name == "gang_extender_gang_faults_total"
    }


async def test_one_groups_reconcile_error_is_counted_each_pass_logged_once_and_kept_to_it(
    service: GangService, wiring: FakeWiring, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 30: a group whose reconcile raises (here its wiring, with an error nobody
    foresaw) is retried every pass; its traceback is logged once, not every second,
    each pass is counted, and the other groups are reconciled all the same."""
    observe_injected_job(service)
    other = GroupKey("default", "other")
    observe(service, "pods", *[make_pod(n).group("other").min_available(2).obj() for n in "ab"])
    wiring.error = OverflowError("int too large to convert to float")
    reconciled: list[GroupKey] = []
    real = service.reconciler.reconcile_group

    async def recording(key: GroupKey) -> None:
        reconciled.append(key)
        await real(key)

    service.reconciler.reconcile_group = recording  # type: ignore[method-assign]
    with caplog.at_level(logging.ERROR):
        for _ in range(3):
            for key in (GROUP, other):
                await service.reconciler.reconcile_contained(key)
    tracebacks = [r for r in caplog.records if r.exc_info and "OverflowError" in r.getMessage()]
    assert len(tracebacks) == 1
    assert fault_samples(service) == {"reconcile": 3.0}
    assert GROUP in service.state.dirty
    assert reconciled.count(other) == 3
    # Another error of that group is news: logged with its traceback too.
    wiring.error = OverflowError("another number")
    with caplog.at_level(logging.ERROR):
        await service.reconciler.reconcile_contained(GROUP)
    tracebacks = [r for r in caplog.records if r.exc_info and "OverflowError" in r.getMessage()]
    assert len(tracebacks) == 2
    assert fault_samples(service) == {"reconcile": 4.0}


async def test_a_slow_group_reconcile_is_timed_and_named_in_the_log(
    service: GangService, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Groups are reconciled one after another: one that takes long delays the wiring
    of every group after it, so it is observed in a histogram and named in the log."""
    from extender.controller import reconcile_pass

    observe_injected_job(service)
    now = [100.0]
    monkeypatch.setattr(service.reconciler, "clock", lambda: now[0])
    real = service.reconciler.reconcile_group

    async def slow(key: GroupKey) -> None:
        await real(key)
        now[0] += reconcile_pass.SLOW_RECONCILE_SECONDS + 1

    service.reconciler.reconcile_group = slow  # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING):
        await service.reconciler.reconcile_contained(GROUP)
    service.reconciler.reconcile_group = real  # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING):
        await service.reconciler.reconcile_contained(GROUP)
    slow_lines = [r.getMessage() for r in caplog.records if "took" in r.getMessage()]
    assert slow_lines == [
        f"reconcile of {GROUP} took 6.0s; the groups after it in this pass waited"
    ]
    counts = {
        sample.name: sample.value
        for family in text_string_to_metric_families(scrape(service))
        if family.name == "gang_extender_reconcile_duration_seconds"
        for sample in family.samples
        if sample.name.endswith("_count") or sample.name.endswith("_sum")
    }
    assert counts == {
        "gang_extender_reconcile_duration_seconds_count": 2.0,
        "gang_extender_reconcile_duration_seconds_sum": 6.0,
    }


async def test_a_reconcile_fault_is_shown_on_that_group_only_once_per_error_until_it_passes(
    service: GangService, raw: FakeRaw, wiring: FakeWiring, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 30: a group whose reconcile raises says so in its PodGroup's `Reconciled`
    condition (reason ReconcileFailed, the error clipped) and a GangReconcileFailed
    Warning on each member, written once per distinct error; the other group shows nothing; the
    condition goes once a reconcile of that group succeeds."""
    observe_injected_job(service)
    other_pg = make_podgroup("other", 2)
    other_pg["metadata"]["resourceVersion"] = "1"
    observe(service, "podgroups", other_pg)
    observe(service, "pods", *[make_pod(n).group("other").obj() for n in ("o0", "o1")])
    secret = "x" * 5000  # a long error text: clipped, not copied whole
    wiring.failing_group = GROUP.name
    wiring.error = OverflowError(f"int too large to convert to float {secret}")

    with caplog.at_level(logging.ERROR):
        for _ in range(3):
            for key in (GROUP, OTHER):
                await service.reconciler.reconcile_contained(key)
    await service.queues.join()

    faulted = [conditions_of(s).get("Reconciled") for s in raw.status_patches("job")]
    shown = [c for c in faulted if c is not None]
    assert len(shown) == 1  # one write for one error, not one per pass
    [condition] = shown
    assert condition["status"] == "False"
    assert condition["reason"] == "ReconcileFailed"
    assert "reconcile failed (OverflowError: int too large to convert" in condition["message"]
    assert len(condition["message"]) <= 1024
    assert all("Reconciled" not in conditions_of(s) for s in raw.status_patches("other"))
    events = raw.events("GangReconcileFailed")  # one per member of that group
    assert sorted(e["involvedObject"]["name"] for e in events) == ["w0", "w1"]
    assert {(e["type"], e["message"]) for e in events} == {("Warning", condition["message"])}
    assert len([r for r in caplog.records if r.exc_info]) == 1

    # Another error of that group is news: shown (and logged) once more.
    wiring.error = OverflowError("another number")
    for _ in range(2):
        await service.reconciler.reconcile_contained(GROUP)
    await service.queues.join()
    latest = conditions_of(raw.status_patches("job")[-1])["Reconciled"]
    assert "another number" in latest["message"]
    assert len(raw.events("GangReconcileFailed")) == 4

    # Fixed: the next reconcile that succeeds clears the condition, once.
    wiring.error = None
    service.state.dirty.clear()  # what `run` does before a pass
    writes = len(raw.status_patches("job"))
    for _ in range(2):
        await service.reconciler.reconcile_contained(GROUP)
    assert len(raw.status_patches("job")) == writes + 1
    assert "Reconciled" not in conditions_of(raw.status_patches("job")[-1])
    assert GROUP not in service.state.dirty


async def test_a_reconcile_faults_condition_is_written_on_a_later_pass_if_the_write_fails(
    service: GangService, raw: FakeRaw, wiring: FakeWiring
) -> None:
    """The status write that would show a reconcile fault fails (the API server is away):
    the next pass, with the same error, still writes it."""
    observe_injected_job(service)
    wiring.error = OverflowError("int too large to convert to float")
    refusing = [True]

    def hook(method: str, path: str, body: Any) -> None:
        showing = path.endswith("/podgroups/job/status") and "Reconciled" in conditions_of(
            body["status"]
        )
        if showing and refusing[0]:
            raise KubeError(503, "try later", "ServiceUnavailable")

    raw.hook = hook
    await service.reconciler.reconcile_contained(GROUP)
    assert not [s for s in raw.status_patches("job") if "Reconciled" in conditions_of(s)]
    refusing[0] = False
    await service.reconciler.reconcile_contained(GROUP)
    await service.reconciler.reconcile_contained(GROUP)
    shown = [conditions_of(s).get("Reconciled") for s in raw.status_patches("job")]
    shown = [c for c in shown if c is not None]
    assert len(shown) == 1
    assert shown[0]["reason"] == "ReconcileFailed"


async def test_the_gang_scheduled_event_names_the_version_the_watch_delivered(
    service: GangService, raw: FakeRaw
) -> None:
    # A watch event's object says its apiVersion (here an older served version).
    podgroup = {
        "apiVersion": "scheduling.k8s.io/v1alpha3",
        "kind": "PodGroup",
        "metadata": {"name": "job", "namespace": "default", "uid": "pg-2"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}},
    }
    service.state.on_event("upstream-podgroups", "ADDED", podgroup)
    observe(service, "pods", *[make_pod(n).group("job").obj() for n in ("w0", "w1")])
    service.writer.queue_effects([GangBound(plan(GROUP, {"w0": "n1", "w1": "n1"}))])
    await service.queues.join()
    [event] = raw.events("GangScheduled")
    assert event["involvedObject"]["apiVersion"] == "scheduling.k8s.io/v1alpha3"
    assert event["involvedObject"]["uid"] == "pg-2"
