"""The group reconciler: turns core state into API objects, once per tick per changed group.

For each group that changed (and every group each `resync_seconds`): the
auto-created PodGroup of annotation-declared groups, PodGroup status (written
only when it changed), a GangWaiting Event per member when the waiting reason
changes, the group's Secret, Service and ConfigMap through the wiring
controller (re-rendered when any member changes, its Ready list included; the
list emptied once the last member is gone), what the user must fix (a GangMisconfigured
Warning Event and the `Configured` condition), and last the status of its
scheduler-plugins or Volcano PodGroup (`controller.foreign_status`). Only the leader
reconciles, and only once the caches are synced. A group whose reconcile raises is
retried each pass and kept to itself: its PodGroup's `Reconciled` condition and a
Warning Event carry the error (once per distinct error) until a reconcile of it
succeeds (`controller.reconcile_pass`). Events go through the effect writer's group queue, so they keep their
order with the group's other writes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, Protocol

from extender.config import Settings
from extender.controller.api_writes import namespace_terminating
from extender.controller.cluster_state import ClusterState
from extender.controller.effects import EffectWriter
from extender.controller.foreign_status import ForeignStatusWriter
from extender.controller.lifecycle import LifecycleController
from extender.controller.reconcile_pass import WRITE_RECONCILE, ReconcileFaults
from extender.domain.gang.core_api import SchedulingCore
from extender.domain.objects.membership import (
    CREATED_FROM_ANNOTATION,
    GroupKey,
    MembershipError,
    task_layout,
)
from extender.domain.objects.model import GroupSpec
from extender.domain.status.status import GroupStatus, group_status
from extender.kube.client import KubeError, RawApi
from extender.kube.wiring import WiringConflictError
from extender.kube.writers import (
    api_error_summary,
    create_podgroup,
    pod_owner_references,
    update_podgroup,
    write_podgroup_status,
)
from extender.metrics import Metrics

log = logging.getLogger(__name__)

# The PodGroup condition that says what a user must fix before the group can be
# wired (absent when nothing is wrong); the `Scheduled` condition stays first.
CONFIGURED_CONDITION = "Configured"
# Warning Event on the members for the same problems.
MISCONFIGURED_EVENT = "GangMisconfigured"
# A Warning Event on the members: an object of the group's wiring carried our label
# without our seal (kube/ownership.py) and was replaced or adopted.
WIRING_REPLACED_EVENT = "WiringReplaced"
# The wiring memo of a group whose members are all gone (its ready list cleared).
_NO_MEMBERS = "no members"


class Wiring(Protocol):
    """Makes a group's Secret, Service and ConfigMap match its PodGroup and pods."""

    def reconcile(
        self,
        *,
        namespace: str,
        group: str,
        podgroup: dict[str, Any] | None,
        pods: list[dict[str, Any]],
    ) -> Sequence[str] | None:
        """Notices of objects labelled ours but not sealed, replaced or adopted."""
        ...

    def clear_ready_hosts(self, *, namespace: str, group: str) -> None: ...


class _Problem(NamedTuple):
    """Something about a group only its user can fix, shown in an Event and a condition."""

    reason: str
    message: str


def _utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class GroupReconciler:
    """Reconciles the groups `state` marked as changed; remembers what it wrote.

    The memos (status written, waiting reason announced, wiring fingerprint,
    problems reported) are dropped once a group has no pods and no PodGroup.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        raw: RawApi,
        metrics: Metrics,
        core: SchedulingCore,
        state: ClusterState,
        writer: EffectWriter,
        wiring: Wiring,
        tick: Callable[[], None],
        acting: Callable[[], bool] = lambda: True,
        schedules: bool = True,
        lifecycle: LifecycleController | None = None,
    ) -> None:
        self.settings = settings
        self.raw = raw
        self.metrics = metrics
        self.core = core
        self.state = state
        self.writer = writer
        self.wiring = wiring
        self.tick = tick
        self.acting = acting  # one writer: controller.failover.Failover.acting
        # False in wiring-only mode: another scheduler places the groups and reports on
        # them, so no PodGroup status and no GangWaiting Event are written here.
        self.schedules = schedules
        self.lifecycle = lifecycle  # restart / abort policies (controller/lifecycle.py)
        self._written_status: dict[GroupKey, dict[str, Any]] = {}
        self._announced: dict[GroupKey, str] = {}
        self._wired: dict[GroupKey, str] = {}
        self._problems: dict[GroupKey, tuple[_Problem, ...]] = {}
        # Groups whose reconcile raised: their condition and Event until one succeeds.
        self.faults = ReconcileFaults(metrics=metrics, writer=writer)
        self.clock: Callable[[], float] = time.monotonic  # times each group's reconcile
        # Status of the group's scheduler-plugins / Volcano PodGroups, in their schema.
        self.foreign_status = ForeignStatusWriter(raw=raw, core=core, state=state)

    async def run(self, caches_synced: Callable[[], bool]) -> None:
        """Every reconcile interval: the coordinator's tick, then the changed groups."""
        last_resync = 0.0
        while True:
            await asyncio.sleep(self.settings.reconcile_interval_seconds)
            try:
                last_resync = await self._one_pass(caches_synced, last_resync)
            except Exception:  # noqa: BLE001 -- the loop must outlive any one pass
                # A dead loop would leave every group unwired while filters still answer.
                self.metrics.gang_faults.labels(where="reconcile-pass").inc()
                log.exception("a reconcile pass failed; the next pass runs as usual")

    async def _one_pass(self, caches_synced: Callable[[], bool], last_resync: float) -> float:
        """The coordinator's tick, then every group marked changed; the last resync time."""
        self.tick()
        if not caches_synced() or not self.acting():
            return last_resync
        now = time.time()
        if now - last_resync > self.settings.resync_seconds:
            self.state.dirty.update(self.core.snapshot.group_keys())
            last_resync = now
        if self.lifecycle is not None:
            self.state.dirty.update(self.lifecycle.due(now))
        # A starvation reservation started, moved or ended: its gang's status says so.
        self.state.dirty.update(self.core.drain_touched())
        pending, self.state.dirty = sorted(self.state.dirty), set()
        for done, key in enumerate(pending):
            if not self.acting():  # deposed meanwhile: the new leader reconciles all
                self.metrics.not_leader_refusals.labels(what="reconcile").inc()
                break
            try:
                await self.reconcile_contained(key)
            except BaseException:
                self.state.dirty.update(pending[done:])  # not lost: the next pass has them
                raise
        return last_resync

    async def reconcile_contained(self, key: GroupKey) -> None:
        """`reconcile_group(key)`, whatever it raises kept to this group: retried on the
        next pass (an API error, a defect), or left to its reported problem."""
        started = self.clock()
        try:
            await self.reconcile_group(key)
            if self.faults.resolved(key):
                await self._write_status_if_ours(key)  # the failure condition goes
        except KubeError as err:
            if namespace_terminating(err):
                return  # the namespace and everything in it is going away
            # Status and reason only: an error's text can echo the response body.
            log.warning("reconcile %s: %s; retrying", key, api_error_summary(err))
            self.metrics.api_write_errors.labels(kind=WRITE_RECONCILE).inc()
            self.state.dirty.add(key)
        except (WiringConflictError, MembershipError) as err:
            # reconcile_group reports these to the user; this is a safety net.
            log.warning("reconcile %s: %s", key, err)
        except Exception as err:  # contained: the other groups are reconciled
            self.state.dirty.add(key)
            await self.faults.failed(key, err, self._write_status_if_ours)
        finally:
            self.faults.time_taken(key, self.clock() - started)

    async def _write_status_if_ours(self, key: GroupKey) -> None:
        """`_write_status` for a group whose PodGroup is ours and scheduled here."""
        podgroup = self.state.podgroup_object(key)
        if podgroup is None or not self.schedules:
            return
        if podgroup.get("apiVersion", "").startswith("scheduling.gang-extender.io/"):
            await self._write_status(key)

    async def reconcile_group(self, key: GroupKey) -> None:
        spec = self.core.snapshot.group_spec(key)
        pods = list(self.state.group_pods.get(key, {}).values())
        podgroup = self.state.podgroup_object(key)
        if not pods and podgroup is None:
            self._forget_group(key)
            return
        ours = podgroup is not None and podgroup.get("apiVersion", "").startswith(
            "scheduling.gang-extender.io/"
        )
        managed = ours and CREATED_FROM_ANNOTATION in (
            (podgroup or {}).get("metadata", {}).get("annotations") or {}
        )
        await self._follow_members(key, spec, podgroup if managed else None, pods)
        if self.lifecycle is not None and self.schedules:
            # Another scheduler's gangs (wiring-only mode) are its to restart.
            await self.lifecycle.reconcile(
                key, podgroup=podgroup if ours else None, managed=managed, pods=pods, spec=spec
            )
        if ours and self.schedules:
            await self._write_status(key)
        if self.schedules:
            self._announce_waiting(key)
        problems: list[_Problem] = []
        policy_problem = self.lifecycle.problem(key) if self.lifecycle is not None else None
        if policy_problem is not None:
            problems.append(_Problem("InvalidPolicy", policy_problem))
        layout_problem = self._layout_problem(key, podgroup, pods)
        if layout_problem is not None:
            problems.append(layout_problem)
        if self.state.injected(key.namespace) and podgroup is not None and pods:
            fingerprint = repr(
                (
                    podgroup["metadata"].get("resourceVersion"),
                    sorted(p["metadata"].get("resourceVersion", "") for p in pods),
                )
            )
            if self._wired.get(key) != fingerprint:
                try:
                    notices = await asyncio.to_thread(
                        self.wiring.reconcile,
                        namespace=key.namespace,
                        group=key.name,
                        podgroup=podgroup,
                        pods=pods,
                    )
                except WiringConflictError as err:
                    problems.append(_Problem("WiringConflict", f"gang {key}: {err}"))
                except MembershipError as err:
                    problems.append(
                        _Problem(
                            "InvalidSpec",
                            f"gang {key}: {err}; the group's Secret, Service and "
                            f"ConfigMap are not written until it is fixed",
                        )
                    )
                else:
                    self._wired[key] = fingerprint
                    for notice in notices or ():
                        log.warning("gang %s: %s", key, notice)
                        self.writer.queue_event(key, WIRING_REPLACED_EVENT, notice, "Warning")
        elif (
            self.state.injected(key.namespace)
            and podgroup is not None
            and self._wired.get(key, _NO_MEMBERS) != _NO_MEMBERS
        ):
            # Wired before and no member left: nobody is Ready any more (the render
            # above never runs without pods, so it would keep the last list).
            await asyncio.to_thread(
                self.wiring.clear_ready_hosts, namespace=key.namespace, group=key.name
            )
            self._wired[key] = _NO_MEMBERS
        await self._report_problems(key, tuple(problems), write_status=ours and self.schedules)
        # Last: a PodGroup of another scheduler's API group that refuses the write (a
        # 403 from RBAC older than this version) delays nothing above; retried as any.
        # Wiring-only: that scheduler places the pods and writes its own status.
        if self.schedules:
            await self.foreign_status.write(key)

    async def _follow_members(
        self,
        key: GroupKey,
        spec: GroupSpec | None,
        managed: dict[str, Any] | None,
        pods: list[dict[str, Any]],
    ) -> None:
        """Keep the PodGroup of an annotation-declared group in step with its members.

        Created when the members carry the annotation and no PodGroup exists; its
        minMember set to what they agree on now. Its owner references list the
        group's pods, kept current here, so Kubernetes' garbage collector deletes it
        once the last is gone. Only one gang-extender created (`managed`) is
        changed: a user's PodGroup never is.
        """
        if not pods:
            return
        owners = pod_owner_references(pods)
        agreed = (
            spec.min_member
            if spec is not None and spec.source == "annotation" and spec.error is None
            else None
        )
        if managed is not None:
            meta = managed["metadata"]
            current = (managed.get("spec") or {}).get("minMember")
            owned = {str(r.get("uid")) for r in meta.get("ownerReferences") or []}
            size = agreed if agreed is not None else current
            if not isinstance(size, int) or (
                size == current and owned == {o["uid"] for o in owners}
            ):
                return
            await asyncio.to_thread(
                update_podgroup,
                self.raw,
                namespace=key.namespace,
                name=key.name,
                uid=str(meta.get("uid", "")),
                resource_version=str(meta.get("resourceVersion", "")),
                min_member=size,
                owners=owners,
            )
            return
        if agreed is None or self.state.podgroup_object(key) is not None:
            return  # nothing to create from, or a user's (or scheduler-plugins') PodGroup
        layout = None
        with contextlib.suppress(MembershipError):  # reported by _layout_problem
            layout = task_layout(pods[0]["metadata"])
        await asyncio.to_thread(
            create_podgroup,
            self.raw,
            namespace=key.namespace,
            name=key.name,
            min_member=agreed,
            min_task_member=layout,
            owners=owners,
        )

    @staticmethod
    def _layout_problem(
        key: GroupKey, podgroup: dict[str, Any] | None, pods: list[dict[str, Any]]
    ) -> _Problem | None:
        """A member's `gang-extender.io/tasks` annotation that does not parse, when it counts.

        It counts unless the PodGroup sets spec.minTaskMember (which wins). The webhook
        denies such pods in injected namespaces; elsewhere they are admitted, and the
        annotation would be ignored without a word.
        """
        spec = (podgroup or {}).get("spec") or {}
        if spec.get("minTaskMember"):
            return None
        for pod in sorted(pods, key=lambda p: str(p["metadata"].get("name", ""))):
            try:
                task_layout(pod["metadata"])
            except MembershipError as err:
                return _Problem(
                    "InvalidTaskLayout",
                    f"gang {key}: pod {pod['metadata'].get('name')}: {err}; fix the "
                    f"annotation in the pods' template, or set spec.minTaskMember on "
                    f"PodGroup {key.name} (the annotation is ignored until then)",
                )
        return None

    def remembered(self, key: GroupKey) -> set[str]:
        """Which memos hold `key` (status, announced, wiring, problems, fault): a read-only
        view of what `_forget_group` must drop."""
        memos: dict[str, Mapping[GroupKey, object]] = {
            "status": self._written_status,
            "announced": self._announced,
            "wiring": self._wired,
            "problems": self._problems,
        }
        held = {name for name, memo in memos.items() if key in memo}
        if self.faults.condition(key, "") is not None:
            held.add("fault")
        return held

    def _forget_group(self, key: GroupKey) -> None:
        """A group with no pods and no PodGroup left: drop what was remembered about it,
        so the service's memory follows the groups that exist, not all it ever saw."""
        for memo in (
            self._written_status,
            self._announced,
            self._wired,
            self._problems,
        ):
            memo.pop(key, None)
        self.faults.forget(key)
        self.foreign_status.forget(key)
        if self.lifecycle is not None:
            self.lifecycle.forget(key)

    async def _report_problems(
        self, key: GroupKey, problems: tuple[_Problem, ...], *, write_status: bool
    ) -> None:
        """Tell the user what to fix: a Warning Event per new problem, and the condition."""
        previous = self._problems.get(key, ())
        if problems == previous:
            return
        if problems:
            self._problems[key] = problems
        else:
            self._problems.pop(key, None)
        for problem in problems:
            if problem not in previous:
                log.warning("gang %s: %s", key, problem.message)
                self.writer.queue_event(key, MISCONFIGURED_EVENT, problem.message, "Warning")
        if write_status:
            await self._write_status(key)

    def _status_body(self, key: GroupKey, status: GroupStatus, when: str) -> dict[str, Any]:
        body = status.as_api(when)
        if self.lifecycle is not None:
            fields, condition = self.lifecycle.status_fields(key)
            body.update(fields)
            if condition is not None:
                body["conditions"].append({**condition, "lastTransitionTime": when})
        problems = self._problems.get(key)
        if problems:
            body["conditions"].append(
                {
                    "type": CONFIGURED_CONDITION,
                    "status": "False",
                    "reason": problems[0].reason,
                    "message": "; ".join(p.message for p in problems),
                    "lastTransitionTime": when,
                }
            )
        fault = self.faults.condition(key, when)
        if fault is not None:
            body["conditions"].append(fault)
        return body

    async def _write_status(self, key: GroupKey) -> None:
        status = group_status(self.core, key)
        if status is None:
            return
        comparable = self._status_body(key, status, "")
        if self._written_status.get(key) == comparable:
            return
        body = self._status_body(key, status, _utc_now())
        await asyncio.to_thread(write_podgroup_status, self.raw, key.namespace, key.name, body)
        self._written_status[key] = comparable

    def _announce_waiting(self, key: GroupKey) -> None:
        """One GangWaiting Event per member each time the waiting reason changes."""
        status = group_status(self.core, key)
        if status is None or status.phase not in ("Pending",):
            return
        if self._announced.get(key) == status.message:
            return
        self._announced[key] = status.message
        event_type = "Warning" if status.reason == "InvalidSpec" else "Normal"
        self.writer.queue_event(key, "GangWaiting", status.message, event_type)
