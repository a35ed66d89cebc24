"""Carries out gang preemption's `EvictVictims`: annotate, evict, tell both sides.

Units (a whole gang, or one plain pod) are evicted in parallel; the members of
one gang one after another. For each victim: the gang-extender.io/preempted-by
annotation (so the lifecycle policy sees a preemption, not a failure: the
Eviction API overwrites the DisruptionTarget reason), then the policy/v1 Eviction.

What the API server does not let happen on a unit's first pod leaves the unit
whole and is told to the core (`GangCore.eviction_refused`: the unit is left out
of the next choice, and the preemptor's hold dropped so it chooses again or
waits), with a `PreemptionRefused` Event on the pod saying why:
 - a 429 on the eviction is a PodDisruptionBudget saying no (left out for
   `preemption_hold_seconds`; the annotation is taken back);
 - a mark or an eviction refused for good (403: the service has no RoleBinding
   in that namespace; 422; an admission policy) is `preemption_forbidden_seconds`;
 - a transient failure (no answer, 5xx) is tried again with a backoff first
   (`ApiWrites` for the mark; the eviction until `preemption_hold_seconds`), and
   one that outlasts that is left out for `preemption_hold_seconds`.
On a later pod, part of the gang is gone already and a partial gang is the one
outcome worse than a delay: a budget's refusal is asked again every
`api_write_backoff_max_seconds` until `preemption_hold_seconds` pass (a budget
counts the evicted pods' replacements once they are healthy), and a pod that
cannot be marked is evicted unmarked. Every evicted victim gets a
`PreemptedByGang` Event naming the preemptor; the preemptor's members get
`GangPreempting`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Protocol

from extender.controller.api_writes import ApiWrites
from extender.domain.objects.membership import GroupKey
from extender.domain.preemption.preemption import PREEMPTED_EVENT, PREEMPTING_EVENT, EvictionRefusal
from extender.domain.state.decisions import EvictVictims, Victim
from extender.kube.client import KubeError
from extender.kube.evictions import HTTP_TOO_MANY_REQUESTS, evict_pod, mark_preempted
from extender.kube.writers import api_error_summary, is_transient

log = logging.getLogger(__name__)

WRITE_EVICTION = "eviction"
HTTP_NOT_FOUND = 404
HTTP_FORBIDDEN = 403
REFUSED_EVENT = "PreemptionRefused"
MARK = "mark it preempted (annotation gang-extender.io/preempted-by)"
EVICT = "evict it"


class EvictionRefused(Protocol):
    """What the core is told of a unit not evicted (`GangCore.eviction_refused`)."""

    def __call__(
        self,
        unit: str,
        now: float,
        *,
        preemptor: GroupKey | None,
        refusal: EvictionRefusal,
        why: str,
    ) -> None: ...


def _split(ref: str) -> tuple[str, str]:
    namespace, _, name = ref.partition("/")
    return namespace, name


def refusal_of(err: Exception, *, eviction: bool) -> EvictionRefusal:
    """Why `err` stopped a mark (`eviction` False) or an eviction; see `EvictionRefusal`."""
    status = getattr(err, "status", None)
    if eviction and status == HTTP_TOO_MANY_REQUESTS:
        return EvictionRefusal.BUDGET
    if isinstance(err, KubeError) and is_transient(err):
        return EvictionRefusal.FAILED
    return EvictionRefusal.FORBIDDEN


class Evictions:
    """Gang preemption's evictions, through `writes`; refusals go to `refused` (the core)."""

    def __init__(self, writes: ApiWrites, *, refused: EvictionRefused) -> None:
        self.writes = writes
        self.refused = refused

    async def carry_out(self, effect: EvictVictims) -> None:
        if effect.message:
            await self.writes.event_on_members(
                effect.group, PREEMPTING_EVENT, effect.message, "Normal"
            )
        units: dict[str, list[Victim]] = {}
        for victim in effect.victims:
            units.setdefault(victim.unit, []).append(victim)
        await asyncio.gather(*(self._evict_unit(effect, victims) for victims in units.values()))

    async def _evict_unit(self, effect: EvictVictims, victims: list[Victim]) -> None:
        """One unit's pods, one after another; a refusal of the first leaves the unit whole."""
        for i, victim in enumerate(victims):
            if not await self._evict_one(effect, victim, first=i == 0):
                return

    async def _evict_one(self, effect: EvictVictims, victim: Victim, *, first: bool) -> bool:
        """Mark and evict one victim; False when its unit must be left alone (refused first)."""
        namespace, name = _split(victim.ref)
        writes, settings = self.writes, self.writes.settings
        timeout = settings.api_write_timeout_seconds
        raw = writes.raw
        failed = await writes.write_or_error(
            WRITE_EVICTION,
            effect.group,
            f"mark pod {victim.ref} preempted",
            lambda: mark_preempted(raw, namespace, name, effect.preemptor, timeout=timeout),
        )
        if failed is not None and first:
            await self._refused(effect, victim, failed, action=MARK, marked=False)
            return False
        if failed is not None:
            # Part of the gang is gone already: evicted unmarked, its lifecycle policy
            # may count a failure, which is still better than a gang left partial.
            log.warning("gang %s: evicting %s unmarked", effect.group, victim.ref)
        if not writes.acting():
            return False
        give_up = time.monotonic() + settings.preemption_hold_seconds
        while True:
            try:
                await asyncio.to_thread(
                    evict_pod, raw, namespace, name, victim.uid, timeout=timeout
                )
                break
            except KubeError as err:
                # A refusal once part of the gang is gone: finish it rather than leave it
                # partial. A transient failure (no answer, 5xx): try again too.
                refused = err.status == HTTP_TOO_MANY_REQUESTS
                again = (refused and not first) or (not refused and is_transient(err))
                if again and time.monotonic() < give_up and writes.acting():
                    await asyncio.sleep(settings.api_write_backoff_max_seconds)
                    continue
                if err.status == HTTP_NOT_FOUND:
                    return True  # gone already: the room is free, go on with the unit
                await self._refused(effect, victim, err, action=EVICT, marked=failed is None)
                # The first pod of a unit: nothing of it has gone, leave it whole. A later
                # one: the gang is partial already; the rest still go, so it is not short.
                return not first
        writes.metrics.preemption_evictions.labels(result="evicted").inc()
        log.info("gang %s: evicted %s (%s)", effect.group, victim.ref, victim.unit)
        await self._victim_event(
            effect,
            victim,
            PREEMPTED_EVENT,
            f"{victim.ref} ({victim.unit}) evicted by gang-extender to make room for "
            f"{effect.preemptor}",
            "Warning",
        )
        return True

    async def _refused(
        self, effect: EvictVictims, victim: Victim, err: Exception, *, action: str, marked: bool
    ) -> None:
        """`victim` was not evicted: tell the core, take the mark back, say why on the pod."""
        writes, settings = self.writes, self.writes.settings
        refusal = refusal_of(err, eviction=action == EVICT)
        namespace, name = _split(victim.ref)
        if refusal is EvictionRefusal.BUDGET:
            writes.metrics.preemption_evictions.labels(result="refused").inc()
            why = refusal.value
            detail = str(getattr(err, "message", ""))[:300]
            log.info("gang %s: eviction of %s refused: %s", effect.group, victim.ref, detail)
            lasting = settings.preemption_hold_seconds
        else:
            why = api_error_summary(err)
            if action == EVICT:  # a failed mark was logged and counted by ApiWrites
                log.warning("gang %s: evicting %s failed: %s", effect.group, victim.ref, why)
                writes.metrics.api_write_errors.labels(kind=WRITE_EVICTION).inc()
            writes.metrics.preemption_evictions.labels(result="failed").inc()
            detail = f"the API server did not let gang-extender {action} ({why})"
            if getattr(err, "status", None) == HTTP_FORBIDDEN:
                detail += (
                    f"; to let gangs preempt pods in namespace {namespace}, bind ClusterRole "
                    f"gang-extender-namespace there (docs/deploy.md#rbac)"
                )
            lasting = (
                settings.preemption_forbidden_seconds
                if refusal is EvictionRefusal.FORBIDDEN
                else settings.preemption_hold_seconds
            )
        self.refused(
            victim.unit,
            time.time(),
            preemptor=effect.group if effect.message else None,
            refusal=refusal,
            why=why,
        )
        if marked:
            timeout = settings.api_write_timeout_seconds
            await writes.write(
                WRITE_EVICTION,
                effect.group,
                f"unmark pod {victim.ref}",
                lambda: mark_preempted(writes.raw, namespace, name, None, timeout=timeout),
            )
        await self._victim_event(
            effect,
            victim,
            REFUSED_EVENT,
            f"not evicted for {effect.preemptor}: {detail}; {victim.unit} is left out of "
            f"gang preemption for {lasting:g} s",
            "Normal",
        )

    async def _victim_event(
        self, effect: EvictVictims, victim: Victim, reason: str, message: str, event_type: str
    ) -> None:
        namespace, name = _split(victim.ref)
        involved = {"namespace": namespace, "name": name, "uid": victim.uid}
        await self.writes.event_on_pod(
            effect.group,
            {"apiVersion": "v1", "kind": "Pod", **involved},
            reason,
            message,
            event_type,
        )
