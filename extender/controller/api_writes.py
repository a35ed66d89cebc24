"""One API write on the core's behalf: tried again on transient failures, counted, by the leader only.

`ApiWrites` is what the effect writer (controller/effects.py), the evictions
(controller/evictions.py) and the lifecycle writes share: `write` makes one call,
tries a transient failure (no answer, 408, 429, 5xx) again with a bounded
doubling backoff, and logs what still fails with its status code and reason
(never the response body), counted in gang_extender_api_write_errors_total.
`write_or_error` is the same and hands back the failure, for a caller whose next
step depends on why (an eviction forbidden is not one that timed out).

One writer: each attempt first asks `acting()`; a replica that is not the leader
(any more) skips the write and counts it in gang_extender_not_leader_total{what=
"write"}. A deposed leader must not clear the planned-node annotations the new
leader rebuilds its plans from, nor write Events for decisions it no longer owns.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any

from extender.config import Settings
from extender.controller.cluster_state import ClusterState
from extender.domain.objects.membership import SCHEDULER_NAME, GroupKey
from extender.kube.client import KubeError, RawApi
from extender.kube.writers import api_error_summary, emit_event, is_transient
from extender.metrics import Metrics

log = logging.getLogger(__name__)

HTTP_NOT_FOUND = 404
WRITE_EVENT = "event"


def namespace_terminating(err: Exception) -> bool:
    """The API server refused a write because the namespace is being deleted."""
    status = getattr(err, "status", None)
    text = str(getattr(err, "message", "") or getattr(err, "body", "") or err)
    return status == 403 and "being terminated" in text


def pod_reference(meta: Mapping[str, Any]) -> dict[str, str]:
    """An Event's involvedObject for the pod of `meta` (namespace, name, uid)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "namespace": meta["namespace"],
        "name": meta["name"],
        "uid": meta.get("uid", ""),
    }


def object_reference(
    obj: Mapping[str, Any], api_version: str, kind: str, *, namespace: str
) -> dict[str, str]:
    """An Event's involvedObject for an API object as the watch delivered it
    (`api_version` and `kind` where it does not say them)."""
    meta = obj.get("metadata") or {}
    return {
        "apiVersion": str(obj.get("apiVersion") or api_version),
        "kind": str(obj.get("kind") or kind),
        "namespace": str(meta.get("namespace") or namespace),
        "name": str(meta.get("name", "")),
        "uid": str(meta.get("uid", "")),
    }


class ApiWrites:
    """API writes for groups, each retried and counted; Events on pods and on members."""

    def __init__(
        self,
        settings: Settings,
        *,
        raw: RawApi,
        metrics: Metrics,
        state: ClusterState,
        acting: Callable[[], bool] = lambda: True,
    ) -> None:
        self.settings = settings
        self.raw = raw
        self.metrics = metrics
        self.state = state
        self.acting = acting

    async def write(
        self, kind: str, key: GroupKey | str, what: str, call: Callable[[], object]
    ) -> bool:
        """One API write for group `key`; True when done or moot (see `write_or_error`)."""
        return await self.write_or_error(kind, key, what, call) is None

    async def write_or_error(
        self, kind: str, key: GroupKey | str, what: str, call: Callable[[], object]
    ) -> Exception | None:
        """One API write for group `key`, tried again on transient failures.

        None when done, skipped (not the leader) or moot: a 404 (the pod or its
        namespace was deleted meanwhile) or a namespace being terminated. The error
        when it failed for good: then it is logged with status code and reason, and
        counted under `kind`.
        """
        s = self.settings
        delay = s.api_write_backoff_seconds
        attempt = 1
        while True:
            if not self.acting():
                log.info("gang %s: %s skipped: not the leader", key, what)
                self.metrics.not_leader_refusals.labels(what="write").inc()
                return None
            try:
                await asyncio.to_thread(call)
                return None
            except KubeError as err:
                if err.status == HTTP_NOT_FOUND or namespace_terminating(err):
                    log.debug("gang %s: %s: gone meanwhile (%s)", key, what, err.status)
                    return None
                error: Exception = err
                transient = is_transient(err)
            except Exception as err:
                log.exception("gang %s: %s failed", key, what)
                self.metrics.api_write_errors.labels(kind=kind).inc()
                return err
            if not transient or attempt >= s.api_write_attempts:
                log.warning(
                    "gang %s: %s failed after %d attempt(s): %s",
                    key,
                    what,
                    attempt,
                    api_error_summary(error),
                )
                self.metrics.api_write_errors.labels(kind=kind).inc()
                return error
            attempt += 1
            await asyncio.sleep(delay)
            delay = min(delay * 2, s.api_write_backoff_max_seconds)

    async def event_on_pod(
        self,
        key: GroupKey,
        involved: Mapping[str, str],
        reason: str,
        message: str,
        event_type: str,
    ) -> None:
        """One Event on one object (`involved`: `pod_reference` or `object_reference`),
        written for group `key`."""
        timeout = self.settings.api_write_timeout_seconds
        kind = involved.get("kind", "Pod").lower()
        await self.write(
            WRITE_EVENT,
            key,
            f"Event {reason} on {kind} {involved['namespace']}/{involved['name']}",
            lambda: emit_event(
                self.raw,
                involved=dict(involved),
                reason=reason,
                message=message,
                event_type=event_type,
                timeout=timeout,
            ),
        )

    async def event_on_group(
        self, key: GroupKey, reason: str, message: str, event_type: str
    ) -> None:
        """One Event for the whole group: on its PodGroup object (any of the accepted
        kinds), or on its first member by name when it has none."""
        podgroup = self.state.podgroup_typed(key)
        if podgroup is not None:
            involved = object_reference(*podgroup, namespace=key.namespace)
        else:
            pods = sorted(self._our_members(key), key=lambda p: p["metadata"]["name"])
            if not pods:
                return
            involved = pod_reference(pods[0]["metadata"])
        await self.event_on_pod(key, involved, reason, message, event_type)

    def _our_members(self, key: GroupKey) -> list[dict[str, Any]]:
        # Only pods this scheduler places: another scheduler's pods are not held by
        # the gang, and a gang Event on them would say the opposite of what happened.
        return [
            p
            for p in self.state.group_pods.get(key, {}).values()
            if (p.get("spec") or {}).get("schedulerName") == SCHEDULER_NAME
        ]

    async def event_on_members(
        self, key: GroupKey, reason: str, message: str, event_type: str
    ) -> None:
        """An Event on every member of `key` this scheduler places."""
        pods = self._our_members(key)
        await asyncio.gather(
            *(
                self.event_on_pod(key, pod_reference(p["metadata"]), reason, message, event_type)
                for p in pods
            )
        )
