"""Runs the pure `GangCore` on the event loop: the bind barrier and the binder call.

Every core call happens on the one event-loop thread (watch threads hand their
events over with `call_soon_threadsafe`), so the core needs no locks. Effects
the core emits are signalled to barrier waiters here and handed to the service
(`effect_sink`) for the API writes: annotations, Events, status.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable
from typing import Any

from extender.api.wire import ExtenderBindingArgs
from extender.domain.gang import (
    BindVerdict,
    Effect,
    FilterDecision,
    GangBound,
    GangCore,
    PlanDropped,
)
from extender.domain.model import PodInfo
from extender.metrics import Metrics
from extender.ports.binding import Binder, BindError

log = logging.getLogger(__name__)


class SchedulingCoordinator:
    def __init__(
        self,
        core: GangCore,
        binder: Binder,
        metrics: Metrics,
        *,
        effect_sink: Callable[[list[Effect]], None],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.core = core
        self.binder = binder
        self.metrics = metrics
        self.clock = clock
        self._effect_sink = effect_sink
        self._barriers: dict[int, asyncio.Event] = {}

    # ---- extender verbs ----
    def filter(self, pod: dict[str, Any], candidates: list[str]) -> FilterDecision:
        info = self._known(pod)
        try:
            return self.core.filter(info, candidates, self.clock())
        finally:
            self.flush_effects()

    def prioritize(self, pod: dict[str, Any], candidates: list[str]) -> dict[str, int]:
        return self.core.prioritize(self._known(pod), candidates)

    async def bind(self, args: ExtenderBindingArgs) -> str:
        decision = self.core.arrive(args.PodUID, args.Node, self.clock())
        self.flush_effects()
        if decision.verdict is BindVerdict.ERROR:
            return decision.message
        if decision.verdict is BindVerdict.BIND_NOW:
            return await self._bind_now(args, assume=True)
        if decision.verdict in (BindVerdict.WAIT, BindVerdict.RELEASE):
            assert decision.plan_id is not None and decision.group is not None
            event = self._barriers.setdefault(decision.plan_id, asyncio.Event())
            if decision.verdict is BindVerdict.RELEASE:
                event.set()
            with self.metrics.barrier_waiting.track_inprogress():
                error = await self._wait_barrier(decision.plan_id, decision.group, event)
            if error:
                return error
        return await self._bind_now(args, assume=False)

    async def _wait_barrier(self, plan_id: int, group: Any, event: asyncio.Event) -> str:
        while True:
            state = self.core.barrier_state(plan_id, group)
            if state is BindVerdict.RELEASE:
                return ""
            if state is BindVerdict.ERROR:
                message = self.core.groups[group].message if group in self.core.groups else ""
                return message or f"gang {group}: plan {plan_id} was dropped"
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

    async def _bind_now(self, args: ExtenderBindingArgs, *, assume: bool) -> str:
        """POST the binding and count the pod on its node, before or after the call.

        `assume` (a pod outside any plan): counted before the call returns, as
        kube-scheduler "assumes" a pod, and undone if the binding fails. Two such binds
        can be in flight at once, each checked against the gangs' reservations
        (`GangCore.arrive`); counting a pod only afterwards let both take the last room
        beside a reservation. A planned member is counted after the call: counting it
        releases its reservation, and a failed binding must still find and drop its plan.
        """
        undo: tuple[PodInfo, PodInfo] | None = None  # (as it was, as assumed)
        pod = self.core.snapshot.pods.get(args.PodUID)
        if assume and pod is not None and not pod.is_bound:
            undo = (pod, self._count_on_node(pod, args.Node))
        try:
            await self.binder.bind(
                namespace=args.PodNamespace, name=args.PodName, uid=args.PodUID, node=args.Node
            )
        except BindError as err:
            # Undo only our own assumption: the watch may have said more in the meantime.
            if undo is not None and self.core.snapshot.pods.get(args.PodUID) is undo[1]:
                self.core.observe_pod(undo[0], self.clock())
            self.core.bind_failed(args.PodUID, str(err), self.clock())
            self.flush_effects()
            return f"binding {args.PodNamespace}/{args.PodName} to {args.Node}: {err}"
        if not assume:
            # Now rather than when the watch catches up, so the next filter does not
            # offer the same room twice.
            pod = self.core.snapshot.pods.get(args.PodUID)
            if pod is not None and not pod.is_bound:
                self._count_on_node(pod, args.Node)
        return ""

    def _count_on_node(self, pod: PodInfo, node: str) -> PodInfo:
        """Record `pod` as bound to `node` in the core; the recorded copy."""
        bound = dataclasses.replace(pod, node_name=node)
        self.core.observe_pod(bound, self.clock())
        self.flush_effects()
        return bound

    # ---- plumbing ----
    def _known(self, pod: dict[str, Any]) -> PodInfo:
        """The scheduler's copy of the pod, or ours when we have it (ours carries plan notes)."""
        # Look the pod up by the uid PodInfo.from_api would give it, and parse only
        # a pod the cache has not seen: filter and prioritize come for every pod.
        cached = self.core.snapshot.pods.get(pod["metadata"]["uid"])
        if cached is not None:
            return cached
        info = PodInfo.from_api(pod)
        # A pod the watch has not delivered yet is recorded, so a gang member known only
        # from a request still joins its group's quorum and is refused a lone bind. One
        # that claims a node is not: kube-scheduler only asks about pods it is placing,
        # and only the watch may say what holds capacity.
        if not info.is_bound:
            self.core.snapshot.upsert_pod(info)
        return info

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
        self.metrics.reservations.set(
            sum(len(p.placements) - len(p.bound) for p in self.core.ledger.plans.values())
        )
        self._effect_sink(effects)

    def tick(self) -> None:
        """Periodic: expire plans past their deadline (wakes their barrier waiters)."""
        self.core.expire(self.clock())
        self.flush_effects()
