"""The bind barrier and DRA claims, over any interleaving (hypothesis; docs/dra.md).

The model: gangs whose members ask devices through a ResourceClaimTemplate (1
device each, or `firstAvailable` 2-else-1). kube-scheduler filters a member
(through the service's cluster state and core), allocates its claim on the planned
node from the devices no claim holds (its allocator sees claims, not our plans;
Reserve fails when they are gone), then calls bind, where the member waits in the
barrier. Barriers time out, binds fail (Unreserve: the member leaves the claim's
reservedFor, the allocation stays), unbound members are deleted (their claims with
them), time passes, and the stock scheduler binds plain pods whose own claims take
free devices on any node, planned or not.

Properties:
 * at every step, the core never counts more devices free on a node than no claim
   holds, less the fewest that members planned there whose claim is not allocated
   yet will take (the stock scheduler's claims are seen, a device is never
   promised twice);
 * a member is bound only with its claim allocated on its node;
 * once the stock scheduler's pods finish and kube-scheduler has retried every
   pending member, each gang is whole, empty or reported broken (GangBroken);
   no plan is left, and every node's free devices are exactly those no claim
   holds: nothing stays counted for a gang that did not bind. The only devices
   left allocated to a gang with no member bound are the left-over claims of its
   live members (documented), and those members need no other device.
"""

from __future__ import annotations

import copy
from typing import Any
from unittest import mock

from hypothesis import example, given, settings
from hypothesis import strategies as st

from extender.controller import cluster_state
from extender.domain.devices.objects import class_resource
from extender.domain.objects.membership import GroupKey
from extender.domain.planning.node_fit import node_accepts
from extender.domain.state.decisions import BindVerdict, GangBroken, Verdict
from tests.builders import make_cluster_state, make_pod
from tests.unit.test_dra_choices import first_available
from tests.unit.test_dra_claims import exactly, member_with_claims, template_obj
from tests.unit.test_dra_devices import DRIVER, class_obj, dra_node, slice_obj

GPU_CLASS = class_resource("gpu")
T0 = 1_000_000.0
SETTLE_ROUNDS = 10
TEMPLATES = {"one": (1,), "first": (2, 1)}  # devices per subrequest, in order

events = st.lists(
    st.one_of(
        st.tuples(st.just("arrive"), st.integers(0, 1), st.integers(0, 2)),
        st.tuples(st.just("bind_ok"), st.integers(0, 5), st.just(0)),
        st.tuples(st.just("bind_fail"), st.integers(0, 5), st.just(0)),
        st.tuples(st.just("delete"), st.integers(0, 1), st.integers(0, 2)),
        st.tuples(st.just("intrude"), st.integers(0, 2), st.just(0)),
        st.tuples(st.just("barrier_timeout"), st.integers(0, 1), st.just(0)),
        st.tuples(st.just("tick"), st.integers(1, 40), st.just(0)),
    ),
    max_size=30,
)


class DraWorld:
    def __init__(self, node_devices: list[int], gangs: list[tuple[int, str]]) -> None:
        self.now = T0
        self.state = make_cluster_state()
        self.core = self.state.core
        self.devices = {
            f"n{i}": [f"s{i}-{k}" for k in range(n)] for i, n in enumerate(node_devices)
        }
        self.state.on_page("nodes", [dra_node(n) for n in self.devices], True, True)
        self.state.on_page(
            "deviceclasses",
            [class_obj("gpu", f'device.driver == "{DRIVER}"', extended=None)],
            True,
            True,
        )
        self.state.on_page(
            "resourceslices",
            [slice_obj(f"s{i}", f"n{i}", n) for i, n in enumerate(node_devices)],
            True,
            True,
        )
        self.state.on_page(
            "resourceclaimtemplates",
            [
                template_obj("one", exactly("gpu")),
                template_obj("first", first_available(("gpu", 2), ("gpu", 1))),
            ],
            True,
            True,
        )
        self.kind: dict[str, str] = {}  # member uid -> its template
        self.members: list[list[str]] = []
        self.pods: dict[str, dict[str, Any]] = {}
        for g, (size, kind) in enumerate(gangs):
            uids = []
            for m in range(size):
                uid = f"g{g}-{m}"
                pod = member_with_claims(
                    uid, {"name": "gpu", "resourceClaimTemplateName": kind}, group=f"g{g}"
                )
                pod["metadata"]["annotations"]["gang-extender.io/min-available"] = str(size)
                self.pods[uid] = pod
                self.kind[uid] = kind
                self.state.on_event("pods", "ADDED", pod)
                uids.append(uid)
            self.members.append(uids)
        self.claims: dict[str, dict[str, Any]] = {}  # owner uid -> its claim
        self.waiting: dict[str, tuple[int, GroupKey]] = {}
        self.in_flight: dict[str, str] = {}
        self.intruders: list[str] = []
        self.broken: set[GroupKey] = set()

    # ---- the devices, as the API server has them ----
    def allocated(self, node: str) -> set[str]:
        return {
            r["device"]
            for c in self.claims.values()
            for r in c["status"].get("allocation", {}).get("devices", {}).get("results", [])
            if r["pool"] == node
        }

    def real_free(self, node: str) -> list[str]:
        taken = self.allocated(node)
        return [d for d in self.devices[node] if d not in taken]

    def claim_node(self, uid: str) -> str | None:
        claim = self.claims.get(uid)
        results = (
            (claim or {}).get("status", {}).get("allocation", {}).get("devices", {}).get("results")
        )
        return results[0]["pool"] if results else None

    def put_claim(self, uid: str, node: str, devices: list[str], *, reserved: bool) -> None:
        claim = self.claims.get(uid)
        event = "MODIFIED" if claim is not None else "ADDED"
        if claim is None:
            claim = {
                "metadata": {
                    "name": f"{uid}-gpu",
                    "namespace": "default",
                    "ownerReferences": [
                        {"kind": "Pod", "name": uid, "uid": uid, "controller": True}
                    ],
                    "annotations": (
                        {"resource.kubernetes.io/pod-claim-name": "gpu"} if uid in self.kind else {}
                    ),
                },
                "status": {
                    "allocation": {
                        "devices": {
                            "results": [
                                {"driver": DRIVER, "pool": node, "device": d, "request": "r"}
                                for d in devices
                            ]
                        }
                    }
                },
            }
            self.claims[uid] = claim
        if reserved:
            claim["status"]["reservedFor"] = [{"resource": "pods", "name": uid, "uid": uid}]
        else:
            claim["status"].pop("reservedFor", None)
        self.state.on_event("resourceclaims", event, copy.deepcopy(claim))

    # ---- kube-scheduler ----
    def pending(self, g: int, m: int) -> str | None:
        if m >= len(self.members[g]):
            return None
        uid = self.members[g][m]
        pod = self.core.snapshot.pods.get(uid)
        if pod is None or pod.is_bound or uid in self.in_flight or uid in self.waiting:
            return None
        return uid

    def reserve_claim(self, uid: str, node: str) -> bool:
        """PreBind: allocate the member's claim on `node` (or keep its allocation)."""
        if uid in self.claims:
            if self.claim_node(uid) != node:
                return False
            self.put_claim(uid, node, [], reserved=True)
            return True
        free = self.real_free(node)
        for count in TEMPLATES[self.kind[uid]]:
            if count <= len(free):
                self.put_claim(uid, node, free[:count], reserved=True)
                return True
        return False

    def unreserve(self, uid: str) -> None:
        if uid in self.claims and self.claim_node(uid) is not None:
            self.put_claim(uid, self.claim_node(uid) or "", [], reserved=False)

    def arrive(self, g: int, m: int) -> None:
        uid = self.pending(g, m)
        if uid is None:
            return
        held = self.claim_node(uid)  # an allocated claim pins the pod to its node
        candidates = [held] if held else sorted(self.devices)
        decision = self.core.filter(self.core.snapshot.pods[uid], candidates, self.now)
        if decision.verdict is not Verdict.PLANNED or not decision.nodes:
            return
        node = decision.nodes[0]
        if not self.reserve_claim(uid, node):
            return  # the devices are gone: kube-scheduler retries later
        answer = self.core.arrive(uid, node, self.now)
        if answer.verdict is BindVerdict.WAIT:
            assert answer.plan_id is not None and answer.group is not None
            self.waiting[uid] = (answer.plan_id, answer.group)
        elif answer.verdict is BindVerdict.RELEASE:
            self.in_flight[uid] = node
        else:
            self.unreserve(uid)
        self.wake()

    def wake(self) -> None:
        for uid, (plan_id, group) in list(self.waiting.items()):
            verdict = self.core.barrier_state(plan_id, group)
            if verdict is BindVerdict.WAIT:
                continue
            del self.waiting[uid]
            plan = self.core.ledger.plan_of(uid)
            if verdict is BindVerdict.RELEASE and plan is not None:
                self.in_flight[uid] = plan.placements[uid]
            else:
                self.unreserve(uid)

    def bind_ok(self, k: int) -> None:
        if not self.in_flight:
            return
        uid = sorted(self.in_flight)[k % len(self.in_flight)]
        node = self.in_flight.pop(uid)
        assert self.claim_node(uid) == node, f"{uid} bound to {node} without its devices there"
        self.core.binding_succeeded(uid, node, self.now)
        pod = self.pods[uid]
        pod["spec"]["nodeName"] = node
        pod["status"]["phase"] = "Running"
        self.state.on_event("pods", "MODIFIED", copy.deepcopy(pod))

    def bind_fail(self, k: int) -> None:
        if not self.in_flight:
            return
        uid = sorted(self.in_flight)[k % len(self.in_flight)]
        del self.in_flight[uid]
        self.core.bind_failed(uid, "500", self.now)
        self.unreserve(uid)

    def barrier_timeout(self, g: int) -> None:
        for plan_id, group in set(self.waiting.values()):
            if group.name == f"g{g}":
                self.core.barrier_timed_out(plan_id, group, self.now)
        self.wake()

    # ---- the cluster ----
    def delete(self, g: int, m: int) -> None:
        if m >= len(self.members[g]):
            return
        uid = self.members[g][m]
        pod = self.core.snapshot.pods.get(uid)
        if pod is None or pod.is_bound:
            return
        self.in_flight.pop(uid, None)
        self.waiting.pop(uid, None)
        self.state.on_event("pods", "DELETED", copy.deepcopy(self.pods.pop(uid)))
        claim = self.claims.pop(uid, None)  # the claim goes with its pod
        if claim is not None:
            self.state.on_event("resourceclaims", "DELETED", claim)
        self.wake()

    def intrude(self, n: int) -> None:
        """The stock scheduler: a plain pod whose own claim takes a device no claim holds."""
        node = f"n{n}"
        if node not in self.devices or not self.real_free(node):
            return
        uid = f"intruder-{len(self.intruders)}"
        pod = make_pod(uid).scheduler("default-scheduler").node(node).obj()
        pod["metadata"]["uid"] = uid
        self.state.on_event("pods", "ADDED", pod)
        self.put_claim(uid, node, self.real_free(node)[:1], reserved=True)
        self.intruders.append(uid)

    def tick(self, seconds: int) -> None:
        self.now += seconds
        self.core.expire(self.now)
        self.wake()

    # ---- what must hold ----
    def unallocated_reservations(self, node: str) -> int:
        """The fewest devices members planned on `node` whose claim is not allocated yet
        will take there (kube-scheduler's allocator may pick another subrequest of a
        `firstAvailable` than the plan did, by the order members arrive: the fewest)."""
        total = 0
        for plan in self.core.ledger.plans.values():
            for uid, planned in plan.placements.items():
                pod = self.core.snapshot.pods.get(uid)
                if (
                    planned == node
                    and pod is not None
                    and not pod.is_bound
                    and uid not in self.claims
                ):
                    total += min(TEMPLATES[self.kind[uid]])
        return total

    def check(self) -> None:
        for effect in self.core.drain_effects():
            if isinstance(effect, GangBroken):
                self.broken.add(effect.plan.group)
        for node in self.devices:
            counted = self.core.free_after_reservations(node).get(GPU_CLASS, 0)
            truth = len(self.real_free(node)) - self.unallocated_reservations(node)
            assert counted <= truth, f"{node}: {counted} counted free, {truth} really free"

    def bound(self, g: int) -> int:
        pods = (self.core.snapshot.pods.get(uid) for uid in self.members[g])
        return sum(1 for p in pods if p is not None and p.is_bound)

    def settle(self) -> None:
        for uid in self.intruders:
            self.state.on_event("resourceclaims", "DELETED", self.claims.pop(uid))
            pod = make_pod(uid).scheduler("default-scheduler").obj()
            pod["metadata"]["uid"] = uid
            self.state.on_event("pods", "DELETED", pod)
        self.intruders.clear()
        while self.in_flight:
            self.bind_ok(0)
        for _ in range(SETTLE_ROUNDS):
            self.tick(31)
            for g in range(len(self.members)):
                for m in range(len(self.members[g])):
                    self.arrive(g, m)
            while self.in_flight:
                self.bind_ok(0)
                self.check()
            self.check()
        for plan_id, group in set(self.waiting.values()):  # the barriers left time out
            self.core.barrier_timed_out(plan_id, group, self.now)
        self.wake()
        self.tick(3600)
        self.check()


@given(
    node_devices=st.lists(st.integers(0, 4), min_size=1, max_size=3),
    gangs=st.lists(
        st.tuples(st.integers(1, 3), st.sampled_from(sorted(TEMPLATES))), min_size=1, max_size=2
    ),
    script=events,
)
# The stock scheduler's claim takes a device of a planned node while the gang waits.
@example(
    node_devices=[2],
    gangs=[(2, "one")],
    script=[("arrive", 0, 0), ("intrude", 0, 0), ("arrive", 0, 1), ("bind_ok", 0, 0)],
)
# A barrier times out with one member's claim allocated.
@example(
    node_devices=[2],
    gangs=[(2, "one")],
    script=[("arrive", 0, 0), ("barrier_timeout", 0, 0), ("tick", 40, 0)],
)
# A plan expires with one member's claim left allocated on n1: the re-plan must keep
# that member on n1 (its devices are there), not move it to n0 needing nothing.
@example(
    node_devices=[3, 3],
    gangs=[(1, "first"), (3, "first")],
    script=[("arrive", 1, 2), ("tick", 10, 0)],
)
@settings(max_examples=300, deadline=None)
def test_no_device_stays_counted_for_a_gang_that_did_not_bind_and_no_partial_gang(
    node_devices: list[int], gangs: list[tuple[int, str]], script: list[tuple[str, int, int]]
) -> None:
    world = DraWorld(node_devices, gangs)
    with mock.patch.object(cluster_state.time, "time", lambda: world.now):
        for op, a, b in script:
            if op == "arrive":
                world.arrive(a % len(gangs), b)
            elif op == "bind_ok":
                world.bind_ok(a)
            elif op == "bind_fail":
                world.bind_fail(a)
            elif op == "delete":
                world.delete(a % len(gangs), b)
            elif op == "intrude":
                world.intrude(a)
            elif op == "barrier_timeout":
                world.barrier_timeout(a % len(gangs))
            else:
                world.tick(a)
            world.check()
        world.settle()
    for g, (size, _) in enumerate(gangs):
        bound = world.bound(g)
        key = GroupKey("default", f"g{g}")
        assert bound == 0 or bound >= size or key in world.broken, f"g{g}: {bound}/{size} bound"
    assert not world.core.ledger.plans, world.core.ledger.plans
    for node in world.devices:
        counted = world.core.free_after_reservations(node).get(GPU_CLASS, 0)
        assert counted == len(world.real_free(node)), (node, counted, world.real_free(node))
    for g in range(len(gangs)):
        if world.bound(g) == 0:
            for uid in world.members[g]:
                pod = world.core.snapshot.pods.get(uid)
                if uid in world.claims:
                    assert pod is not None, f"{uid} deleted, its claim left allocated"
                    assert pod.requests.get(GPU_CLASS, 0) == 0, f"{uid} asks again what it holds"


def test_a_member_whose_claim_was_left_allocated_may_be_planned_on_that_node_only() -> None:
    world = DraWorld([3, 3], [(1, "first"), (3, "first")])
    with mock.patch.object(cluster_state.time, "time", lambda: world.now):
        world.arrive(1, 2)
        assert world.claim_node("g1-2") == "n1"
        world.barrier_timeout(1)  # the barrier gives up on the plan; the claim stays allocated
    pod = world.core.snapshot.pods["g1-2"]
    assert pod.claims_pin == "n1"
    nodes = world.core.snapshot.nodes
    assert not node_accepts(nodes["n0"], pod)
    assert node_accepts(nodes["n1"], pod)
    # another member of the gang, with no claim yet, is tied to no node
    other = world.core.snapshot.pods["g1-0"]
    assert other.claims_pin is None and node_accepts(nodes["n0"], other)
