"""Runs the pure `GangCore` on the event loop: the bind barrier and the binder call.

Every core call happens on the one event-loop thread (watch threads hand their
events over with `call_soon_threadsafe`), so the core needs no locks. Effects
the core emits are signalled to barrier waiters here and handed to the service
(`effect_sink`) for the API writes: annotations, Events, status.

A binding that fails is reported to the core with what the binder learned
(`BindError.gone`, `.bound_to`); whether the gang keeps the member's reservation,
counts it bound, or records a partial gang (`GangBroken`, counted here in
gang_extender_partial_gangs_total) is the core's decision.

The coordinator keeps no scheduling state of its own, only the barrier events:
what a pod is, whether it may bind, and counting it on its node are the core's
verbs (`asked_about`, `arrive`, `barrier_*`, `assume_bound` / `undo_assumption`,
`binding_succeeded`, `bind_failed`); it never reaches into the core's snapshot,
ledger or group states.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from extender.domain.gang.core_api import SchedulingCore
from extender.domain.objects.membership import GroupKey
from extender.domain.planning.scoring import Priorities
from extender.domain.preemption.preemption import GangAwareAnswer, NodeVictims
from extender.domain.state.decisions import (
    BarrierReleased,
    BindVerdict,
    Effect,
    FilterDecision,
    GangBound,
    GangBroken,
    GangFaulted,
    PlanDropped,
)
from extender.metrics import Metrics
from extender.ports.binding import Binder, BindError

log = logging.getLogger(__name__)


class SchedulingCoordinator:
    def __init__(
        self,
        core: SchedulingCore,
        binder: Binder,
        metrics: Metrics,
        *,
        effect_sink: Callable[[list[Effect]], None],
        clock: Callable[[], float] = time.time,
        namespace_deleted: Callable[[str], bool] = lambda namespace: False,
    ) -> None:
        self.core = core
        self.binder = binder
        self.metrics = metrics
        self.clock = clock
        # Whether a namespace is being deleted (the watch cache's word): a gang whose
        # members go with their namespace mid-bind is going away whole, not partial.
        self.namespace_deleted = namespace_deleted
        self._effect_sink = effect_sink
        self._barriers: dict[int, asyncio.Event] = {}

    # ---- extender verbs ----
    def filter(self, pod: dict[str, Any], candidates: list[str]) -> FilterDecision:
        info = self.core.asked_about(pod)
        try:
            return self.core.filter(info, candidates, self.clock(), nominated_node_of(pod))
        finally:
            self.flush_effects()

    def prioritize(self, pod: dict[str, Any], candidates: list[str]) -> Priorities:
        # The nodes that score; the route answers only the candidates among them.
        return self.core.priorities(self.core.asked_about(pod))

    def preempt(self, pod: dict[str, Any], proposed: dict[str, NodeVictims]) -> GangAwareAnswer:
        info = self.core.asked_about(pod)
        try:
            return self.core.preempt(info, proposed, self.clock())
        finally:
            self.flush_effects()

    async def bind(self, *, namespace: str, name: str, uid: str, node: str) -> str:
        """Bind or refuse; "" on success, else the error for the scheduler."""
        refusal = self.core.bind_refusal(uid=uid, namespace=namespace, name=name, node=node)
        if refusal:
            return refusal
        decision = self.core.arrive(uid, node, self.clock())
        self.flush_effects()
        if decision.verdict is BindVerdict.ERROR:
            return decision.message
        if decision.verdict is BindVerdict.BIND_NOW:
            return await self._bind_now(namespace, name, uid, node, assume=True)
        if decision.verdict in (BindVerdict.WAIT, BindVerdict.RELEASE):
            assert decision.plan_id is not None and decision.group is not None
            event = self._barriers.setdefault(decision.plan_id, asyncio.Event())
            if decision.verdict is BindVerdict.RELEASE:
                event.set()
            with self.metrics.barrier_waiting.track_inprogress():
                error = await self._wait_barrier(decision.plan_id, decision.group, event)
            if error:
                return error
        return await self._bind_now(namespace, name, uid, node, assume=False)

    async def _wait_barrier(self, plan_id: int, group: GroupKey, event: asyncio.Event) -> str:
        while True:
            state = self.core.barrier_state(plan_id, group)
            if state is BindVerdict.RELEASE:
                return ""
            if state is BindVerdict.ERROR:
                return self.core.dropped_plan_message(plan_id, group)
            deadline = self.core.barrier_deadline(plan_id, group)
            remaining = (deadline - self.clock()) if deadline is not None else 0.0
            if remaining <= 0:
                message = self.core.barrier_timed_out(plan_id, group, self.clock())
                self.flush_effects()
                return message
            try:
                await asyncio.wait_for(event.wait(), timeout=remaining)
            except TimeoutError:
                continue

    async def _bind_now(
        self, namespace: str, name: str, uid: str, node: str, *, assume: bool
    ) -> str:
        """POST the binding; count the pod on its node before (`assume`) or after the call.

        A pod outside any plan is assumed before the call and the assumption undone
        if the binding fails; a planned member is counted after it. Why each way:
        `GangCore.assume_bound`.
        """
        assumption = self.core.assume_bound(uid, node, self.clock()) if assume else None
        if assumption is not None:
            self.flush_effects()
        try:
            await self.binder.bind(namespace=namespace, name=name, uid=uid, node=node)
        except BindError as err:
            if assumption is not None:
                self.core.undo_assumption(assumption, self.clock())
            if err.bound_to is not None:
                # Someone else bound it: it holds capacity there, whatever we planned.
                self.core.binding_succeeded(uid, err.bound_to, self.clock())
            else:
                self.core.bind_failed(uid, str(err), self.clock(), gone=err.gone)
            self.flush_effects()
            return f"binding {namespace}/{name} to {node}: {err}"
        # Also after a plain pod's (assumed) binding: the core keeps the node against
        # watch copies older than the binding.
        if self.core.binding_succeeded(uid, node, self.clock()):
            self.flush_effects()
        return ""

    # ---- plumbing ----
    def flush_effects(self) -> None:
        effects = self.core.drain_effects()
        if not effects:
            return
        for effect in effects:
            # Counted here, not at the waiter: the periodic expiry may drop the plan first.
            if (
                isinstance(effect, PlanDropped)
                and effect.timed_out
                and effect.plan.barrier_started is not None
            ):
                self.metrics.barrier_timeouts.inc()
            if isinstance(effect, PlanDropped | GangBound):
                # Wake waiters of a dropped plan; forget the event of a finished one.
                event = self._barriers.pop(effect.plan.plan_id, None)
                if event is not None:
                    event.set()
            if isinstance(effect, BarrierReleased):
                # Released after the gang's placeholders were seen deleted: wake the waiters.
                event = self._barriers.get(effect.plan.plan_id)
                if event is not None:
                    event.set()
            if isinstance(effect, GangFaulted):
                # Once per fault: the core does not plan the gang again until it changes.
                log.error("gang %s held: %s\n%s", effect.group, effect.message, effect.details)
                self.metrics.gang_faults.labels(where=effect.where).inc()
            if isinstance(effect, GangBroken):
                if effect.first and self.namespace_deleted(effect.plan.group.namespace):
                    log.info(
                        "gang %s: members gone with their namespace while binding: the "
                        "whole gang is being deleted, not counted as partial",
                        effect.plan.group,
                    )
                elif effect.first:
                    self.metrics.partial_gangs.inc()
                plan = effect.plan
                if self.core.barrier_state(plan.plan_id, plan.group) is BindVerdict.ERROR:
                    self._barriers.pop(plan.plan_id, None)  # settled partial: nobody waits
        self.metrics.reservations.set(self.core.reserved_placements())
        self._effect_sink(effects)

    def tick(self) -> None:
        """Periodic: expire plans past their deadline (wakes their barrier waiters), then
        plan the gangs behind the admission gate on the room that freed."""
        self.core.expire(self.clock())
        self.core.admit_gated(self.clock())
        self.flush_effects()


def nominated_node_of(pod: Mapping[str, Any]) -> str | None:
    """The `status.nominatedNodeName` of a pod as kube-scheduler sent it (None: none, or
    not a string)."""
    status = pod.get("status")
    nominated = status.get("nominatedNodeName") if isinstance(status, Mapping) else None
    return nominated if isinstance(nominated, str) and nominated else None
