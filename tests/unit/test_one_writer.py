"""One writer: a replica acts (plans, binds, writes) only while it holds the Lease,
counted from before its last renew, and only once it has rebuilt the plans of its term."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import httpx

from extender.api.extender import NOT_THE_LEADER, create_extender_app
from extender.config import Settings
from extender.controller.cluster_state import ClusterState
from extender.controller.effects import EffectWriter, GroupQueues
from extender.controller.failover import Failover, LeaderOnlyBinder
from extender.domain.gang.gang import GangCore
from extender.domain.objects.membership import PLANNED_NODE_ANNOTATION, GroupKey
from extender.domain.objects.model import GroupSpec, NodeInfo, PodInfo
from extender.domain.state.decisions import PlanDropped
from extender.kube.leader import LeaderElector
from extender.kube.rawapi import KubeError
from extender.metrics import Metrics
from extender.ports.binding import BindError
from tests.builders import make_node, make_pod, make_podgroup
from tests.core_builder import make_core

T0 = 1_800_000_000.0
LEASE = 10.0


class Clock:
    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class FakeLeaseApi:
    """A Lease endpoint: `holder` owns it unless None; each call takes `call_seconds`."""

    def __init__(self, clock: Clock, *, holder: str | None = None, call_seconds: float = 0) -> None:
        self.clock = clock
        self.holder = holder
        self.call_seconds = call_seconds
        self.lease: dict[str, Any] | None = None

    def call(self, method: str, path: str, body: Any = None, **_: Any) -> dict[str, Any]:
        self.clock.now += self.call_seconds  # the call takes this long, on our clock too
        if method == "GET":
            if self.holder is not None:
                return {
                    "spec": {
                        "holderIdentity": self.holder,
                        "renewTime": "2999-01-01T00:00:00.000000Z",
                        "leaseDurationSeconds": int(LEASE),
                    }
                }
            if self.lease is None:
                raise KubeError(404, "not found")
            return self.lease
        self.lease = body
        return body


def elector(api: FakeLeaseApi, clock: Clock, on_change: Any = None) -> LeaderElector:
    return LeaderElector(
        api,  # type: ignore[arg-type]
        namespace="gang-system",
        name="gang-extender-service",
        lease_seconds=LEASE,
        renew_seconds=LEASE / 3,
        metrics=Metrics(),
        identity="me",
        clock=clock,
        on_change=on_change,
    )


async def test_lease_validity_is_counted_from_before_the_renew_call() -> None:
    # The API server may write renewTime at any moment until we read its answer: a
    # renew that took 4 s must not give us 4 s more than the standby waits out.
    clock = Clock(100.0)
    leader = elector(FakeLeaseApi(clock, call_seconds=2.0), clock)  # GET + POST: 4 s
    await leader.round()
    assert clock.now == 104.0
    clock.now = 100.0 + LEASE - 0.01
    assert leader.is_leader
    clock.now = 100.0 + LEASE + 0.01  # counted from the answer it would still lead (to 114)
    assert not leader.is_leader


async def test_leadership_changes_are_reported_once_each_with_a_new_term() -> None:
    clock = Clock(100.0)
    changes: list[bool] = []
    api = FakeLeaseApi(clock)
    leader = elector(api, clock, on_change=changes.append)
    await leader.round()
    await leader.round()
    assert (changes, leader.term) == ([True], 1)
    api.holder = "other"  # renew refused from now on; our lease runs out on the clock
    await leader.round()
    assert changes == [True]
    clock.now += LEASE
    assert leader.observe() is False
    assert (changes, leader.term) == ([True, False], 1)
    api.holder = None
    await leader.round()
    assert (changes, leader.term) == ([True, False, True], 2)


# ---- a deposed leader on the wire ----


class NeverCalled:
    def filter(self, pod: dict[str, Any], candidates: list[str]) -> Any:
        raise AssertionError("a replica that is not the leader must not plan")

    def prioritize(self, pod: dict[str, Any], candidates: list[str]) -> Any:
        raise AssertionError("a replica that is not the leader must not score")

    async def bind(self, **_: str) -> str:
        raise AssertionError("a replica that is not the leader must not bind")


async def deposed_client() -> httpx.AsyncClient:
    clock = Clock(100.0)
    api = FakeLeaseApi(clock)
    leader = elector(api, clock)
    await leader.round()  # it led once...
    clock.now += LEASE  # ...and its lease ran out (another replica renews it now)
    failover = Failover(make_core(), leader, Metrics(), flush_effects=lambda: None)
    app = create_extender_app(
        port=NeverCalled(), metrics=Metrics(), max_request_bytes=1 << 20, acting=failover.acting
    )
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://extender")


async def test_a_deposed_leader_holds_every_node_in_filter_saying_not_the_leader() -> None:
    pod = make_pod("w0").group("job").gpus(1).obj()
    async with await deposed_client() as client:
        names = await client.post("/filter", json={"Pod": pod, "NodeNames": ["n1", "n2"]})
        nodes = await client.post(
            "/filter", json={"Pod": pod, "Nodes": {"items": [make_node("n1").obj()]}}
        )
    assert names.status_code == nodes.status_code == 200
    body = names.json()
    assert body["NodeNames"] == [] and body["FailedNodes"] == {}
    assert body["FailedAndUnresolvableNodes"] == {"n1": NOT_THE_LEADER, "n2": NOT_THE_LEADER}
    assert nodes.json()["Nodes"] == {"items": []}
    assert "not the leader" in NOT_THE_LEADER


async def test_a_deposed_leader_answers_bind_with_an_error_and_prioritize_with_no_scores() -> None:
    args = {"PodName": "w0", "PodNamespace": "default", "PodUID": "u0", "Node": "n1"}
    pod = make_pod("w0").gpus(1).obj()
    async with await deposed_client() as client:
        bind = await client.post("/bind", json=args)
        scores = await client.post("/prioritize", json={"Pod": pod, "NodeNames": ["n1"]})
    assert bind.status_code == 200 and bind.json()["Error"] == NOT_THE_LEADER
    assert scores.status_code == 200 and scores.json() == []


async def test_a_binding_is_refused_when_the_lease_was_lost_while_it_waited() -> None:
    posted: list[str] = []

    class Binder:
        async def bind(self, *, namespace: str, name: str, uid: str, node: str) -> None:
            posted.append(name)

    leading = [True]
    metrics = Metrics()
    binder = LeaderOnlyBinder(Binder(), lambda: leading[0], metrics)
    await binder.bind(namespace="d", name="a", uid="ua", node="n1")
    leading[0] = False
    try:
        await binder.bind(namespace="d", name="b", uid="ub", node="n1")
    except BindError as err:
        assert "not the leader" in str(err)
    else:
        raise AssertionError("a binding by a replica that lost the lease was posted")
    assert posted == ["a"]


# ---- take-over: recovery before acting, stand-down on loss ----


def planned_core() -> GangCore:
    """Two 4-GPU nodes; gang job (2 x 4 GPU) annotated onto n1, n2 by a previous leader."""
    core = make_core()
    for node in (make_node("n1").gpus(4).obj(), make_node("n2").gpus(4).obj()):
        core.apply_node(NodeInfo.from_api(node))
    core.apply_group_spec(GroupSpec.from_podgroup(make_podgroup("job", 2), source="PodGroup"))
    for i, node in enumerate(("n1", "n2")):
        pod = make_pod(f"w{i}").group("job").gpus(4).annotation(PLANNED_NODE_ANNOTATION, node)
        core.observe_pod(PodInfo.from_api(pod.obj()), T0)
    return core


async def test_a_new_leader_acts_only_after_rebuilding_the_plans_and_then_holds_them() -> None:
    clock = Clock(100.0)
    core = planned_core()
    metrics = Metrics()
    leader = elector(FakeLeaseApi(clock), clock)
    failover = Failover(core, leader, metrics, flush_effects=lambda: None, clock=lambda: T0)
    leader.on_change = failover.on_leadership
    synced = [False]
    failover.synced = lambda: synced[0]
    await leader.round()  # leads, but the cache has not synced: no plans yet
    assert leader.is_leader and not failover.acting()
    assert failover.ready()[0] is False
    synced[0] = True
    failover.step()
    assert failover.acting() and failover.ready() == (True, "ok")
    plan = core.ledger.plans[GroupKey("default", "job")]
    assert sorted(plan.placements.values()) == ["n1", "n2"]
    # A plain pod of the gang scheduler cannot take the reserved GPUs.
    plain = PodInfo.from_api(make_pod("plain").gpus(1).obj())
    decision = core.filter(plain, ["n1", "n2"], T0)
    assert decision.nodes == [] and set(decision.failed) == {"n1", "n2"}


async def test_losing_the_lease_drops_the_plans_and_skips_their_writes() -> None:
    clock = Clock(100.0)
    core = planned_core()
    flushed: list[Any] = []
    leader = elector(FakeLeaseApi(clock), clock)
    failover = Failover(
        core,
        leader,
        Metrics(),
        flush_effects=lambda: flushed.extend(core.drain_effects()),
        clock=lambda: T0,
    )
    leader.on_change = failover.on_leadership
    failover.synced = lambda: True
    await leader.round()
    assert core.ledger.plans
    clock.now += LEASE
    failover.step()  # notices the lapse between renew rounds
    assert not failover.acting() and not core.ledger.plans
    assert [type(e) for e in flushed] == [PlanDropped]


def test_without_leader_election_the_single_replica_always_acts() -> None:
    failover = Failover(planned_core(), None, Metrics(), flush_effects=lambda: None)
    assert failover.acting()
    assert failover.ready()[0] is False  # Ready waits for the plans to be rebuilt
    failover.synced = lambda: True
    failover.step()
    assert failover.ready() == (True, "ok")


async def test_the_effect_writer_skips_writes_once_not_the_leader() -> None:
    calls: list[str] = []

    class Raw:
        def call(self, method: str, path: str, **_: Any) -> dict[str, Any]:
            calls.append(method)
            return {}

    core = planned_core()
    metrics = Metrics()
    leading = [False]
    queues = GroupQueues(4)
    writer = EffectWriter(
        Settings.model_construct(),
        raw=Raw(),  # type: ignore[arg-type]
        metrics=metrics,
        core=core,
        state=ClusterState(core, flush_effects=lambda: None),
        queues=queues,
        acting=lambda: leading[0],
    )
    core.recover(T0)
    core.stand_down(T0)
    writer.queue_effects(core.drain_effects())
    await queues.join()
    assert calls == [], "a replica that is not the leader cleared annotations"
    skipped = metrics.registry.get_sample_value("gang_extender_not_leader_total", {"what": "write"})
    assert skipped == 2


# ---- a recovery that raises: the loops that retry it outlive it ----


class RecoveryFailsOnce:
    """core.recover raising its first time (a bug, or state it cannot read yet)."""

    def __init__(self, core: Any) -> None:
        self.core = core
        self.calls = 0
        self.original = core.recover
        core.recover = self

    def __call__(self, now: float) -> Any:
        self.calls += 1
        if self.calls == 1:
            raise RuntimeError("annotation unreadable")
        return self.original(now)


async def _rounds_until(done: Any, limit: int = 500) -> None:
    for _ in range(limit):
        if done():
            return
        await asyncio.sleep(0.005)


async def test_a_recovery_that_raises_does_not_end_the_election() -> None:
    # It ran inside the elector's on_change: raising there ended the election task,
    # so the replica stopped renewing and never said why.
    clock = Clock(100.0)
    api = FakeLeaseApi(clock)
    puts: list[str] = []
    call = api.call

    def counting(method: str, path: str, body: Any = None, **kw: Any) -> dict[str, Any]:
        if method in ("PUT", "POST"):
            puts.append(method)
        return call(method, path, body, **kw)

    api.call = counting  # type: ignore[method-assign]
    core = planned_core()
    failing = RecoveryFailsOnce(core)
    leader = LeaderElector(
        api,  # type: ignore[arg-type]
        namespace="gang-system",
        name="gang-extender-service",
        lease_seconds=LEASE,
        renew_seconds=0.01,
        metrics=Metrics(),
        identity="me",
        clock=clock,
    )
    failover = Failover(core, leader, Metrics(), flush_effects=lambda: None, clock=lambda: T0)
    failover.synced = lambda: True
    leader.on_change = failover.on_leadership
    leader.start(asyncio.get_running_loop())
    try:
        await _rounds_until(lambda: len(puts) >= 3)
    finally:
        leader.stop()
    assert failing.calls == 1
    assert len(puts) >= 3, f"the election stopped after the recovery raised: {puts}"
    assert failover.ready() == (
        False,
        "recovering planned gangs failed (retrying): RuntimeError: annotation unreadable",
    )


async def test_the_failover_loop_retries_a_recovery_that_raised_until_it_is_ready() -> None:
    clock = Clock(100.0)
    core = planned_core()
    failing = RecoveryFailsOnce(core)
    leader = elector(FakeLeaseApi(clock), clock)
    failover = Failover(core, leader, Metrics(), flush_effects=lambda: None, clock=lambda: T0)
    failover.synced = lambda: True
    await leader.round()  # leads; on_change is not wired: the loop is what recovers
    task = asyncio.create_task(failover.run(0.001))
    try:
        await _rounds_until(lambda: failover.ready()[0])
    finally:
        task.cancel()
    assert failing.calls == 2
    assert failover.ready() == (True, "ok") and failover.acting()
    assert sorted(core.ledger.plans[GroupKey("default", "job")].placements.values()) == [
        "n1",
        "n2",
    ]


class RecordingLeaseApi(FakeLeaseApi):
    """Records each call's timeout."""

    def __init__(self, clock: Clock) -> None:
        super().__init__(clock)
        self.timeouts: list[float | None] = []

    def call(self, method: str, path: str, body: Any = None, **kw: Any) -> dict[str, Any]:
        self.timeouts.append(kw.get("timeout"))
        return super().call(method, path, body)


async def test_a_renew_does_not_queue_behind_the_default_executor() -> None:
    # Six threads on two cores, shared with the API writes and webhook reads: with
    # them all busy, a renew queued there and the term could lapse meanwhile.
    clock = Clock(100.0)
    leader = elector(FakeLeaseApi(clock), clock)
    release = threading.Event()
    loop = asyncio.get_running_loop()
    busy = [loop.run_in_executor(None, release.wait, 30) for _ in range(64)]
    try:
        await asyncio.wait_for(leader.round(), timeout=10)
    finally:
        release.set()
        await asyncio.gather(*busy)
        leader.stop()
    assert leader.is_leader


async def test_lease_calls_give_up_after_the_renew_deadline() -> None:
    # Validity counts from before the call: one answered after lease - renew seconds
    # could not keep the term, so it is not waited for longer (client-go's renewDeadline).
    clock = Clock(100.0)
    api = RecordingLeaseApi(clock)
    leader = elector(api, clock)
    await leader.round()
    await leader.round()
    leader.stop()
    assert api.timeouts == [LEASE - LEASE / 3] * 4  # GET 404, POST; GET, PUT
