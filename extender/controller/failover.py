"""One writer: whether this replica may act right now, and plan recovery at each take-over.

`Failover.acting()` is the one check every verb and every queued API write makes at
the moment it acts: with leader election, this replica holds the Lease (counted
from before its last renew, `kube.leader`) *and* has rebuilt the plans of the
current term from the members' planned-node annotations (`GangCore.recover`);
without leader election (one replica) it always acts. A replica that is not acting
answers `/filter` with every node held and `/bind` with an error, and skips its
queued writes.

Recovery runs on the event loop as soon as both hold: leadership gained and the
watch cache synced (whichever comes last), so the new leader is Ready only once
the previous leader's reservations are its own. Losing the Lease drops every plan
(`GangCore.stand_down`): its barrier waiters are refused, and the annotations stay
for the next leader.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from extender.domain.gang.core_api import SchedulingCore
from extender.kube.leader import LeaderElector
from extender.metrics import Metrics
from extender.ports.binding import Binder, BindError

log = logging.getLogger(__name__)

NOT_THE_LEADER = "not the leader"


class Failover:
    def __init__(
        self,
        core: SchedulingCore,
        leader: LeaderElector | None,
        metrics: Metrics,
        *,
        flush_effects: Callable[[], None],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.core = core
        self.leader = leader
        self.metrics = metrics
        self.flush_effects = flush_effects
        self.clock = clock
        self.synced: Callable[[], bool] = lambda: False  # the watch cache's, set by the service
        self._recovered_term: int | None = None  # leader.term (0 without election)
        self.failure: str | None = None  # why the last recovery raised, for /readyz

    def _term(self) -> int:
        return self.leader.term if self.leader is not None else 0

    def acting(self) -> bool:
        """May this replica plan, bind and write right now?"""
        if self.leader is None:
            return True  # one replica: always the leader
        return self.leader.is_leader and self._recovered_term == self.leader.term

    def ready(self) -> tuple[bool, str]:
        """Recovered for the current term (readiness adds leadership and cache sync)."""
        if self._recovered_term == self._term():
            return True, "ok"
        if self.failure is not None:
            return False, f"recovering planned gangs failed (retrying): {self.failure}"
        return False, "recovering planned gangs from their planned-node annotations"

    def on_leadership(self, leading: bool) -> None:
        """The elector's `on_change`, on the event loop."""
        if leading:
            self.step()
        else:
            self._recovered_term = None
            self.core.stand_down(self.clock())
            self.flush_effects()

    def step(self) -> None:
        """Recover if leading (or not electing), synced and not yet done this term."""
        if self.leader is not None and not self.leader.observe():
            return
        term = self._term()
        if self._recovered_term == term or not self.synced():
            return
        try:
            found = self.core.recover(self.clock())
        except Exception as err:
            self.failure = f"{type(err).__name__}: {err}"
            raise
        self._recovered_term = term
        self.failure = None
        for plan in found.plans:
            log.info("gang %s: plan recovered: %s", plan.group, sorted(plan.placements.values()))
        for refused in found.refused:
            log.info("not recovered: %s", refused.reason)
        self.metrics.plans_recovered.labels(outcome="recovered").inc(len(found.plans))
        self.metrics.plans_recovered.labels(outcome="refused").inc(len(found.refused))
        self.metrics.reservations.set(self.core.reserved_placements())
        self.flush_effects()

    async def run(self, interval_seconds: float) -> None:
        """Notice a synced cache or a lapsed Lease between the elector's rounds.

        A step that raises is logged and tried again next round: this loop is what
        retries a recovery that failed, so it must outlive one."""
        while True:
            try:
                self.step()
            except Exception:
                log.exception("plan recovery failed; trying again in %.1fs", interval_seconds)
            await asyncio.sleep(interval_seconds)


class LeaderOnlyBinder:
    """A `Binder` that asks `acting()` right before each binding call.

    A bind that waited in the barrier may find, when the barrier opens, that this
    replica lost the Lease meanwhile: then it is refused (BindError, which the
    coordinator turns into the scheduler's `Error`) instead of posted.
    """

    def __init__(self, binder: Binder, acting: Callable[[], bool], metrics: Metrics) -> None:
        self.binder = binder
        self.acting = acting
        self.metrics = metrics

    async def bind(self, *, namespace: str, name: str, uid: str, node: str) -> None:
        if not self.acting():
            self.metrics.not_leader_refusals.labels(what="bind").inc()
            raise BindError(NOT_THE_LEADER)
        await self.binder.bind(namespace=namespace, name=name, uid=uid, node=node)
