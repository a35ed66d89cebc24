"""Carries out gang preemption's `EvictVictims`: annotate, evict, tell both sides.

Units (a whole gang, or one plain pod) are evicted in parallel; the members of
one gang one after another. For each victim: the gang-extender.io/preempted-by
annotation (so the lifecycle policy sees a preemption, not a failure: the
Eviction API overwrites the DisruptionTarget reason), then the policy/v1 Eviction.

A 429 is a PodDisruptionBudget saying no. On a unit's first pod, nothing of the
unit has gone: the annotation is taken back, the unit is reported to the core
(`GangCore.eviction_refused`: left out of the next choice, and the preemptor's
hold dropped so it chooses again or waits), the pod gets a `PreemptionRefused`
Event, and the rest of the unit is left alone. On a later pod, part of
the gang is gone already and a partial gang is the one outcome worse than a
delay: that eviction is tried again every `api_write_backoff_max_seconds` until
`preemption_hold_seconds` pass (a budget counts the evicted pods' replacements
once they are healthy). Every evicted victim gets a `PreemptedByGang` Event
naming the preemptor; the preemptor's members get `GangPreempting`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from extender.domain.decisions import EvictVictims, Victim
from extender.domain.preemption import PREEMPTED_EVENT, PREEMPTING_EVENT
from extender.kube.evictions import HTTP_TOO_MANY_REQUESTS, evict_pod, mark_preempted
from extender.kube.rawapi import KubeError
from extender.kube.writers import api_error_summary, emit_event, is_transient

if TYPE_CHECKING:
    from extender.controller.effects import EffectWriter

log = logging.getLogger(__name__)

WRITE_EVICTION = "eviction"
HTTP_NOT_FOUND = 404
REFUSED_EVENT = "PreemptionRefused"


def _split(ref: str) -> tuple[str, str]:
    namespace, _, name = ref.partition("/")
    return namespace, name


async def evict_victims(writer: EffectWriter, effect: EvictVictims) -> None:
    if effect.message:
        await writer._event_on_members(effect.group, PREEMPTING_EVENT, effect.message, "Normal")
    units: dict[str, list[Victim]] = {}
    for victim in effect.victims:
        units.setdefault(victim.unit, []).append(victim)
    await asyncio.gather(*(_evict_unit(writer, effect, victims) for victims in units.values()))


async def _evict_unit(writer: EffectWriter, effect: EvictVictims, victims: list[Victim]) -> None:
    """One unit's pods, one after another; a refusal of the first leaves the unit whole."""
    for i, victim in enumerate(victims):
        if not await _evict_one(writer, effect, victim, first=i == 0):
            return


async def _evict_one(
    writer: EffectWriter, effect: EvictVictims, victim: Victim, *, first: bool
) -> bool:
    """Mark and evict one victim; False when its unit must be left alone (refused first)."""
    namespace, name = _split(victim.ref)
    settings = writer.settings
    timeout = settings.api_write_timeout_seconds
    raw = writer.raw
    marked = await writer._write(
        WRITE_EVICTION,
        effect.group,
        f"mark pod {victim.ref} preempted",
        lambda: mark_preempted(raw, namespace, name, effect.preemptor, timeout=timeout),
    )
    if not marked or not writer.acting():
        return False
    give_up = time.monotonic() + settings.preemption_hold_seconds
    while True:
        try:
            await asyncio.to_thread(evict_pod, raw, namespace, name, victim.uid, timeout=timeout)
            break
        except KubeError as err:
            # A refusal once part of the gang is gone: finish it rather than leave it
            # partial. A transient failure (no answer, 5xx): try again too.
            refused = err.status == HTTP_TOO_MANY_REQUESTS
            again = (refused and not first) or (not refused and is_transient(err))
            if again and time.monotonic() < give_up and writer.acting():
                await asyncio.sleep(settings.api_write_backoff_max_seconds)
                continue
            return await _not_evicted(writer, effect, victim, err, first=first)
    writer.metrics.preemption_evictions.labels(result="evicted").inc()
    log.info("gang %s: evicted %s (%s)", effect.group, victim.ref, victim.unit)
    await _victim_event(
        writer,
        effect,
        victim,
        PREEMPTED_EVENT,
        f"{victim.ref} ({victim.unit}) evicted by gang-extender to make room for "
        f"{effect.preemptor}",
        "Warning",
    )
    return True


async def _not_evicted(
    writer: EffectWriter, effect: EvictVictims, victim: Victim, err: KubeError, *, first: bool
) -> bool:
    """An eviction that failed for good; whether to go on with the rest of the unit."""
    namespace, name = _split(victim.ref)
    timeout = writer.settings.api_write_timeout_seconds
    raw = writer.raw
    if err.status == HTTP_NOT_FOUND:
        return True  # gone already: the room is free, go on with the unit
    if err.status == HTTP_TOO_MANY_REQUESTS:
        writer.metrics.preemption_evictions.labels(result="refused").inc()
        log.info("gang %s: eviction of %s refused: %s", effect.group, victim.ref, err.message)
        writer.core.eviction_refused(
            victim.unit, time.time(), preemptor=effect.group if effect.message else None
        )
        reason, message = REFUSED_EVENT, f"not evicted for {effect.preemptor}: {err.message[:300]}"
    else:
        log.warning(
            "gang %s: evicting %s failed: %s", effect.group, victim.ref, api_error_summary(err)
        )
        writer.metrics.api_write_errors.labels(kind=WRITE_EVICTION).inc()
        reason, message = (
            REFUSED_EVENT,
            f"not evicted for {effect.preemptor}: {api_error_summary(err)}",
        )
    await writer._write(
        WRITE_EVICTION,
        effect.group,
        f"unmark pod {victim.ref}",
        lambda: mark_preempted(raw, namespace, name, None, timeout=timeout),
    )
    await _victim_event(writer, effect, victim, reason, message, "Normal")
    # The first pod of a unit: nothing of it has gone, leave it whole. A later one: the
    # gang is partial already; the rest still go, so it does not run short.
    return not first


async def _victim_event(
    writer: EffectWriter,
    effect: EvictVictims,
    victim: Victim,
    reason: str,
    message: str,
    event_type: str,
) -> None:
    namespace, name = _split(victim.ref)
    involved = {
        "apiVersion": "v1",
        "kind": "Pod",
        "namespace": namespace,
        "name": name,
        "uid": victim.uid,
    }
    timeout = writer.settings.api_write_timeout_seconds
    await writer._write(
        "event",
        effect.group,
        f"Event {reason} on pod {victim.ref}",
        lambda: emit_event(
            writer.raw,
            involved=involved,
            reason=reason,
            message=message,
            event_type=event_type,
            timeout=timeout,
        ),
    )
