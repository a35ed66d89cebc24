"""What a caller of the extender can make the service do with request bodies alone.

Only the watch says which pods exist and what they request: pods seen only in
request bodies are never stored, and a bind is made only for a pod the watch
delivered, of this scheduler, that this service filtered onto that node.
"""

from __future__ import annotations

from typing import Any

import pytest

from extender.coordinator import SchedulingCoordinator
from extender.domain.gang.gang import GangCore
from extender.domain.objects.model import GroupSpec, PodInfo
from extender.domain.state.decisions import PlanCreated, Verdict
from extender.metrics import Metrics
from tests.builders import make_node, make_pod, make_podgroup
from tests.core_builder import make_core
from tests.unit.test_extender_wire import RecordingBinder

T0 = 1_000_000.0


def core_with(nodes: list[dict[str, Any]], pods: list[dict[str, Any]] = ()) -> GangCore:
    return make_core(nodes, pods, now=T0)


def coordinated(core: GangCore) -> tuple[SchedulingCoordinator, RecordingBinder]:
    binder = RecordingBinder()
    coordinator = SchedulingCoordinator(
        core, binder, Metrics(), effect_sink=lambda effects: None, clock=lambda: T0
    )
    return coordinator, binder


def state_size(core: GangCore) -> tuple[int, int, int, int, int]:
    return (
        len(core.snapshot.pods),
        len(core.groups),
        len(core.restrictions),
        len(core.barrier.offered),
        len(core.ledger.plans),
    )


# ---- bind refusals: a 200 with Error naming what is wrong ----
NODES = [make_node("n1").gpus(4).obj(), make_node("n2").gpus(4).obj()]


def plain(name: str = "p", scheduler: str | None = None) -> dict[str, Any]:
    builder = make_pod(name).gpus(1)
    if scheduler is not None:
        builder = builder.scheduler(scheduler)
    return builder.obj()


BIND_CASES = [
    pytest.param(
        [],
        lambda core, coordinator: None,
        ("default", "ghost", "uid-ghost", "n1"),
        "refusing to bind default/ghost: uid uid-ghost is not a pod in gang-extender's watch cache",
        id="pod the watch never delivered",
    ),
    pytest.param(
        [plain("other", scheduler="default-scheduler")],
        lambda core, coordinator: coordinator.filter(plain("other", "default-scheduler"), ["n1"]),
        ("default", "other", "uid-default-other", "n1"),
        "refusing to bind default/other: its schedulerName is 'default-scheduler', not 'gang-extender'",
        id="pod of another scheduler",
    ),
    pytest.param(
        [plain()],
        lambda core, coordinator: None,
        ("default", "p", "uid-default-p", "n1"),
        "refusing to bind default/p: this gang-extender never filtered it"
        " (kube-scheduler retries it with a filter first)",
        id="pod never filtered",
    ),
    pytest.param(
        [plain()],
        lambda core, coordinator: coordinator.filter(plain(), ["n1"]),
        ("default", "p", "uid-default-p", "n2"),
        "refusing to bind default/p to n2: the last filter offered it n1",
        id="node the filter did not offer",
    ),
    pytest.param(
        [plain()],
        lambda core, coordinator: coordinator.filter(plain(), ["n1", "n2"]),
        ("default", "p", "uid-default-p", "n3"),
        "refusing to bind default/p to n3: the last filter offered it n1, n2",
        id="node outside the several the filter offered",
    ),
    pytest.param(
        [plain()],
        lambda core, coordinator: coordinator.filter(plain(), ["n1"]),
        ("kube-system", "p", "uid-default-p", "n1"),
        "refusing to bind kube-system/p: uid uid-default-p is pod default/p",
        id="uid of another pod's name",
    ),
    pytest.param(
        [make_pod("bound").gpus(1).node("n1").obj()],
        lambda core, coordinator: None,
        ("default", "bound", "uid-default-bound", "n2"),
        "refusing to bind default/bound: it is already bound to n1",
        id="pod already bound",
    ),
    pytest.param(
        [make_pod(f"w{i}").group("g").min_available(2).gpus(1).obj() for i in range(2)],
        lambda core, coordinator: coordinator.filter(
            make_pod("w0").group("g").min_available(2).gpus(1).obj(), ["n1"]
        ),
        ("default", "w1", "uid-default-w1", "n1"),
        "refusing to bind default/w1: this gang-extender never filtered it"
        " (kube-scheduler retries it with a filter first)",
        id="planned member never filtered itself",
    ),
    pytest.param(
        [make_pod("w0").group("g").min_available(3).gpus(1).obj()],
        lambda core, coordinator: coordinator.filter(
            make_pod("w0").group("g").min_available(3).gpus(1).obj(), ["n1"]
        ),
        ("default", "w0", "uid-default-w0", "n1"),
        "refusing to bind default/w0 to n1: the last filter offered it no node",
        id="held member",
    ),
]


@pytest.mark.parametrize(("pods", "before", "args", "message"), BIND_CASES)
async def test_bind_refusals(
    pods: list[dict[str, Any]],
    before: Any,
    args: tuple[str, str, str, str],
    message: str,
) -> None:
    core = core_with(NODES, pods)
    coordinator, binder = coordinated(core)
    before(core, coordinator)
    plans = dict(core.ledger.plans)
    namespace, name, uid, node = args
    error = await coordinator.bind(namespace=namespace, name=name, uid=uid, node=node)
    assert error == message  # the whole message kube-scheduler is given, word for word
    assert binder.bound == []
    assert core.ledger.plans == plans  # a refused bind drops no plan


async def test_a_filtered_plain_pod_is_bound() -> None:
    core = core_with(NODES, [plain()])
    coordinator, binder = coordinated(core)
    assert "n2" in coordinator.filter(plain(), ["n1", "n2"]).nodes
    assert (
        await coordinator.bind(namespace="default", name="p", uid="uid-default-p", node="n2") == ""
    )
    assert binder.bound == [("default", "p", "n2")]


async def test_planned_members_filtered_onto_their_node_are_bound_together() -> None:
    members = [make_pod(f"w{i}").group("g").min_available(2).gpus(1).obj() for i in range(2)]
    core = core_with(NODES, members)
    coordinator, binder = coordinated(core)
    nodes = {m["metadata"]["name"]: coordinator.filter(m, ["n1", "n2"]).nodes for m in members}
    assert all(len(n) == 1 for n in nodes.values())
    import asyncio

    errors = await asyncio.gather(
        *(
            coordinator.bind(
                namespace="default", name=name, uid=f"uid-default-{name}", node=node[0]
            )
            for name, node in nodes.items()
        )
    )
    assert errors == ["", ""]
    assert sorted(name for _, name, _ in binder.bound) == ["w0", "w1"]


async def test_a_wrong_node_bind_of_a_planned_member_leaves_its_plan_alone() -> None:
    members = [make_pod(f"w{i}").group("g").min_available(2).gpus(1).obj() for i in range(2)]
    core = core_with(NODES, members)
    coordinator, _ = coordinated(core)
    for member in members:
        coordinator.filter(member, ["n1", "n2"])
    (plan,) = core.ledger.plans.values()
    planned = plan.placements["uid-default-w0"]
    other = "n2" if planned == "n1" else "n1"
    error = await coordinator.bind(namespace="default", name="w0", uid="uid-default-w0", node=other)
    assert "the last filter offered it" in error
    assert list(core.ledger.plans.values()) == [plan]


# ---- request-only pods are never stored ----
def test_memory_does_not_grow_with_forged_filters() -> None:
    core = core_with(NODES, [make_pod("real").group("g").min_available(2).gpus(1).obj()])
    before = state_size(core)
    for i in range(2000):
        forged = make_pod(f"forged-{i}").group(f"grp-{i % 7}").min_available(1).gpus(1).obj()
        core.filter(core.asked_about(forged), ["n1", f"fake-node-{i}"], T0)
        core.prioritize(core.asked_about(forged), ["n1", f"fake-node-{i}"])
        plain_forged = make_pod(f"plain-{i}").gpus(1).obj()
        core.filter(core.asked_about(plain_forged), ["n1"], T0)
    # A forged member of the real group "g" may mark that group as asked about: that is
    # one entry per real group, not per request.
    after = state_size(core)
    assert after[0] == before[0] and after[2:] == before[2:]
    assert after[1] <= before[1] + 1


def test_a_forged_member_does_not_complete_a_quorum() -> None:
    real = make_pod("real").group("g").min_available(2).gpus(1).obj()
    core = core_with(NODES, [real])
    core.apply_group_spec(GroupSpec.from_podgroup(make_podgroup("g", 2), source="PodGroup"))
    forged = make_pod("forged").group("g").min_available(2).gpus(1).obj()
    assert core.filter(core.asked_about(forged), ["n1"], T0).verdict is Verdict.WAIT
    held = core.filter(core.asked_about(real), ["n1"], T0 + 1)
    assert held.verdict is Verdict.WAIT and "1/2" in held.message
    assert core.ledger.plans == {}
    assert not any(isinstance(e, PlanCreated) for e in core.drain_effects())


@pytest.mark.parametrize("bound", [False, True], ids=["pending", "claiming a node"])
def test_negative_requests_in_a_request_body_cannot_change_free_capacity(bound: bool) -> None:
    core = core_with([make_node("n1").gpus(4).obj()])
    builder = make_pod("negative").gpus(-100)
    if bound:
        builder = builder.node("n1")
    for verb_group in (None, "g"):
        pod = builder.obj()
        if verb_group is not None:
            pod["metadata"].setdefault("labels", {})["gang-extender.io/group"] = verb_group
            pod["metadata"].setdefault("annotations", {})["gang-extender.io/min-available"] = "1"
        core.filter(core.asked_about(pod), ["n1"], T0)
    assert core.snapshot.free_gpus("n1") == 4
    assert core.free_after_reservations("n1")["nvidia.com/gpu"] == 4
    assert core.ledger.plans == {}


def test_a_request_copy_of_a_known_pod_is_filtered_as_the_watch_has_it() -> None:
    # Same uid, other figures: the request's copy says nothing the watch did not.
    core = core_with([make_node("n1").gpus(4).obj()], [make_pod("real").gpus(8).obj()])
    forged = PodInfo.from_api(make_pod("real").gpus(-100).obj())
    core.filter(forged, ["n1"], T0)
    assert core.snapshot.pods["uid-default-real"].requests["nvidia.com/gpu"] == 8
    assert core.snapshot.free_gpus("n1") == 4
