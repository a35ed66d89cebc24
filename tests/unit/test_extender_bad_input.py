"""What the extender does with requests it should not trust: malformed pods, pods that
claim a node, and barriers that time out however the timeout is noticed."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Coroutine
from typing import Any

import pytest

from extender.api.wire import ExtenderBindingArgs
from extender.coordinator import SchedulingCoordinator
from extender.domain.objects.model import GroupSpec, NodeInfo, PodInfo
from extender.domain.state.decisions import Verdict
from extender.metrics import Metrics
from tests.builders import make_node, make_pod, make_podgroup
from tests.core_builder import make_core
from tests.unit.test_extender_wire import ROOMY, RecordingBinder, build, seed_pods


def broken(path: list[str | int], value: Any) -> dict[str, Any]:
    pod = make_pod("odd").gpus(1).obj()
    target: Any = pod
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    return pod


MALFORMED_PODS = [
    pytest.param(
        broken(["spec", "containers"], "busybox"), "spec.containers", id="containers-not-a-list"
    ),
    pytest.param(
        broken(["spec", "containers", 0], "busybox"),
        "spec.containers.0",
        id="container-not-an-object",
    ),
    pytest.param(
        broken(["spec", "containers", 0, "resources", "requests"], ["nvidia.com/gpu"]),
        "spec.containers.0.resources.requests",
        id="requests-not-a-map",
    ),
    pytest.param(
        broken(["metadata", "labels"], ["a", "b"]), "metadata.labels", id="labels-not-a-map"
    ),
    pytest.param(broken(["metadata", "uid"], ""), "metadata.uid", id="empty-uid"),
    pytest.param(
        broken(["spec", "tolerations"], "all"), "spec.tolerations", id="tolerations-not-a-list"
    ),
    pytest.param(broken(["spec"], 7), "spec", id="spec-not-an-object"),
    pytest.param(
        broken(["status"], {"nominatedNodeName": 5}),
        "status.nominatedNodeName",
        id="nomination-not-a-name",
    ),
]


@pytest.mark.parametrize("verb", ["filter", "prioritize"])
@pytest.mark.parametrize(("pod", "field"), MALFORMED_PODS)
async def test_a_pod_of_the_wrong_shape_gets_400_naming_the_field(
    verb: str, pod: dict[str, Any], field: str
) -> None:
    client, _, _ = build(ROOMY, seed_pods())
    async with client:
        response = await client.post(f"/{verb}", json={"Pod": pod, "NodeNames": ["n1", "n2"]})
        assert response.status_code == 400
        error = response.json()["Error"]
        assert f"not a Pod this extender can read: {field}: " in error
        # The service is still up and answering.
        ok = await client.post(
            "/filter", json={"Pod": make_pod("plain").obj(), "NodeNames": ["n1"]}
        )
        assert ok.status_code == 200


async def test_a_request_pod_that_claims_a_node_does_not_take_its_capacity() -> None:
    # kube-scheduler only asks about pods it is placing; only the watch says what is bound.
    client, _, core = build(ROOMY, seed_pods())
    claims_n2 = make_pod("impostor").gpus(4).node("n2").obj()
    wants_n2 = make_pod("plain").gpus(4).obj()
    async with client:
        before = (
            await client.post("/prioritize", json={"Pod": wants_n2, "NodeNames": ["n2"]})
        ).json()
        await client.post("/prioritize", json={"Pod": claims_n2, "NodeNames": ["n2"]})
        after = (
            await client.post("/prioritize", json={"Pod": wants_n2, "NodeNames": ["n2"]})
        ).json()
        fit = (
            await client.post("/filter", json={"Pod": wants_n2, "NodeNames": ["n1", "n2"]})
        ).json()
    # n2 is empty: it scores 0, and a node that scores 0 is left out of the answer.
    assert before == after == []
    assert core.snapshot.free_gpus("n2") == 4
    assert claims_n2["metadata"]["uid"] not in core.snapshot.pods
    assert fit["NodeNames"] == ["n1", "n2"]


async def test_a_pending_gang_member_seen_only_in_a_request_is_held_not_recorded_and_not_bound() -> (
    None
):
    # The watch may deliver a pod after kube-scheduler asks about it: until it does, the
    # member is held (never bound alone) and nothing from the request is kept, since a
    # request body is not evidence that a pod exists.
    client, binder, core = build(ROOMY, [])
    early = make_pod("early").group("job").gpus(1).obj()
    async with client:
        held = (await client.post("/filter", json={"Pod": early, "NodeNames": ["n1", "n2"]})).json()
        bind = await client.post(
            "/bind",
            json=binding(early, "n1"),
        )
    assert held["NodeNames"] == [] and set(held["FailedAndUnresolvableNodes"]) == {"n1", "n2"}
    assert "not in gang-extender's watch cache" in held["FailedAndUnresolvableNodes"]["n1"]
    assert early["metadata"]["uid"] not in core.snapshot.pods
    assert "not a pod in gang-extender's watch cache" in bind.json()["Error"]
    assert binder.bound == []


def binding(pod: dict[str, Any], node: str) -> dict[str, str]:
    """ExtenderBindingArgs for `pod` on `node`, as kube-scheduler sends them."""
    meta = pod["metadata"]
    return {
        "PodName": meta["name"],
        "PodNamespace": meta.get("namespace") or "default",
        "PodUID": meta["uid"],
        "Node": node,
    }


def bind_call(
    coordinator: SchedulingCoordinator, pod: dict[str, Any], node: str
) -> Coroutine[Any, Any, str]:
    """The coordinator's bind of `pod` on `node`, with the fields the /bind route unpacks."""
    args = ExtenderBindingArgs(**binding(pod, node))
    return coordinator.bind(
        namespace=args.PodNamespace, name=args.PodName, uid=args.PodUID, node=args.Node
    )


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def counter(metrics: Metrics, name: str) -> float:
    value = metrics.registry.get_sample_value(name)
    assert value is not None, f"{name} is not exported"
    return value


async def test_a_barrier_expired_by_the_periodic_tick_counts_as_one_barrier_timeout() -> None:
    clock = Clock(1_000.0)
    core = make_core()
    for node in (make_node("n1").gpus(4).obj(),):
        core.apply_node(NodeInfo.from_api(node))
    members = [make_pod(f"w{i}").group("job").gpus(1).obj() for i in range(2)]
    for pod in members:
        core.observe_pod(PodInfo.from_api(pod), clock.now)
    core.apply_group_spec(GroupSpec.from_podgroup(make_podgroup("job", 2), source="PodGroup"))
    metrics = Metrics()
    binder = RecordingBinder()
    coordinator = SchedulingCoordinator(
        core, binder, metrics, effect_sink=lambda e: None, clock=clock
    )

    decision = coordinator.filter(copy.deepcopy(members[0]), ["n1"])
    assert decision.verdict is Verdict.PLANNED
    first = asyncio.create_task(bind_call(coordinator, members[0], "n1"))
    await asyncio.sleep(0)  # w0 is inside the barrier; w1 never arrives
    clock.now += 61  # past the group's schedule timeout and the barrier timeout
    coordinator.tick()
    error = await asyncio.wait_for(first, timeout=5)

    assert "timeout" in error
    assert binder.bound == []
    assert counter(metrics, "gang_extender_bind_barrier_timeouts_total") == 1


async def test_a_chunked_body_without_length_is_cut_off_at_the_limit() -> None:
    # No Content-Length: the limit has to hold while the stream is read.
    client, _, _ = build(ROOMY, seed_pods())

    async def endless_names():
        yield b'{"Pod": {"metadata": {"name": "p", "uid": "u"}}, "NodeNames": ['
        for i in range(200_000):
            yield b'"node-%07d",' % i

    async with client:
        response = await client.post("/filter", content=endless_names())
    assert response.status_code == 400
    assert "exceeds the 1048576 byte limit (reading stopped after" in response.json()["Error"]


class GatedBinder(RecordingBinder):
    """Holds every binding until `release` is set, so several are in flight at once."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()
        self.started = 0

    async def bind(self, *, namespace: str, name: str, uid: str, node: str) -> None:
        self.started += 1
        await self.release.wait()
        await super().bind(namespace=namespace, name=name, uid=uid, node=node)


async def test_two_plain_binds_in_flight_cannot_both_take_the_last_room_beside_a_reservation() -> (
    None
):
    # n1 and n2 have 4 GPUs; the gang reserves 3 on each. kube-scheduler may not see
    # the reservation (a member it has not assumed), so the extender's bind is the guard.
    clock = Clock(1_000.0)
    core = make_core()
    for name in ("n1", "n2"):
        core.apply_node(NodeInfo.from_api(make_node(name).gpus(4).obj()))
    members = [make_pod(f"big-{i}").group("big").gpus(3).obj() for i in range(2)]
    plain = [make_pod(f"plain-{i}").gpus(1).obj() for i in range(2)]
    for pod in [*members, *plain]:
        core.observe_pod(PodInfo.from_api(pod), clock.now)
    core.apply_group_spec(GroupSpec.from_podgroup(make_podgroup("big", 2), source="PodGroup"))
    binder = GatedBinder()
    coordinator = SchedulingCoordinator(
        core, binder, Metrics(), effect_sink=lambda e: None, clock=clock
    )
    assert coordinator.filter(copy.deepcopy(members[0]), ["n1", "n2"]).verdict is Verdict.PLANNED
    assert core.ledger.reserved("n2")

    for pod in plain:  # each fits beside the reservation on its own
        assert "n2" in coordinator.filter(copy.deepcopy(pod), ["n1", "n2"]).nodes

    def bind(pod: dict[str, Any]) -> asyncio.Task[str]:
        return asyncio.create_task(bind_call(coordinator, pod, "n2"))

    first, second = bind(plain[0]), bind(plain[1])
    await asyncio.sleep(0)
    binder.release.set()
    answers = await asyncio.gather(first, second)

    assert answers[0] == ""
    assert "was reserved for gang default/big" in answers[1]
    assert [name for _, name, _ in binder.bound] == ["plain-0"]
    assert core.snapshot.free_gpus("n2") - core.ledger.reserved("n2")["nvidia.com/gpu"] == 0


async def test_a_failed_plain_bind_gives_its_assumed_room_back() -> None:
    client, binder, core = build(ROOMY, seed_pods())
    plain = make_pod("plain").gpus(2).obj()
    core.observe_pod(PodInfo.from_api(plain), 0.0)
    binder.fail_with = 'pods "plain" is forbidden'
    async with client:
        await client.post("/filter", json={"Pod": plain, "NodeNames": ["n1", "n2"]})
        answer = await client.post(
            "/bind",
            json=binding(plain, "n2"),
        )
    assert "forbidden" in answer.json()["Error"]
    assert core.snapshot.free_gpus("n2") == 4
    assert core.snapshot.pods[plain["metadata"]["uid"]].node_name is None
