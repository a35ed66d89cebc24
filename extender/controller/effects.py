"""API writes the core asked for, carried out per group in order, retried, counted.

Effects the core emits (PlanCreated, PlanDropped, GangBound) and the Events of a
group are carried out per group, one after another in the order they were
emitted (a clear of the planned-node annotations never overtakes the set it
undoes); different groups run in parallel (`GroupQueues`). Each write goes
through `ApiWrites` (controller/api_writes.py): retried when transient, counted
when it fails for good, skipped by a replica that is not the leader. Gang
preemption's evictions are `Evictions`' (controller/evictions.py).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Hashable, Sequence

from extender.config import Settings
from extender.controller.api_writes import ApiWrites
from extender.controller.cluster_state import ClusterState
from extender.controller.evictions import Evictions
from extender.domain.cluster.fences import FenceNode, UnfenceNode
from extender.domain.gang.core_api import SchedulingCore
from extender.domain.objects.membership import GroupKey
from extender.domain.state.decisions import (
    BarrierReleased,
    Effect,
    EvictVictims,
    GangBound,
    GangBroken,
    GangFaulted,
    LiftAdmissionGate,
    MemberBindFailed,
    PlaceholderCreate,
    PlaceholderDelete,
    PlanCreated,
    PlanDropped,
    PlanEffect,
)
from extender.kube.client import RawApi
from extender.kube.ownership import OwnershipSeal
from extender.kube.reservation_writes import (
    create_placeholder,
    delete_placeholder,
    placeholder_pod,
    set_node_fence,
)
from extender.kube.writers import PODGROUP_API, lift_admission_gate, set_planned_node
from extender.metrics import Metrics

log = logging.getLogger(__name__)


# kind label of gang_extender_api_write_errors_total
WRITE_PLANNED_NODE = "planned-node"
WRITE_ADMISSION_GATE = "admission-gate"
WRITE_PLACEHOLDER = "placeholder"
WRITE_FENCE = "fence"


class GroupQueues:
    """Runs the jobs of one group one after another, in the order submitted.

    Jobs of different groups run concurrently, at most `concurrency` at a time. A
    group's queue (and its task) exists only while it has work. Jobs must handle
    their own errors; one that raises anyway is logged and the next one runs.
    Submit only from the event loop.
    """

    def __init__(self, concurrency: int) -> None:
        self._queues: dict[Hashable, deque[Callable[[], Awaitable[None]]]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._slots = asyncio.Semaphore(concurrency)

    def submit(self, key: Hashable, job: Callable[[], Awaitable[None]]) -> None:
        queue = self._queues.get(key)
        if queue is None:
            queue = self._queues[key] = deque()
            task = asyncio.get_running_loop().create_task(
                self._drain(key, queue), name=f"effects {key}"
            )
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        queue.append(job)

    async def _drain(self, key: Hashable, queue: deque[Callable[[], Awaitable[None]]]) -> None:
        try:
            while queue:
                job = queue.popleft()
                async with self._slots:
                    try:
                        await job()
                    except Exception:
                        log.exception("an API write for %s failed", key)
        finally:
            if self._queues.get(key) is queue:
                del self._queues[key]

    async def join(self) -> None:
        """Until every job submitted so far (and any they submit) is done."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def cancel(self) -> None:
        for task in list(self._tasks):
            task.cancel()


def _split(ref: str) -> tuple[str, str]:
    namespace, _, name = ref.partition("/")
    return namespace, name


class EffectWriter:
    """Carries out the core's effects and the reconciler's Events through `queues`.

    `queue_effects` is the coordinator's effect sink; `queue_event` puts an Event
    on every member of a group after the group's writes queued so far. Reads the
    group's members from `state` and marks a group whose effect it carries out
    as changed there, so the reconciler writes its status.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        raw: RawApi,
        metrics: Metrics,
        core: SchedulingCore,
        state: ClusterState,
        queues: GroupQueues,
        acting: Callable[[], bool] = lambda: True,
        seal: OwnershipSeal | None = None,
    ) -> None:
        self.settings = settings
        self.seal = seal if seal is not None else OwnershipSeal()
        self.acting = acting
        self.raw = raw
        self.metrics = metrics
        self.core = core
        self.state = state
        self.queues = queues
        self.writes = ApiWrites(settings, raw=raw, metrics=metrics, state=state, acting=acting)
        self.evictions = Evictions(self.writes, refused=core.eviction_refused)

    def queue_effects(self, effects: list[Effect]) -> None:
        # A plan's members' gates, lifted together once its victims are gone, are one
        # job that writes them all at once: one after another, each behind the API
        # server's latency, a gang's last member was let out 50 s after its first at
        # 5,000 nodes, past the bind barrier's timeout.
        lifts: list[LiftAdmissionGate] = []

        def submit_lifts() -> None:
            if lifts:
                batch = tuple(lifts)
                lifts.clear()
                self.queues.submit(
                    _lift_queue(batch[0]), functools.partial(self._lift_gates, batch)
                )

        for effect in effects:
            if isinstance(effect, LiftAdmissionGate):
                if lifts and _lift_queue(lifts[0]) != _lift_queue(effect):
                    submit_lifts()
                lifts.append(effect)
                continue
            submit_lifts()
            if isinstance(effect, EvictVictims):
                # Gang preemption (controller/evictions.py), after the group's plan writes.
                self.queues.submit(
                    effect.group, functools.partial(self.evictions.carry_out, effect)
                )
            elif isinstance(effect, PlaceholderCreate | PlaceholderDelete):
                self.queues.submit(effect.group, functools.partial(self._placeholder, effect))
            elif isinstance(effect, FenceNode | UnfenceNode):
                # Per node, in order: a fence and its removal never overtake each other.
                self.queues.submit(("node", effect.node), functools.partial(self._fence, effect))
            elif isinstance(effect, GangFaulted):
                pass  # logged and counted by the coordinator; the group's status says it
            elif not isinstance(effect, BarrierReleased):  # wakes waiters only (coordinator)
                self.queues.submit(effect.plan.group, functools.partial(self._carry_out, effect))
        submit_lifts()

    async def _fence(self, effect: FenceNode | UnfenceNode) -> None:
        """Put a reservation's fence taint on a node, or take it off (domain/cluster/fences.py)."""
        timeout = self.settings.api_write_timeout_seconds
        if isinstance(effect, FenceNode):
            log.info("gang %s: fencing node %s (taint %s)", effect.group, effect.node, effect.value)
            owner: GroupKey | str = effect.group
            value: str | None = effect.value
            what = f"put the reservation taint {effect.value} on node {effect.node}"
        else:
            log.info("taking the reservation taint %s off node %s", effect.value, effect.node)
            owner, value = f"of node {effect.node}", None
            what = f"take the reservation taint {effect.value} off node {effect.node}"
        await self.writes.write(
            WRITE_FENCE,
            owner,
            what,
            lambda: set_node_fence(self.raw, effect.node, value, timeout=timeout),
        )

    async def _placeholder(self, effect: PlaceholderCreate | PlaceholderDelete) -> None:
        """Create or delete a placeholder pod (domain/starvation/placeholders.py)."""
        key, timeout = effect.group, self.settings.api_write_timeout_seconds
        if isinstance(effect, PlaceholderDelete):
            log.info("gang %s: deleting placeholder pod %s", key, effect.name)
            await self.writes.write(
                WRITE_PLACEHOLDER,
                key,
                f"delete placeholder pod {key.namespace}/{effect.name}",
                lambda: delete_placeholder(self.raw, key.namespace, effect.name, timeout=timeout),
            )
            return
        podgroup = self.state.podgroups.get(key)
        uid = ((podgroup or {}).get("metadata") or {}).get("uid")
        owner = (
            {"apiVersion": PODGROUP_API, "kind": "PodGroup", "name": key.name, "uid": uid}
            if uid
            else None
        )
        body = placeholder_pod(
            namespace=key.namespace,
            name=effect.name,
            group=key.name,
            node=effect.node,
            gpus=effect.gpus,
            resource=effect.resource,
            owner=owner,
            seal=self.seal.placeholder(
                namespace=key.namespace, name=effect.name, group=key.name, node=effect.node
            ),
        )
        log.info(
            "gang %s: placeholder pod %s holds %d %s on %s",
            key,
            effect.name,
            effect.gpus,
            effect.resource,
            effect.node,
        )
        await self.writes.write(
            WRITE_PLACEHOLDER,
            key,
            f"create placeholder pod {key.namespace}/{effect.name}",
            lambda: create_placeholder(self.raw, body, timeout=timeout),
        )

    def queue_event(self, key: GroupKey, reason: str, message: str, event_type: str) -> None:
        """An Event on every member, after the group's effects queued so far."""
        self.queues.submit(
            key, lambda: self.writes.event_on_members(key, reason, message, event_type)
        )

    async def _set_planned_nodes(
        self,
        key: GroupKey,
        members: Sequence[tuple[str, str | None]],
        *,
        gated: frozenset[str] = frozenset(),
    ) -> None:
        """Set (node) or clear (None) the planned-node annotation of `members` (ns/name);
        the same write lifts the admission gate of those in `gated`."""
        timeout = self.settings.api_write_timeout_seconds

        def write(ref: str, node: str | None) -> Callable[[], None]:
            lift = ref in gated
            return lambda: set_planned_node(
                self.raw,
                *_split(ref),
                node,
                lift_gate=lift,
                nominate=self.settings.nominate_planned_node,
                timeout=timeout,
            )

        await asyncio.gather(
            *(
                self.writes.write(
                    WRITE_PLANNED_NODE,
                    key,
                    f"{'set' if node else 'clear'} planned node of pod {ref}"
                    + (" and lift its admission gate" if ref in gated else ""),
                    write(ref, node),
                )
                for ref, node in members
            )
        )

    async def _lift_gates(self, batch: Sequence[LiftAdmissionGate]) -> None:
        await asyncio.gather(*(self._lift_gate(effect) for effect in batch))

    async def _lift_gate(self, effect: LiftAdmissionGate) -> None:
        """Ungate a pod the core will not plan behind the gate (domain/queue/gang_admission.py)."""
        log.info("lifting the admission gate of pod %s: %s", effect.pod, effect.reason)
        timeout = self.settings.api_write_timeout_seconds
        await self.writes.write(
            WRITE_ADMISSION_GATE,
            effect.group if effect.group is not None else f"pod {effect.pod}",
            f"lift the admission gate of pod {effect.pod}",
            lambda: lift_admission_gate(self.raw, *_split(effect.pod), timeout=timeout),
        )

    async def _carry_out(self, effect: PlanEffect) -> None:
        plan = effect.plan
        self.state.dirty.add(plan.group)
        if isinstance(effect, PlanCreated):
            log.info("gang %s planned: %s", plan.group, sorted(plan.placements.values()))
            # Only members still waiting: under load this write runs after some were bound,
            # and on a bound pod the annotation neither nudges kube-scheduler nor is read
            # by recovery (domain/failover/recovery.py), so it would be a wasted write.
            waiting = plan.unbound
            pods = self.core.snapshot.pods
            await self._set_planned_nodes(
                plan.group,
                [
                    (plan.names[uid], node)
                    for uid, node in plan.placements.items()
                    if uid in waiting
                ],
                # Gated members enter kube-scheduler's queue with their node written,
                # a preemptor's once its victims are gone (`LiftAdmissionGate` then).
                gated=frozenset()
                if plan.gates_held
                else frozenset(
                    plan.names[uid]
                    for uid in waiting
                    if (pod := pods.get(uid)) is not None and pod.admission_gated
                ),
            )
        elif isinstance(effect, PlanDropped):
            kind = "timeout" if effect.timed_out else "other"
            self.metrics.plans_dropped.labels(reason=kind).inc()
            log.info("gang %s plan dropped: %s", plan.group, effect.reason)
            unbound = [uid for uid in plan.placements if uid not in plan.bound]
            await self._set_planned_nodes(plan.group, [(plan.names[uid], None) for uid in unbound])
            reason = "GangTimeout" if effect.timed_out else "GangWaiting"
            await self.writes.event_on_members(plan.group, reason, effect.reason, "Warning")
        elif isinstance(effect, GangBound):
            self.metrics.gangs_bound.inc()
            members = [self.core.snapshot.pods.get(uid) for uid in plan.placements]
            created = [p.created for p in members if p is not None and p.created]
            start = min(created) if created else None
            if start:
                self.metrics.gang_wait_seconds.observe(max(0.0, time.time() - start))
            log.info("gang %s bound", plan.group)
            placement = ", ".join(
                f"{plan.names[uid].split('/', 1)[1]}->{node}"
                for uid, node in sorted(plan.placements.items(), key=lambda i: plan.names[i[0]])
            )
            # One Event a gang, on its PodGroup: kube-scheduler already writes a
            # `Scheduled` Event on each pod, and one per member cost a write per pod.
            await self.writes.event_on_group(
                plan.group, "GangScheduled", f"gang {plan.group} bound: {placement}", "Normal"
            )
        elif isinstance(effect, MemberBindFailed):
            log.warning("gang %s: binding %s failed: %s", plan.group, effect.member, effect.reason)
            await self.writes.event_on_members(
                plan.group,
                "GangBindFailed",
                f"gang {plan.group}: binding {effect.member} failed ({effect.reason}); it keeps "
                "its reservation and kube-scheduler retries it",
                "Warning",
            )
        elif isinstance(effect, GangBroken):
            if self.state.terminating(plan.group.namespace):
                # The whole gang goes with its namespace: not partial, and the coordinator
                # does not count it either (no Warning, no Event the namespace would refuse).
                log.info("gang %s: %s gone with its namespace", plan.group, effect.member)
                return
            # The partial-gang metric is counted by the coordinator, which sees every effect.
            log.warning("gang %s partial: %s: %s", plan.group, effect.member, effect.cause)
            await self.writes.event_on_members(plan.group, "GangPartial", effect.message, "Warning")


def _lift_queue(effect: LiftAdmissionGate) -> Hashable:
    """The queue a gate's lift runs in: its group's, or the pod's own when it has none."""
    return effect.group if effect.group is not None else effect.pod
