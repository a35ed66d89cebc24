"""HA: two leader-elected service replicas; SIGKILL the leader while gangs stream in.

As in deploy/service: two `gang-extender serve --leader-elect` replicas, only the
leader Ready, and the gang kube-scheduler (extender) and the API server (webhook)
reaching them through a Service. Here the Service is `ReadyProxy`, a loopback TCP
proxy that sends each new connection to whichever replica answers /readyz 200.
Each replica has its own TLS directory, like pods with an emptyDir: they trust
each other's certs only because they share one CA through the API.

The run gets its own control plane: the session's gang scheduler holds the
scheduler lease and the session's service acts on every group, so neither may
run beside this stack.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from extender.devcluster.cluster import LocalCluster, free_port, new_namespace
from extender.devcluster.nodes import add_gpu_nodes, wait_for_nodes_ready
from extender.devcluster.stack import GangStack, ServiceReplica
from extender.domain.objects.membership import INJECT_NAMESPACE_LABEL
from extender.kube.rawapi import KubeError, RawApi, path_of
from tests.e2e.gang_fixtures import (
    bound,
    create,
    gang_pod,
    get_podgroup,
    list_pods,
    podgroup,
    ungate,
    unschedulable_message,
    wait_until,
)
from tests.e2e.test_bind_integrity import PROBE_POD, BindingFaults

GANGS = 10
MEMBERS = 3
GANG_INTERVAL_SECONDS = 0.5  # 10 gangs over ~5 s
KILL_AFTER_GANGS = 4  # the leader dies while the rest of the stream is still coming
NODES, GPUS_PER_NODE = 8, 4  # 32 GPUs for 30 one-GPU members
# Short lease so a hand-over takes seconds (deploy/ uses the defaults, 15 s / 5 s).
LEASE_ENV = {"GANG_LEASE_DURATION_SECONDS": "6", "GANG_LEASE_RENEW_SECONDS": "2"}
# The binder's retries of a refused binding: 0.5, 1, 2, 4 s apart within 12 s, so a
# replica deposed a few seconds in still has attempts left to (not) make.
BIND_RETRY_ENV = {"GANG_BINDING_RETRY_BACKOFF_SECONDS": "0.5", "GANG_BINDING_TIMEOUT_SECONDS": "12"}
RETRY_POOL = {"e2e.gang-extender.io/pool": "bind-retry"}
HANDOVER_BOUND_SECONDS = 60  # bounds a hang; the measured time is printed, not asserted
SETTLE_SECONDS = 180
PROBE_INTERVAL_SECONDS = 0.2
# A create refused while no replica is Ready (the webhook is down) is retried, as a
# Job or ReplicaSet controller would.
CREATE_RETRY_SECONDS = 90


class ReadyProxy:
    """Loopback stand-in for Service gang-extender: new connections go to the Ready replica.

    Two listeners, like the Service's two ports: extender and webhook. A poller asks
    every replica's /readyz; a connection accepted while none is Ready is closed at
    once (a Service without endpoints). Open connections are spliced byte for byte,
    so TLS is end to end between the client and the replica.
    """

    def __init__(self, replicas: list[ServiceReplica]) -> None:
        self.replicas = replicas
        self.extender_port = free_port()
        self.webhook_port = free_port()
        self.ready: ServiceReplica | None = None
        self.connections: dict[str, int] = {}
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._listeners: list[socket.socket] = []

    def start(self) -> None:
        self._spawn(self._poll_readiness)
        for port, backend_port in (
            (self.extender_port, lambda r: r.extender_port),
            (self.webhook_port, lambda r: r.webhook_port),
        ):
            listener = socket.create_server(("127.0.0.1", port))
            listener.settimeout(0.5)
            self._listeners.append(listener)
            self._spawn(self._accept_loop, listener, backend_port)

    def stop(self) -> None:
        self._stop.set()
        for listener in self._listeners:
            listener.close()
        for thread in self._threads:
            thread.join(5)

    def _spawn(self, target: Callable[..., None], *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _poll_readiness(self) -> None:
        while not self._stop.is_set():
            ready = [
                r
                for r in self.replicas
                if r.process is not None and r.process.alive() and r.readyz(1)[0] == 200
            ]
            self.ready = ready[0] if len(ready) == 1 else None
            self._stop.wait(PROBE_INTERVAL_SECONDS)

    def _accept_loop(
        self, listener: socket.socket, backend_port: Callable[[ServiceReplica], int]
    ) -> None:
        while not self._stop.is_set():
            try:
                client, _ = listener.accept()
            except (TimeoutError, OSError):
                continue
            target = self.ready
            if target is None:
                client.close()
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", backend_port(target)), timeout=2)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            client.settimeout(None)
            self.connections[target.name] = self.connections.get(target.name, 0) + 1
            self._spawn(self._pump, client, upstream)
            self._spawn(self._pump, upstream, client)

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while chunk := source.recv(65536):
                sink.sendall(chunk)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()


@pytest.fixture(scope="module")
def ha_cluster(bin_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    local = LocalCluster(tmp_path_factory.mktemp("ha-cluster"), bin_dir)
    local.start()
    try:
        yield local
    finally:
        local.stop()


@pytest.fixture
def ha_stack(ha_cluster: LocalCluster) -> Iterator[tuple[GangStack, ReadyProxy]]:
    stack = GangStack(ha_cluster, env={**LEASE_ENV, **BIND_RETRY_ENV})
    proxy = ReadyProxy(stack.replicas)  # the same list start_replicated fills
    proxy.start()
    try:
        stack.start_replicated(
            2, extender_port=proxy.extender_port, webhook_port=proxy.webhook_port
        )
        yield stack, proxy
    except BaseException:
        print(ha_cluster.tail_logs(60))
        raise
    finally:
        proxy.stop()
        stack.stop()


def _wait_taken_over(standby: ServiceReplica) -> None:
    """Until the standby answers /readyz 200; on timeout the failure says what it last
    answered and whether its process still runs (a bare False said neither)."""
    last: tuple[int, str] = (0, "not asked yet")

    def ready() -> bool:
        nonlocal last
        last = standby.readyz()
        return last[0] == 200

    try:
        wait_until(ready, timeout=HANDOVER_BOUND_SECONDS, what="the standby to take over")
    except pytest.fail.Exception as err:
        process = standby.process
        if process is None:
            state = "no process"
        elif process.alive():
            state = "alive; its asyncio tasks are in its log"
            os.kill(process.pid, signal.SIGUSR2)  # the service logs every task and its line
            time.sleep(1)
        else:
            state = f"exited {process.returncode}"
        pytest.fail(f"{err}; {standby.name} ({state}) last answered /readyz {last}")


def _create_retrying(raw: RawApi, namespace: str, obj: dict[str, Any]) -> None:
    deadline = time.monotonic() + CREATE_RETRY_SECONDS
    while True:
        try:
            create(raw, namespace, obj)
            return
        except KubeError as err:
            if err.status == 409:  # an earlier attempt did create it; its answer was lost
                return
            # 500 "failed calling webhook": no Ready replica behind the proxy right now.
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def test_killing_the_leader_mid_stream_leaves_every_gang_fully_bound(ha_cluster, ha_stack) -> None:
    stack, proxy = ha_stack
    api = ha_cluster.api_client()
    raw = RawApi(api)
    names = add_gpu_nodes(api, NODES, gpus=GPUS_PER_NODE)
    wait_for_nodes_ready(api, names)
    namespace = new_namespace(api, "ha", labels={INJECT_NAMESPACE_LABEL: "enabled"})

    first_leader = stack.leader()
    assert first_leader is not None
    standby = next(r for r in stack.replicas if r is not first_leader)
    ca = {r.name: (r.tls_dir / "ca.crt").read_bytes() for r in stack.replicas}
    assert ca[first_leader.name] == ca[standby.name] == stack.published_ca(), (
        "replicas with separate TLS dirs must serve under the one shared CA"
    )

    gangs = [f"g{i}" for i in range(GANGS)]
    handover: dict[str, float] = {}

    def stream() -> None:
        for i, group in enumerate(gangs):
            if i == KILL_AFTER_GANGS:
                handover["killed_at"] = time.monotonic()
                assert first_leader.process is not None
                first_leader.process.kill()  # SIGKILL: no lease release, no goodbye
            _create_retrying(raw, namespace, podgroup(group, MEMBERS))
            for m in range(MEMBERS):
                _create_retrying(raw, namespace, gang_pod(f"{group}-{m}", group, gpus=1))
            time.sleep(GANG_INTERVAL_SECONDS)

    creator = threading.Thread(target=stream, daemon=True)
    creator.start()
    wait_until(lambda: "killed_at" in handover, timeout=60, what="the leader to be killed")
    _wait_taken_over(standby)
    handover["seconds"] = time.monotonic() - handover["killed_at"]
    print(
        f"\nhand-over: leader {first_leader.name} SIGKILLed -> {standby.name} Ready in "
        f"{handover['seconds']:.2f}s (lease {LEASE_ENV['GANG_LEASE_DURATION_SECONDS']}s, "
        f"renew {LEASE_ENV['GANG_LEASE_RENEW_SECONDS']}s)"
    )
    creator.join(CREATE_RETRY_SECONDS + 30)
    assert not creator.is_alive(), "creating the gangs did not finish"

    def all_bound() -> list[dict[str, Any]] | None:
        pods = list_pods(raw, namespace)
        return (
            pods if len(pods) == GANGS * MEMBERS and len(bound(pods)) == GANGS * MEMBERS else None
        )

    try:
        pods = wait_until(
            all_bound, timeout=SETTLE_SECONDS, what=f"all {GANGS * MEMBERS} members bound"
        )
    except BaseException:
        pods = list_pods(raw, namespace)
        per_group = {
            g: len(bound([p for p in pods if p["metadata"]["name"].startswith(f"{g}-")]))
            for g in gangs
        }
        print(f"bound per gang: {per_group}")
        raise

    by_group: dict[str, list[str]] = {g: [] for g in gangs}
    gpus_per_node: dict[str, int] = {}
    for pod in pods:
        by_group[pod["metadata"]["labels"]["gang-extender.io/group"]].append(
            pod["spec"]["nodeName"]
        )
        node = pod["spec"]["nodeName"]
        gpus_per_node[node] = gpus_per_node.get(node, 0) + 1
    partial = {g: len(nodes) for g, nodes in by_group.items() if len(nodes) != MEMBERS}
    assert not partial, f"gangs not fully bound: {partial}"
    assert max(gpus_per_node.values()) <= GPUS_PER_NODE, (
        f"a node is over-committed: {gpus_per_node}"
    )

    # The new leader took over the controller too: status and wiring of every gang.
    for group in gangs:
        wait_until(
            lambda g=group: (
                (get_podgroup(raw, namespace, g) or {}).get("status", {}).get("phase")
                in ("Scheduled", "Running")
            ),
            what=f"PodGroup {group} phase Scheduled/Running",
        )
        hostfile = wait_until(
            lambda g=group: _hostfile(raw, namespace, g),
            what=f"ConfigMap {group}-svc with {MEMBERS} hosts",
        )
        assert len(hostfile.splitlines()) == MEMBERS
    assert proxy.connections.get(standby.name, 0) > 0, "the new leader never received traffic"
    print(f"connections through the proxy: {proxy.connections}")


def _hostfile(raw: RawApi, namespace: str, group: str) -> str | None:
    try:
        cm = raw.call(
            "GET", path_of("api", "v1", "namespaces", namespace, "configmaps", f"{group}-svc")
        )
    except KubeError:
        return None
    text = str((cm.get("data") or {}).get("hostfile", ""))
    return text if len(text.splitlines()) == MEMBERS else None


FAILOVER_POOL = {"gang-extender.io/pool": "failover"}


def _metric(text: str, name: str, labels: str = "") -> float:
    """The value of sample `name{labels}` in Prometheus text (0 when absent)."""
    prefix = f"{name}{{{labels}}} " if labels else f"{name} "
    for line in text.splitlines():
        if line.startswith(prefix):
            return float(line.split()[-1])
    return 0.0


def _latest_scheduling_failure(raw: RawApi, namespace: str, name: str) -> str:
    """Why kube-scheduler last failed to place the pod: its PodScheduled=False message.

    Not the FailedScheduling Events: kube-scheduler's recorder counts a repeat into the
    first Event of the series (its key leaves the message out), so an early failure
    with another reason (the proxy still pointing at no replica) would hide the rest.
    """
    pods = [p for p in list_pods(raw, namespace) if p["metadata"]["name"] == name]
    return unschedulable_message(pods[0] if pods else None)


def test_a_gang_planned_before_the_leader_is_killed_keeps_its_reservation_and_binds_whole(
    ha_cluster, ha_stack
) -> None:
    """SIGKILL the leader after it planned a gang and before the gang could bind.

    One member is gated, so the other waits in the leader's bind barrier when the
    leader dies. The standby, once Ready, holds the same reservations (rebuilt from
    the planned-node annotations before it reported Ready): a plain pod of the gang
    scheduler is refused the reserved GPUs; once the gated member is released, the
    gang binds whole, on the nodes planned before the crash.
    """
    stack, _proxy = ha_stack
    api = ha_cluster.api_client()
    raw = RawApi(api)
    nodes = add_gpu_nodes(
        api, 2, gpus=GPUS_PER_NODE, labels=FAILOVER_POOL, name_prefix="failover-node"
    )
    wait_for_nodes_ready(api, nodes)
    namespace = new_namespace(api, "failover", labels={INJECT_NAMESPACE_LABEL: "enabled"})

    first_leader = stack.leader()
    assert first_leader is not None
    standby = next(r for r in stack.replicas if r is not first_leader)

    create(raw, namespace, podgroup("fo", 2))
    create(raw, namespace, gang_pod("fo-0", "fo", gpus=GPUS_PER_NODE, node_selector=FAILOVER_POOL))
    create(
        raw,
        namespace,
        gang_pod("fo-1", "fo", gpus=GPUS_PER_NODE, node_selector=FAILOVER_POOL, gated=True),
    )

    def plan_written() -> dict[str, str] | None:
        pods = list_pods(raw, namespace)
        notes = {
            p["metadata"]["name"]: (p["metadata"].get("annotations") or {}).get(
                "gang-extender.io/planned-node"
            )
            for p in pods
        }
        return notes if len(notes) == 2 and all(notes.values()) else None  # type: ignore[return-value]

    plan = wait_until(plan_written, what="the gang planned and annotated by the leader")
    assert sorted(plan.values()) == sorted(nodes), plan
    assert not bound(list_pods(raw, namespace)), "a member bound before the barrier completed"

    assert first_leader.process is not None
    first_leader.process.kill()  # SIGKILL: no lease release, fo-0's bind dies with it
    _wait_taken_over(standby)
    # Ready means the plan was rebuilt first: both members hold their reservation.
    metrics = standby.metrics_text()
    assert _metric(metrics, "gang_extender_plans_recovered_total", 'outcome="recovered"') >= 1
    assert _metric(metrics, "gang_extender_reservations") == 2, metrics

    # A plain pod of the gang scheduler cannot take the reserved GPUs.
    create(raw, namespace, gang_pod("plain", "", gpus=1, node_selector=FAILOVER_POOL))
    seen: list[str] = []

    def refused_for_the_gang() -> str | None:
        message = _latest_scheduling_failure(raw, namespace, "plain")
        if message and message not in seen:
            seen.append(message)
        return message if "reserved for gang" in message else None

    try:
        refusal = wait_until(
            refused_for_the_gang, what="the plain pod refused the GPUs reserved for gang fo"
        )
    except pytest.fail.Exception:
        print(f"\nthe plain pod's scheduling failures, in order: {seen}")
        raise
    print(f"\nplain pod refused: {refusal}")
    assert not bound([p for p in list_pods(raw, namespace) if p["metadata"]["name"] == "plain"])

    ungate(raw, namespace, "fo-1")

    def gang_bound() -> dict[str, str] | None:
        pods = {p["metadata"]["name"]: p for p in bound(list_pods(raw, namespace))}
        if not {"fo-0", "fo-1"} <= set(pods):
            return None
        return {n: pods[n]["spec"]["nodeName"] for n in ("fo-0", "fo-1")}

    placed = wait_until(gang_bound, what="the gang bound whole by the new leader")
    assert placed == plan, f"bound {placed}, planned before the crash {plan}"
    plain = [p for p in list_pods(raw, namespace) if p["metadata"]["name"] == "plain"]
    assert not bound(plain), "the plain pod took a GPU of the gang"


class TransientBindingFaults(BindingFaults):
    """Every binding of the namespace's gang pods refused with 503 (transient, so the
    binder retries it), each attempt recorded with the time the webhook saw it."""

    def __init__(self, raw: RawApi, namespace: str, tls_dir: Path) -> None:
        super().__init__(raw, namespace, tls_dir)
        self.attempts: list[tuple[str, float]] = []

    def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        name = request.get("name", "")
        if name == PROBE_POD:
            return super().answer(request)
        self.attempts.append((name, time.monotonic()))
        return {
            "uid": request["uid"],
            "allowed": False,
            "status": {"code": 503, "message": f"e2e fault: binding of {name} unavailable"},
        }


def test_a_leader_that_loses_the_lease_while_retrying_a_binding_stops_binding(
    ha_cluster, ha_stack, tmp_path
) -> None:
    """Issue 30, finding 6: ApiBinder retried a failed binding for binding_timeout_seconds
    (10 s) without asking again whether it led, so a deposed leader went on binding a
    gang the new leader owns. Faults are real: a webhook answers every binding 503, and
    the Lease is taken over under the leader, as another replica's would be."""
    stack, _proxy = ha_stack
    api = ha_cluster.api_client()
    raw = RawApi(api)
    nodes = add_gpu_nodes(api, 1, gpus=2, labels=RETRY_POOL, name_prefix="retry-node")
    wait_for_nodes_ready(api, nodes)
    namespace = new_namespace(api, "bind-retry")
    faults = TransientBindingFaults(raw, namespace, tmp_path / "faults-tls")
    lease_path = path_of(
        "apis",
        "coordination.k8s.io",
        "v1",
        "namespaces",
        "gang-system",
        "leases",
        "gang-extender-service",
    )
    try:
        faults.wait_in_force(nodes[0])
        leader = stack.leader()
        assert leader is not None
        create(raw, namespace, podgroup("rt", 2))
        for i in range(2):
            create(raw, namespace, gang_pod(f"rt-{i}", "rt", gpus=1, node_selector=RETRY_POOL))
        wait_until(lambda: faults.attempts, what="the leader's first binding attempt refused")

        lease_path = path_of(
            "apis",
            "coordination.k8s.io",
            "v1",
            "namespaces",
            "gang-system",
            "leases",
            "gang-extender-service",
        )
        lease = raw.call("GET", lease_path)
        lease["spec"].update(
            holderIdentity="e2e-intruder",
            leaseDurationSeconds=600,
            renewTime=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        )
        raw.call("PUT", lease_path, body=lease)
        wait_until(
            lambda: leader.readyz()[0] != 200,
            timeout=HANDOVER_BOUND_SECONDS,
            what="the leader to see it lost the Lease",
        )
        deposed = time.monotonic()
        # Longer than the binder's longest wait between two attempts within its 10 s.
        time.sleep(2 * float(BIND_RETRY_ENV["GANG_BINDING_RETRY_BACKOFF_SECONDS"]) * 8)
        # A POST already on its way when the lease was lost may still arrive (it was
        # sent while leading); nothing may be sent after.
        late = [(name, at - deposed) for name, at in faults.attempts if at > deposed + 1.0]
        assert late == [], f"bindings posted after the leader was deposed: {late}"
        assert _metric(leader.metrics_text(), "gang_extender_not_leader_total", 'what="bind"') >= 1
        assert not bound(list_pods(raw, namespace))
    finally:
        faults.close()
        # The intruder's 600 s term would hold the next test's replicas off: end it.
        with contextlib.suppress(KubeError):
            raw.call("DELETE", lease_path)
