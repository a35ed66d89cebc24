"""The service carries out gang preemption's evictions: annotate, evict through the
Eviction API, Events on both sides; a PodDisruptionBudget's 429 is reported, not retried.

The API server is the fake `RawApi` of test_service_effects; the service is real.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from extender.config import Settings
from extender.domain.objects.membership import GroupKey
from extender.domain.preemption.preemption import PREEMPTED_BY_ANNOTATION
from extender.domain.state.decisions import EvictVictims, Victim
from extender.kube.rawapi import KubeError
from extender.service import Deps, GangService, create_service
from tests.unit.test_service_effects import FakeRaw, FakeWiring

HIGH = GroupKey("default", "high")


@pytest.fixture
def raw() -> FakeRaw:
    return FakeRaw()


@pytest.fixture
def service(raw: FakeRaw) -> Iterator[GangService]:
    settings = Settings(
        api_write_attempts=3,
        api_write_backoff_seconds=0.001,
        api_write_backoff_max_seconds=0.002,
        webhook_config_name=None,
    )
    svc = create_service(settings, Deps(raw=raw, wiring=FakeWiring()))  # type: ignore[arg-type]
    yield svc
    svc.binder.close()


def evict(*victims: tuple[str, str]) -> EvictVictims:
    return EvictVictims(
        group=HIGH,
        preemptor="gang default/high (priority 1000)",
        victims=tuple(Victim(f"uid-{name}", f"default/{name}", unit) for name, unit in victims),
        message="gang default/high: preempting gang default/low (priority 10) to make room",
    )


def requests(raw: FakeRaw, method: str, suffix: str) -> list[Any]:
    return [body for m, path, body in raw.calls if m == method and path.endswith(suffix)]


def budget_refusal() -> KubeError:
    """The API server's answer to an eviction a PodDisruptionBudget forbids."""
    return KubeError(429, "Cannot evict pod as it would violate the pod's disruption budget.")


def refuse_evictions_of(raw: FakeRaw, name: str) -> None:
    """Every eviction of pod `name` is refused by its PodDisruptionBudget."""

    def hook(method: str, path: str, body: Any) -> None:
        if path.endswith(f"/pods/{name}/eviction"):
            raise budget_refusal()

    raw.hook = hook


async def test_each_victim_is_marked_then_evicted_with_its_uid_and_told_who_preempted(
    service: GangService, raw: FakeRaw
) -> None:
    service.writer.queue_effects(
        [evict(("low-0", "gang default/low"), ("low-1", "gang default/low"))]
    )
    await service.queues.join()
    for name in ("low-0", "low-1"):
        marks = requests(raw, "PATCH", f"/pods/{name}")
        assert marks == [
            {
                "metadata": {
                    "annotations": {PREEMPTED_BY_ANNOTATION: "gang default/high (priority 1000)"}
                }
            }
        ]
        evictions = requests(raw, "POST", f"/pods/{name}/eviction")
        assert evictions == [
            {
                "apiVersion": "policy/v1",
                "kind": "Eviction",
                "metadata": {"name": name, "namespace": "default"},
                "deleteOptions": {"preconditions": {"uid": f"uid-{name}"}},
            }
        ]
        order = [path for _, path, _ in raw.calls if f"/pods/{name}" in path]
        assert order.index(f"/api/v1/namespaces/default/pods/{name}") < order.index(
            f"/api/v1/namespaces/default/pods/{name}/eviction"
        )
    victim_events = raw.events("PreemptedByGang")
    assert sorted(e["involvedObject"]["name"] for e in victim_events) == ["low-0", "low-1"]
    assert all("gang default/high (priority 1000)" in e["message"] for e in victim_events)
    assert all(e["type"] == "Warning" for e in victim_events)


async def test_a_pdb_refusal_is_reported_to_the_core_and_the_mark_taken_back(
    service: GangService, raw: FakeRaw
) -> None:
    refuse_evictions_of(raw, "guarded")
    service.writer.queue_effects([evict(("guarded", "pod default/guarded"))])
    await service.queues.join()
    assert len([a for a in raw.attempts if a[1].endswith("/eviction")]) == 1, "429 is not retried"
    marks = [
        body["metadata"]["annotations"][PREEMPTED_BY_ANNOTATION]
        for body in requests(raw, "PATCH", "/pods/guarded")
    ]
    assert marks == ["gang default/high (priority 1000)", None]
    assert "pod default/guarded" in service.core.preemption.refused_evictions
    refused = raw.events("PreemptionRefused")
    assert [e["involvedObject"]["name"] for e in refused] == ["guarded"]
    assert "disruption budget" in refused[0]["message"]
    assert raw.events("PreemptedByGang") == []


async def test_a_gang_whose_first_member_a_budget_protects_is_left_whole(
    service: GangService, raw: FakeRaw
) -> None:
    refuse_evictions_of(raw, "low-0")
    service.writer.queue_effects(
        [evict(("low-0", "gang default/low"), ("low-1", "gang default/low"))]
    )
    await service.queues.join()
    assert [a for a in raw.attempts if "/pods/low-1" in a[1]] == [], "low-1 is not touched"
    assert "gang default/low" in service.core.preemption.refused_evictions


async def test_a_later_member_refused_is_tried_again_so_the_gang_does_not_run_short(
    service: GangService, raw: FakeRaw
) -> None:
    refusals = [budget_refusal()]

    def hook(method: str, path: str, body: Any) -> None:
        if path.endswith("/pods/low-1/eviction") and refusals:
            raise refusals.pop()

    raw.hook = hook
    service.writer.queue_effects(
        [evict(("low-0", "gang default/low"), ("low-1", "gang default/low"))]
    )
    await service.queues.join()
    attempts = [a for a in raw.attempts if a[1].endswith("/pods/low-1/eviction")]
    assert len(attempts) == 2
    assert len(requests(raw, "POST", "/pods/low-1/eviction")) == 1
    assert sorted(e["involvedObject"]["name"] for e in raw.events("PreemptedByGang")) == [
        "low-0",
        "low-1",
    ]
    assert service.core.preemption.refused_evictions == {}


def evictions_counted(svc: GangService) -> dict[str, float]:
    return {
        sample.labels["result"]: sample.value
        for metric in svc.metrics.registry.collect()
        if metric.name == "gang_extender_preemption_evictions"
        for sample in metric.samples
        if sample.name.endswith("_total")
    }


async def test_evictions_are_counted_by_result(service: GangService, raw: FakeRaw) -> None:
    refuse_evictions_of(raw, "guarded")
    service.writer.queue_effects(
        [evict(("guarded", "pod default/guarded"), ("free", "pod default/free"))]
    )
    await service.queues.join()
    assert evictions_counted(service) == {"evicted": 1.0, "refused": 1.0}


# ------------------------------ issue 30, finding 4: a victim the service may not touch
def forbidden(action: str = "patch") -> KubeError:
    """The API server's answer where the service has no RoleBinding (namespace team-b)."""
    return KubeError(
        403,
        f'pods "low-0" is forbidden: User "system:serviceaccount:gang-system:gang-extender" '
        f'cannot {action} resource "pods" in API group "" in the namespace "default"',
        reason="Forbidden",
    )


def fail_marks_of(raw: FakeRaw, name: str, *errors: KubeError) -> None:
    """The mark (PATCH) of pod `name` fails with `errors` in turn, then succeeds."""
    queue = list(errors)

    def hook(method: str, path: str, body: Any) -> None:
        if method == "PATCH" and path.endswith(f"/pods/{name}") and queue:
            raise queue.pop(0)

    raw.hook = hook


async def test_a_forbidden_mark_is_a_refused_eviction_the_core_is_told_of(
    service: GangService, raw: FakeRaw
) -> None:
    fail_marks_of(raw, "low-0", forbidden())
    before = time.time()
    service.writer.queue_effects(
        [evict(("low-0", "gang default/low"), ("low-1", "gang default/low"))]
    )
    await service.queues.join()
    assert len([a for a in raw.attempts if a[0] == "PATCH"]) == 1, "a 403 is not retried"
    assert [a for a in raw.attempts if a[1].endswith("/eviction")] == [], "nothing evicted"
    assert [a for a in raw.attempts if "/pods/low-1" in a[1]] == [], "the gang is left whole"
    # Left out for the forbidden time, not just one hold: not chosen again after it.
    until = service.core.preemption.refused_evictions["gang default/low"]
    assert until >= before + service.settings.preemption_forbidden_seconds
    [refused] = raw.events("PreemptionRefused")
    assert refused["involvedObject"]["name"] == "low-0"
    assert "status 403 Forbidden" in refused["message"]
    assert "bind ClusterRole gang-extender-namespace" in refused["message"]
    assert f"{service.settings.preemption_forbidden_seconds:g} s" in refused["message"]
    assert raw.events("PreemptedByGang") == []
    assert evictions_counted(service) == {"failed": 1.0}


async def test_a_mark_failing_transiently_is_retried_then_the_victim_evicted(
    service: GangService, raw: FakeRaw
) -> None:
    fail_marks_of(raw, "low-0", KubeError(503, "unavailable"), KubeError(0, "no answer"))
    service.writer.queue_effects([evict(("low-0", "pod default/low-0"))])
    await service.queues.join()
    assert len([a for a in raw.attempts if a[0] == "PATCH"]) == 3
    assert len(requests(raw, "POST", "/pods/low-0/eviction")) == 1
    assert service.core.preemption.refused_evictions == {}
    assert evictions_counted(service) == {"evicted": 1.0}


async def test_a_mark_failing_through_every_retry_is_left_out_for_one_hold(
    service: GangService, raw: FakeRaw
) -> None:
    attempts = service.settings.api_write_attempts
    fail_marks_of(raw, "low-0", *(KubeError(503, "unavailable") for _ in range(attempts)))
    before = time.time()
    service.writer.queue_effects([evict(("low-0", "pod default/low-0"))])
    await service.queues.join()
    assert len([a for a in raw.attempts if a[0] == "PATCH"]) == attempts
    assert [a for a in raw.attempts if a[1].endswith("/eviction")] == []
    until = service.core.preemption.refused_evictions["pod default/low-0"]
    hold = service.settings.preemption_hold_seconds
    assert before + hold <= until < before + service.settings.preemption_forbidden_seconds
    assert "status 503" in raw.events("PreemptionRefused")[0]["message"]


async def test_a_forbidden_eviction_is_told_to_the_core_and_the_mark_taken_back(
    service: GangService, raw: FakeRaw
) -> None:
    def hook(method: str, path: str, body: Any) -> None:
        if path.endswith("/pods/low-0/eviction"):
            raise forbidden("create")

    raw.hook = hook
    service.writer.queue_effects([evict(("low-0", "pod default/low-0"))])
    await service.queues.join()
    assert len([a for a in raw.attempts if a[1].endswith("/eviction")]) == 1
    marks = [
        body["metadata"]["annotations"][PREEMPTED_BY_ANNOTATION]
        for body in requests(raw, "PATCH", "/pods/low-0")
    ]
    assert marks == ["gang default/high (priority 1000)", None]
    assert "pod default/low-0" in service.core.preemption.refused_evictions
    assert "evict it (status 403 Forbidden)" in raw.events("PreemptionRefused")[0]["message"]


async def test_a_later_member_that_cannot_be_marked_is_evicted_unmarked_not_left_running(
    service: GangService, raw: FakeRaw
) -> None:
    fail_marks_of(raw, "low-1", forbidden())
    service.writer.queue_effects(
        [evict(("low-0", "gang default/low"), ("low-1", "gang default/low"))]
    )
    await service.queues.join()
    assert len(requests(raw, "POST", "/pods/low-1/eviction")) == 1
    assert service.core.preemption.refused_evictions == {}
