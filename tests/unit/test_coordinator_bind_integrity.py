"""The coordinator after a barrier released: failed bindings, gone members, the partial metric."""

from __future__ import annotations

import asyncio
from typing import Any

from extender.coordinator import SchedulingCoordinator
from extender.domain.objects.model import NodeInfo, PodInfo
from extender.domain.state.decisions import Effect, GangBroken, MemberBindFailed
from extender.metrics import Metrics
from extender.ports.binding import BindError
from tests.builders import make_node, make_pod
from tests.core_builder import make_core

T0 = 1_000_000.0


class FailingBinder:
    """Fails the binding of the pods named in `failures` once each, with that BindError."""

    def __init__(self, failures: dict[str, BindError]) -> None:
        self.failures = dict(failures)
        self.bound: list[str] = []

    async def bind(self, *, namespace: str, name: str, uid: str, node: str) -> None:
        failure = self.failures.pop(name, None)
        if failure is not None:
            raise failure
        self.bound.append(name)


def setup(failures: dict[str, BindError]) -> tuple[SchedulingCoordinator, list[Effect], Metrics]:
    core = make_core()
    core.apply_node(NodeInfo.from_api(make_node("n1").gpus(4).obj()))
    pods = [make_pod(f"w{i}").group("g").min_available(2).gpus(2).obj() for i in range(2)]
    for pod in pods:
        core.observe_pod(PodInfo.from_api(pod), T0)
    effects: list[Effect] = []
    metrics = Metrics()
    coordinator = SchedulingCoordinator(
        core, FailingBinder(failures), metrics, effect_sink=effects.extend, clock=lambda: T0
    )
    # kube-scheduler filters every member before it binds it (a bind of a pod this
    # service never filtered is refused).
    for pod in pods:
        coordinator.filter(pod, ["n1"])
    return coordinator, effects, metrics


async def bind_both(coordinator: SchedulingCoordinator) -> list[str]:
    return list(
        await asyncio.gather(
            *(
                coordinator.bind(
                    namespace="default", name=f"w{i}", uid=f"uid-default-w{i}", node="n1"
                )
                for i in range(2)
            )
        )
    )


def partial_gangs(metrics: Metrics) -> Any:
    return metrics.registry.get_sample_value("gang_extender_partial_gangs_total")


async def test_a_member_whose_binding_failed_is_bound_when_kube_scheduler_retries_it() -> None:
    coordinator, effects, metrics = setup({"w1": BindError("500: leader changed")})
    answers = await bind_both(coordinator)
    assert answers[0] == "" and "500: leader changed" in answers[1]
    assert any(isinstance(e, MemberBindFailed) for e in effects)
    retried = await coordinator.bind(
        namespace="default", name="w1", uid="uid-default-w1", node="n1"
    )
    assert retried == ""
    assert coordinator.binder.bound == ["w0", "w1"]  # type: ignore[attr-defined]
    assert partial_gangs(metrics) == 0


async def test_a_member_gone_at_binding_counts_one_partial_gang() -> None:
    coordinator, effects, metrics = setup({"w1": BindError("deleted", gone=True)})
    await bind_both(coordinator)
    assert [e.member for e in effects if isinstance(e, GangBroken)] == ["default/w1"]
    assert partial_gangs(metrics) == 1


async def test_members_gone_with_their_namespace_while_binding_are_no_partial_gang() -> None:
    # The namespace is being deleted: the whole gang goes, so the partial-gang metric
    # (an alert: "must stay 0") is not raised; the core still records the break.
    coordinator, effects, metrics = setup({"w1": BindError("deleted", gone=True)})
    coordinator.namespace_deleted = lambda namespace: namespace == "default"
    await bind_both(coordinator)
    assert [e.member for e in effects if isinstance(e, GangBroken)] == ["default/w1"]
    assert partial_gangs(metrics) == 0


async def test_a_member_someone_else_bound_counts_as_bound_not_partial() -> None:
    coordinator, effects, metrics = setup({"w1": BindError("elsewhere", bound_to="n1")})
    await bind_both(coordinator)
    assert not any(isinstance(e, GangBroken) for e in effects)
    assert partial_gangs(metrics) == 0
    assert coordinator.core.reserved_placements() == 0
