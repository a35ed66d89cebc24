"""Status written back to other schedulers' PodGroups of gangs gang-extender runs.

A user migrating keeps `kubectl get podgroups.scheduling.x-k8s.io` (or
`.scheduling.volcano.sh`) as the place to watch a job: the group reconciler
calls `ForeignStatusWriter.write` for every changed group, and this writes the
phase and counts `domain.status.status` computed, in that PodGroup's own schema
(`domain.status.foreign_status`). A Kubernetes `scheduling.k8s.io` PodGroup gets its
`PodGroupInitiallyScheduled` condition (False with our reason while held, True
once placed, then never again).

Only for groups with at least one member of this scheduler (`schedulerName:
gang-extender`): a PodGroup whose pods another scheduler (scheduler-plugins'
coscheduling, Volcano's) places is its business, never overwritten here. Written
only when what it would say changes (remembered per PodGroup uid, so a
re-created PodGroup is written afresh).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable
from typing import Any

from extender.controller.cluster_state import ClusterState
from extender.domain.cluster.foreign_podgroups import COSCHEDULING_API, UPSTREAM_GROUP, VOLCANO_API
from extender.domain.gang.core_api import SchedulingCore
from extender.domain.objects.membership import SCHEDULER_NAME, GroupKey
from extender.domain.status.foreign_status import (
    coscheduling_status,
    occupied_by,
    upstream_condition,
    volcano_status,
    with_schedule_start,
)
from extender.domain.status.status import GroupStatus, group_status
from extender.kube.client import KubeError, RawApi
from extender.kube.writers import (
    HTTP_NOT_FOUND,
    write_foreign_podgroup_status,
    write_upstream_podgroup_condition,
)

log = logging.getLogger(__name__)

HTTP_FORBIDDEN = 403


def _utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class ForeignStatusWriter:
    """Keeps the status of a group's scheduler-plugins and Volcano PodGroups in step."""

    def __init__(self, *, raw: RawApi, core: SchedulingCore, state: ClusterState) -> None:
        self.raw = raw
        self.core = core
        self.state = state
        # (api version, group, PodGroup uid) -> the status last written, times left out.
        self._written: dict[tuple[str, GroupKey, str], dict[str, Any]] = {}
        # scheduleStartTime this replica wrote, until the watch shows it on the object.
        self._started: dict[tuple[GroupKey, str], str] = {}

    def _schedules(self, key: GroupKey) -> bool:
        pods = self.state.group_pods.get(key, {}).values()
        return any((p.get("spec") or {}).get("schedulerName") == SCHEDULER_NAME for p in pods)

    async def write(self, key: GroupKey) -> None:
        coscheduling = self.state.coscheduling_podgroups.get(key)
        volcano = self.state.volcano_podgroups.get(key)
        upstream = self.state.upstream_podgroups.get(key)
        if (coscheduling is None and volcano is None and upstream is None) or not self._schedules(
            key
        ):
            return
        status = group_status(self.core, key)
        if status is None:
            return
        if upstream is not None:
            await self._write_upstream(key, upstream, status)
        if coscheduling is not None:
            owners = [
                str(ref.get("name", ""))
                for pod in self.state.group_pods.get(key, {}).values()
                for ref in (pod.get("metadata") or {}).get("ownerReferences") or []
            ]
            body = coscheduling_status(status, occupied=occupied_by(key.namespace, owners))
            uid = _uid(coscheduling)
            if self._written.get((COSCHEDULING_API, key, uid)) != body:
                full = with_schedule_start(
                    body,
                    current=coscheduling.get("status") or {},
                    remembered=self._started.get((key, uid)),
                    now=_utc_now(),
                )
                await self._patch(COSCHEDULING_API, key, uid, full, subresource=True)
                self._written[(COSCHEDULING_API, key, uid)] = body
                if "scheduleStartTime" in full:
                    self._started[(key, uid)] = full["scheduleStartTime"]
        if volcano is not None:
            comparable = volcano_status(status, transition_time="")
            uid = _uid(volcano)
            if self._written.get((VOLCANO_API, key, uid)) != comparable:
                body = volcano_status(status, transition_time=_utc_now())
                # Volcano's CRD has no status subresource: the status goes with the object.
                answer = await self._patch(VOLCANO_API, key, uid, body, subresource=False)
                if _status_dropped(answer, body) and not await self._volcano_status_subresource(
                    key, uid, body
                ):
                    return  # not written: tried again at the group's next change
                self._written[(VOLCANO_API, key, uid)] = comparable

    async def _write_upstream(
        self, key: GroupKey, obj: dict[str, Any], status: GroupStatus
    ) -> None:
        condition = upstream_condition(
            status, current=obj.get("status") or {}, transition_time=_utc_now()
        )
        if condition is None:
            return
        api_version = str(obj.get("apiVersion") or f"{UPSTREAM_GROUP}/v1beta1")
        uid = _uid(obj)
        written = (api_version, key, uid)
        comparable = {k: v for k, v in condition.items() if k != "lastTransitionTime"}
        if self._written.get(written) == comparable:
            return
        try:
            answer = await self._unless_deleted(
                functools.partial(
                    write_upstream_podgroup_condition,
                    self.raw,
                    api_version=api_version,
                    namespace=key.namespace,
                    name=key.name,
                    uid=uid,
                    condition=condition,
                )
            )
            if answer is None:
                return
        except KubeError as err:
            if err.status != HTTP_FORBIDDEN:
                raise
            log.warning(
                "gang %s: gang-extender may not patch podgroups/status in %s (%s), so the "
                "PodGroup's %s condition is not written; grant patch on podgroups/status "
                "in scheduling.k8s.io to the gang-extender ClusterRole (docs/deploy.md#rbac)",
                key,
                UPSTREAM_GROUP,
                err.reason,
                condition["type"],
            )
        # Remembered when refused too: one warning per change, not one per reconcile.
        self._written[written] = comparable

    async def _volcano_status_subresource(
        self, key: GroupKey, uid: str, body: dict[str, Any]
    ) -> bool:
        """A Volcano PodGroup CRD that serves a status subresource (Volcano's own does not)
        drops the status of an object patch: written through the subresource then, which
        needs `patch` on podgroups/status of scheduling.volcano.sh (docs/deploy.md#rbac)."""
        try:
            await self._patch(VOLCANO_API, key, uid, body, subresource=True)
        except KubeError as err:
            if err.status != HTTP_FORBIDDEN:
                raise
            log.warning(
                "gang %s: this cluster's Volcano PodGroup CRD has a status subresource, so "
                "the status goes through podgroups/status, which gang-extender may not patch "
                "(%s); grant patch on podgroups/status in scheduling.volcano.sh to the "
                "gang-extender ClusterRole (docs/deploy.md#rbac)",
                key,
                err.reason,
            )
            return False
        return True

    async def _patch(
        self, api_version: str, key: GroupKey, uid: str, body: dict[str, Any], *, subresource: bool
    ) -> dict[str, Any]:
        answer = await self._unless_deleted(
            functools.partial(
                write_foreign_podgroup_status,
                self.raw,
                api_version=api_version,
                namespace=key.namespace,
                name=key.name,
                uid=uid,
                status=body,
                subresource=subresource,
            )
        )
        return {} if answer is None else answer

    @staticmethod
    async def _unless_deleted(
        write: Callable[[], dict[str, Any]],
    ) -> dict[str, Any] | None:
        """The API server's answer to a status write, or None when the PodGroup was
        deleted meanwhile (404): its DELETED event drops it from the state, so there
        is nothing left to write to. Other errors are the caller's."""
        try:
            return await asyncio.to_thread(write)
        except KubeError as err:
            if err.status != HTTP_NOT_FOUND:
                raise
            return None

    def forget(self, key: GroupKey) -> None:
        """The group is gone: drop what was remembered about its PodGroups."""
        for written in [w for w in self._written if w[1] == key]:
            del self._written[written]
        for started in [s for s in self._started if s[0] == key]:
            del self._started[started]


def _status_dropped(answer: dict[str, Any], body: dict[str, Any]) -> bool:
    """The API server answered the patch with an object whose status is not the one
    sent: the CRD keeps status apart (a status subresource) and ignored it."""
    if not answer.get("metadata"):
        return False  # no object in the answer (deleted meanwhile): nothing to tell
    kept = answer.get("status") or {}
    return any(kept.get(field) != value for field, value in body.items() if field != "conditions")


def _uid(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("uid", ""))
