"""The API writes of a gang's lifecycle policy: label, announce, delete, recreate.

controller/lifecycle.py decides when (`LifecycleController`, after domain/lifecycle/lifecycle.py's
`decide`); this carries the writes out. Every write goes through `call`: a 404 is moot,
a namespace being deleted refuses it quietly (403), anything else is logged and counted
in gang_extender_api_write_errors_total{kind="lifecycle-<what>"}, never raised.

Deleting a member marks it with DisruptionTarget (reason DeletedByGangPolicy) first; a
bare member is recreated from its own last spec in the background once its name is
free (`recreate_in_background`), within RECREATE_WAIT_SECONDS.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from extender.config import Settings
from extender.controller.api_writes import namespace_terminating
from extender.controller.cluster_state import ClusterState
from extender.controller.effects import EffectWriter
from extender.domain.lifecycle.lifecycle import recreated_pod
from extender.domain.objects.membership import GroupKey
from extender.kube.client import KubeError, RawApi
from extender.kube.pod_lifecycle import (
    create_pod,
    delete_pod,
    label_restart_generation,
    mark_disrupted_by_policy,
    namespace_is_terminating,
    read_pod,
)
from extender.kube.writers import emit_event
from extender.metrics import Metrics

log = logging.getLogger(__name__)

HTTP_NOT_FOUND = 404
HTTP_CONFLICT = 409
# How long a restart waits for a deleted bare member's name to be free before
# recreating it (its grace period); then it gives up, logged and in an Event.
RECREATE_WAIT_SECONDS = 300.0
RECREATE_POLL_SECONDS = 0.5
RECREATE_SETTLE_SECONDS = 1.0


def utc(when: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when))


@dataclass
class LifecycleWrites:
    settings: Settings
    raw: RawApi
    metrics: Metrics
    state: ClusterState
    writer: EffectWriter
    clock: Callable[[], float] = time.time
    tasks: set[asyncio.Task[None]] = field(default_factory=set)  # recreations under way

    async def call(self, key: GroupKey, what: str, call: Callable[..., None], *args: Any) -> bool:
        """One write; a 404 is moot, anything else is logged and counted (no crash)."""
        try:
            await asyncio.to_thread(call, *args)
            return True
        except KubeError as err:
            if err.status == HTTP_NOT_FOUND:
                return True
            if namespace_terminating(err):
                log.info("gang %s: lifecycle %s skipped: namespace being deleted", key, what)
                return True
            log.warning("gang %s: lifecycle %s failed: %s %s", key, what, err.status, err.reason)
        except Exception:
            log.exception("gang %s: lifecycle %s failed", key, what)
        self.metrics.api_write_errors.labels(kind=f"lifecycle-{what}").inc()
        return False

    async def namespace_terminating(self, namespace: str) -> bool:
        """Is the namespace being deleted: the watch cache, else the API server now.

        Listed by name (namespaces are listed and watched anyway; no `get` grant is
        needed). An unanswered question is taken as no: the restart goes on, and a
        create the namespace refuses is then logged quietly.
        """
        if self.state.terminating(namespace):
            return True
        try:
            return await asyncio.to_thread(
                namespace_is_terminating,
                self.raw,
                namespace,
                timeout=self.settings.api_write_timeout_seconds,
            )
        except KubeError as err:  # a question, not a write: the restart goes on
            log.info("could not ask whether namespace %s is terminating: %s", namespace, err)
            return False

    def label(self, pod: dict[str, Any], generation: int) -> None:
        label_restart_generation(
            self.raw, pod, generation, timeout=self.settings.api_write_timeout_seconds
        )

    def announce(self, key: GroupKey, reason: str, message: str, kind: str = "Warning") -> None:
        """The Event on the PodGroup (it outlives the members) and on every member."""

        def on_podgroup() -> None:
            emit_event(
                self.raw,
                involved={
                    "apiVersion": "scheduling.gang-extender.io/v1alpha1",
                    "kind": "PodGroup",
                    "namespace": key.namespace,
                    "name": key.name,
                    "uid": str(
                        ((self.state.podgroups.get(key) or {}).get("metadata") or {}).get("uid")
                        or ""
                    ),
                },
                reason=reason,
                message=message,
                event_type=kind,
                timeout=self.settings.api_write_timeout_seconds,
            )

        async def job() -> None:
            await self.call(key, "event", on_podgroup)

        self.writer.queues.submit(key, job)
        self.writer.queue_event(key, reason, message, kind)

    async def delete(
        self, key: GroupKey, uids: tuple[str, ...], pods: list[dict[str, Any]], reason: str
    ) -> None:
        by_uid = {p["metadata"].get("uid"): p for p in pods}

        timeout = self.settings.api_write_timeout_seconds

        def delete(meta: dict[str, Any]) -> None:
            # Marked as disrupted first, as the scheduler marks a pod it preempts: a Job
            # whose podFailurePolicy ignores DisruptionTarget then neither counts the
            # member against backoffLimit nor delays its replacement by its backoff.
            with contextlib.suppress(KubeError):  # a pod gone already; the delete says so
                mark_disrupted_by_policy(
                    self.raw, meta, reason[:1024], utc(self.clock()), timeout=timeout
                )
            delete_pod(self.raw, meta, timeout=timeout)

        await asyncio.gather(
            *(
                self.call(key, "delete", delete, by_uid[uid]["metadata"])
                for uid in uids
                if uid in by_uid
            )
        )

    def recreate_in_background(
        self, key: GroupKey, templates: list[dict[str, Any]], generation: int
    ) -> None:
        """Recreate bare members once their names are free; the caller does not wait."""
        # A name is free only once the old pod's grace period is over, and the
        # reconciler must not wait for that.
        task = asyncio.get_running_loop().create_task(
            self._recreate_all(key, templates, generation), name=f"recreate {key}"
        )
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _recreate_all(
        self, key: GroupKey, templates: list[dict[str, Any]], generation: int
    ) -> None:
        await asyncio.gather(*(self._recreate(key, t, generation) for t in templates))

    async def _name_free(self, namespace: str, name: str) -> bool:
        try:
            await asyncio.to_thread(
                read_pod,
                self.raw,
                namespace,
                name,
                timeout=self.settings.api_write_timeout_seconds,
            )
        except KubeError as err:
            return err.status == HTTP_NOT_FOUND
        return False

    async def _recreate(self, key: GroupKey, template: dict[str, Any], generation: int) -> None:
        meta = template["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        body = recreated_pod(template, generation)
        deadline = self.clock() + RECREATE_WAIT_SECONDS
        while not await self._name_free(namespace, name):
            if self.clock() >= deadline:
                break  # the POST below says why (409)
            await asyncio.sleep(RECREATE_POLL_SECONDS)
        # The node agent that removed the old pod may act on its name once more just
        # after (KWOK deletes by name, without the uid precondition kubelet uses).
        await asyncio.sleep(RECREATE_SETTLE_SECONDS)
        while True:
            try:
                await asyncio.to_thread(
                    create_pod,
                    self.raw,
                    namespace,
                    body,
                    timeout=self.settings.api_write_timeout_seconds,
                )
                log.info(
                    "gang %s: recreated %s/%s (generation %d)", key, namespace, name, generation
                )
                return
            except KubeError as err:
                if namespace_terminating(err):
                    log.info(
                        "gang %s: %s/%s not recreated: its namespace is being deleted",
                        key,
                        namespace,
                        name,
                    )
                    return
                if err.status != HTTP_CONFLICT or self.clock() >= deadline:
                    log.warning(
                        "gang %s: could not recreate %s/%s: %s %s",
                        key,
                        namespace,
                        name,
                        err.status,
                        err.reason,
                    )
                    self.metrics.api_write_errors.labels(kind="lifecycle-recreate").inc()
                    self.writer.queue_event(
                        key,
                        "GangRestartIncomplete",
                        f"gang {key}: could not recreate {namespace}/{name} after the "
                        f"restart ({err.status} {err.reason}); recreate it by hand",
                        "Warning",
                    )
                    return
            await asyncio.sleep(RECREATE_POLL_SECONDS)  # the old pod still holds the name
