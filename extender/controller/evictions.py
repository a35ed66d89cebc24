"""Carries out gang preemption's `EvictVictims`: annotate, evict, tell both sides.

For each victim, in order: the gang-extender.io/preempted-by annotation (so the
lifecycle policy sees a preemption, not a failure: the Eviction API overwrites
the DisruptionTarget reason), then the policy/v1 Eviction. A 429 is a
PodDisruptionBudget saying no: the annotation is taken back, the victim's unit is
reported to the core (`GangCore.eviction_refused`, left out of the next choice)
and the victim gets a `PreemptionRefused` Event; the preemptor's hold expires and
it chooses again or waits. Every evicted victim gets a `PreemptedByGang` Event
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
from extender.kube.writers import api_error_summary, emit_event

if TYPE_CHECKING:
    from extender.controller.effects import EffectWriter

log = logging.getLogger(__name__)

WRITE_EVICTION = "eviction"
REFUSED_EVENT = "PreemptionRefused"


def _split(ref: str) -> tuple[str, str]:
    namespace, _, name = ref.partition("/")
    return namespace, name


async def evict_victims(writer: EffectWriter, effect: EvictVictims) -> None:
    if effect.message:
        await writer._event_on_members(effect.group, PREEMPTING_EVENT, effect.message, "Normal")
    await asyncio.gather(*(_evict_one(writer, effect, victim) for victim in effect.victims))


async def _evict_one(writer: EffectWriter, effect: EvictVictims, victim: Victim) -> None:
    namespace, name = _split(victim.ref)
    timeout = writer.settings.api_write_timeout_seconds
    raw = writer.raw
    marked = await writer._write(
        WRITE_EVICTION,
        effect.group,
        f"mark pod {victim.ref} preempted",
        lambda: mark_preempted(raw, namespace, name, effect.preemptor, timeout=timeout),
    )
    if not marked or not writer.acting():
        return
    try:
        await asyncio.to_thread(evict_pod, raw, namespace, name, victim.uid, timeout=timeout)
    except KubeError as err:
        if err.status == HTTP_TOO_MANY_REQUESTS:
            log.info("gang %s: eviction of %s refused: %s", effect.group, victim.ref, err.message)
            writer.core.eviction_refused(victim.unit, time.time())
            await writer._write(
                WRITE_EVICTION,
                effect.group,
                f"unmark pod {victim.ref}",
                lambda: mark_preempted(raw, namespace, name, None, timeout=timeout),
            )
            await _victim_event(
                writer,
                effect,
                victim,
                REFUSED_EVENT,
                f"not evicted for {effect.preemptor}: {err.message[:300]}",
                "Normal",
            )
            return
        if err.status != 404:
            log.warning(
                "gang %s: evicting %s failed: %s", effect.group, victim.ref, api_error_summary(err)
            )
            writer.metrics.api_write_errors.labels(kind=WRITE_EVICTION).inc()
        return
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
