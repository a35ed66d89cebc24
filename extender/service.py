"""`gang-extender serve`: one process, three listeners, one event loop.

Composition root: builds the core, the watch cache, the coordinator, the
webhook and the group reconciler from `Settings`, then serves the extender
(HTTPS), the webhook (HTTPS) and metrics/health (HTTP) until SIGTERM.

The group reconciler turns core state into API objects: PodGroup status and
auto-created PodGroups, Events (GangWaiting, GangScheduled, GangTimeout,
GangMisconfigured), plan annotations, and (through the wiring controller) each
group's Secret, Service and ConfigMap.

Effects the core emits (PlanCreated, PlanDropped, GangBound) and the Events of a
group are carried out per group, one after another in the order they were
emitted (a clear of the planned-node annotations never overtakes the set it
undoes); different groups run in parallel. A transient API failure is tried again
with a bounded backoff; what still fails is logged with its status code and
reason (never the response body) and counted in
gang_extender_api_write_errors_total.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import signal
import time
from collections import defaultdict, deque
from collections.abc import Awaitable, Callable, Hashable, Iterator, Sequence
from typing import Any, NamedTuple

import urllib3
import uvicorn
import uvloop
from fastapi import FastAPI, Request
from fastapi.responses import PlainTextResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from extender.admitter import Admitter
from extender.api.extender import create_extender_app
from extender.api.webhook import create_webhook_app
from extender.config import Settings
from extender.coordinator import SchedulingCoordinator
from extender.domain.gang import Effect, GangBound, GangCore, PlanCreated, PlanDropped, Timeouts
from extender.domain.membership import (
    INJECT_NAMESPACE_LABEL,
    GroupKey,
    MembershipError,
    task_layout,
)
from extender.domain.model import GroupSpec, NodeInfo, PodInfo
from extender.domain.policy import PolicyError, load_policy
from extender.domain.quantity import GPU
from extender.domain.status import GroupStatus, group_status
from extender.kube.ca_publish import share_ca
from extender.kube.cache import CacheSink, WatchCache
from extender.kube.indexes import IndexAllocator
from extender.kube.leader import LeaderElector
from extender.kube.rawapi import KubeconfigError, KubeError, RawApi, load_api_client
from extender.kube.webhook_config import WebhookConfigError, write_ca_bundle
from extender.kube.wiring import WiringConflictError, WiringController
from extender.kube.writers import (
    ApiBinder,
    api_error_summary,
    create_podgroup,
    emit_event,
    is_transient,
    set_planned_node,
    write_podgroup_status,
)
from extender.metrics import Metrics
from extender.tls import TLSError, TLSMaterial, ensure_serving_cert, provided_cert

log = logging.getLogger(__name__)

POOL_LABEL = "gang-extender.io/pool"
# Re-check every group this often even without events (status drift, failed writes).
RESYNC_SECONDS = 30.0
HTTP_NOT_FOUND = 404
GPU_STATES = ("bound", "reserved", "free")
# The PodGroup condition that says what a user must fix before the group can be
# wired (absent when nothing is wrong); the `Scheduled` condition stays first.
CONFIGURED_CONDITION = "Configured"
# Warning Event on the members for the same problems.
MISCONFIGURED_EVENT = "GangMisconfigured"

# kind label of gang_extender_api_write_errors_total
WRITE_PLANNED_NODE = "planned-node"
WRITE_EVENT = "event"
WRITE_RECONCILE = "reconcile"
WRITE_CA_BUNDLE = "ca-bundle"


class StartupError(Exception):
    """The service cannot start with this configuration; the message says what to fix."""


class _Problem(NamedTuple):
    """Something about a group only its user can fix, shown in an Event and a condition."""

    reason: str
    message: str


def _namespace_terminating(err: Exception) -> bool:
    status = getattr(err, "status", None)
    text = str(getattr(err, "message", "") or getattr(err, "body", "") or err)
    return status == 403 and "being terminated" in text


class GroupQueues:
    """Runs the jobs of one group one after another, in the order submitted.

    Jobs of different groups run concurrently, at most `concurrency` at a time. A
    group's queue (and its task) exists only while it has work. Jobs must handle
    their own errors; one that raises anyway is logged and the next one runs.
    Submit only from the event loop.
    """

    def __init__(self, concurrency: int) -> None:
        self._queues: dict[Hashable, deque[Callable[[], Awaitable[None]]]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._slots = asyncio.Semaphore(concurrency)

    def submit(self, key: Hashable, job: Callable[[], Awaitable[None]]) -> None:
        queue = self._queues.get(key)
        if queue is None:
            queue = self._queues[key] = deque()
            task = asyncio.get_running_loop().create_task(
                self._drain(key, queue), name=f"effects {key}"
            )
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        queue.append(job)

    async def _drain(self, key: Hashable, queue: deque[Callable[[], Awaitable[None]]]) -> None:
        try:
            while queue:
                job = queue.popleft()
                async with self._slots:
                    try:
                        await job()
                    except Exception:
                        log.exception("an API write for %s failed", key)
        finally:
            if self._queues.get(key) is queue:
                del self._queues[key]

    async def join(self) -> None:
        """Until every job submitted so far (and any they submit) is done."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def cancel(self) -> None:
        for task in list(self._tasks):
            task.cancel()


def _split(ref: str) -> tuple[str, str]:
    namespace, _, name = ref.partition("/")
    return namespace, name


def _utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class ClusterState(CacheSink):
    """Applies cache traffic to the core and remembers what the reconciler needs."""

    def __init__(self, core: GangCore, coordinator: SchedulingCoordinator) -> None:
        self.core = core
        self.coordinator = coordinator
        self.group_pods: dict[GroupKey, dict[str, dict[str, Any]]] = defaultdict(dict)
        self.podgroups: dict[GroupKey, dict[str, Any]] = {}
        self.coscheduling_podgroups: dict[GroupKey, dict[str, Any]] = {}
        self.namespace_labels: dict[str, dict[str, str]] = {}
        self.dirty: set[GroupKey] = set()
        self._relisting: dict[str, set[str]] = {}

    # ---- CacheSink ----
    def on_page(self, kind: str, items: list[dict[str, Any]], first: bool, last: bool) -> None:
        seen = self._relisting.setdefault(kind, set()) if not first else set()
        self._relisting[kind] = seen
        for obj in items:
            seen.add(self._identity(kind, obj))
            self._apply(kind, "ADDED", obj)
        if last:
            self._forget_missing(kind, self._relisting.pop(kind))
        self.coordinator.flush_effects()

    def on_event(self, kind: str, event_type: str, obj: dict[str, Any]) -> None:
        self._apply(kind, event_type, obj)
        self.coordinator.flush_effects()

    @staticmethod
    def _identity(kind: str, obj: dict[str, Any]) -> str:
        meta = obj.get("metadata") or {}
        if kind == "pods":
            return str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}")
        return f"{meta.get('namespace', '')}/{meta.get('name')}"

    def _forget_missing(self, kind: str, seen: set[str]) -> None:
        """After a relist, drop what the list no longer has (deleted while unwatched)."""
        now = time.time()
        if kind == "pods":
            for uid in [u for u in self.core.snapshot.pods if u not in seen]:
                pod = self.core.snapshot.pods[uid]
                self._drop_pod_json(pod)
                self.core.forget_pod(uid, now)
        elif kind == "nodes":
            for name in [n for n in self.core.snapshot.nodes if f"/{n}" not in seen]:
                self.core.snapshot.delete_node(name)
        elif kind in ("podgroups", "coscheduling-podgroups"):
            store = self.podgroups if kind == "podgroups" else self.coscheduling_podgroups
            for key in [k for k in store if f"{k.namespace}/{k.name}" not in seen]:
                self._apply(kind, "DELETED", store[key])
        elif kind == "namespaces":
            for name in [n for n in self.namespace_labels if f"/{n}" not in seen]:
                del self.namespace_labels[name]

    def _drop_pod_json(self, pod: PodInfo) -> None:
        if pod.group is not None:
            self.group_pods[pod.group].pop(pod.uid, None)
            self.dirty.add(pod.group)

    def _apply(self, kind: str, event_type: str, obj: dict[str, Any]) -> None:
        now = time.time()
        deleted = event_type == "DELETED"
        if kind == "nodes":
            if deleted:
                self.core.snapshot.delete_node(obj["metadata"]["name"])
            else:
                self.core.snapshot.upsert_node(NodeInfo.from_api(obj))
        elif kind == "pods":
            pod = PodInfo.from_api(obj)
            old = self.core.snapshot.pods.get(pod.uid)
            if old is not None and old.group != pod.group:
                self._drop_pod_json(old)
            if deleted:
                self._drop_pod_json(pod)
                self.core.forget_pod(pod.uid, now)
                return
            self.core.observe_pod(pod, now)
            if pod.group is not None:
                self.group_pods[pod.group][pod.uid] = obj
                self.dirty.add(pod.group)
        elif kind in ("podgroups", "coscheduling-podgroups"):
            source = "PodGroup" if kind == "podgroups" else "coscheduling PodGroup"
            store = self.podgroups if kind == "podgroups" else self.coscheduling_podgroups
            spec = GroupSpec.from_podgroup(obj, source=source)
            if deleted:
                store.pop(spec.key, None)
                self.core.snapshot.delete_podgroup(source, spec.key)
            else:
                store[spec.key] = obj
                self.core.snapshot.upsert_podgroup(spec)
                self.core.group_changed(spec.key, now)
            self.dirty.add(spec.key)
        elif kind == "namespaces":
            name = obj["metadata"]["name"]
            if deleted:
                self.namespace_labels.pop(name, None)
            else:
                self.namespace_labels[name] = dict(obj["metadata"].get("labels") or {})

    def podgroup_object(self, key: GroupKey) -> dict[str, Any] | None:
        return self.podgroups.get(key) or self.coscheduling_podgroups.get(key)

    def injected(self, namespace: str) -> bool:
        labels = self.namespace_labels.get(namespace, {})
        return labels.get(INJECT_NAMESPACE_LABEL) == "enabled"


class GangService:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.metrics = Metrics()
        try:
            self.policy = load_policy(settings.policy)
        except PolicyError as err:
            raise StartupError(str(err)) from None
        self.api_client = _api_client(settings)
        self.raw = RawApi(self.api_client)
        self.core = GangCore(
            policy=self.policy,
            timeouts=Timeouts(
                schedule_timeout_seconds=settings.default_schedule_timeout_seconds,
                bind_barrier_timeout_seconds=settings.bind_barrier_timeout_seconds,
                replan_backoff_seconds=settings.replan_backoff_seconds,
            ),
        )
        self.binder = ApiBinder(self.raw)
        self.coordinator = SchedulingCoordinator(
            self.core, self.binder, self.metrics, effect_sink=self._queue_effects
        )
        self.state = ClusterState(self.core, self.coordinator)
        self.wiring = WiringController(self.raw)
        self.allocator = IndexAllocator(
            self.raw,
            hold_seconds=settings.index_hold_seconds,
            list_timeout_seconds=settings.index_list_timeout_seconds,
        )
        self.leader = (
            LeaderElector(
                self.raw,
                namespace=settings.lease_namespace,
                name=settings.lease_name,
                lease_seconds=settings.lease_duration_seconds,
                renew_seconds=settings.lease_renew_seconds,
                metrics=self.metrics,
            )
            if settings.leader_elect
            else None
        )
        self._effects = GroupQueues(settings.effect_concurrency)
        self._written_status: dict[GroupKey, dict[str, Any]] = {}
        self._announced: dict[GroupKey, str] = {}
        self._wired: dict[GroupKey, str] = {}
        self._problems: dict[GroupKey, tuple[_Problem, ...]] = {}
        self._gpu_pools: set[str] = set()
        # Only a self-managed CA has to be written into the webhook configuration.
        self._ca_bundle_written = not (settings.webhook_config_name and not settings.tls_cert)
        self.cache: WatchCache | None = None
        self._servers: list[uvicorn.Server] = []

    # ---- readiness ----
    def ready(self) -> tuple[bool, str]:
        if self.cache is None or not self.cache.synced():
            return False, "caches not synced"
        if not self._ca_bundle_written:
            return False, (
                f"CA bundle not written into MutatingWebhookConfiguration "
                f"{self.settings.webhook_config_name} (retrying; the log says why)"
            )
        if self.leader is not None and not self.leader.is_leader:
            return False, "not the leader"
        return True, "ok"

    # ---- effects: API writes the core asked for ----
    def _queue_effects(self, effects: list[Effect]) -> None:
        for effect in effects:
            self._effects.submit(effect.plan.group, functools.partial(self._carry_out, effect))

    async def _write(self, kind: str, key: GroupKey, what: str, call: Callable[[], object]) -> bool:
        """One API write for group `key`, tried again on transient failures.

        True when done, or moot: a 404 (the pod or its namespace was deleted
        meanwhile) or a namespace being terminated. False when it failed for good:
        then it is logged with status code and reason, and counted under `kind`.
        """
        s = self.settings
        delay = s.api_write_backoff_seconds
        attempt = 1
        while True:
            try:
                await asyncio.to_thread(call)
                return True
            except KubeError as err:
                if err.status == HTTP_NOT_FOUND or _namespace_terminating(err):
                    log.debug("gang %s: %s: gone meanwhile (%s)", key, what, err.status)
                    return True
                error: Exception = err
                transient = is_transient(err)
            except urllib3.exceptions.HTTPError as err:  # the connection broke mid-request
                error, transient = err, True
            except Exception:
                log.exception("gang %s: %s failed", key, what)
                self.metrics.api_write_errors.labels(kind=kind).inc()
                return False
            if not transient or attempt >= s.api_write_attempts:
                log.warning(
                    "gang %s: %s failed after %d attempt(s): %s",
                    key,
                    what,
                    attempt,
                    api_error_summary(error),
                )
                self.metrics.api_write_errors.labels(kind=kind).inc()
                return False
            attempt += 1
            await asyncio.sleep(delay)
            delay = min(delay * 2, s.api_write_backoff_max_seconds)

    async def _set_planned_nodes(
        self, key: GroupKey, members: Sequence[tuple[str, str | None]]
    ) -> None:
        """Set (node) or clear (None) the planned-node annotation of `members` (ns/name)."""
        timeout = self.settings.api_write_timeout_seconds

        def write(ref: str, node: str | None) -> Callable[[], None]:
            return lambda: set_planned_node(self.raw, *_split(ref), node, timeout=timeout)

        await asyncio.gather(
            *(
                self._write(
                    WRITE_PLANNED_NODE,
                    key,
                    f"{'set' if node else 'clear'} planned node of pod {ref}",
                    write(ref, node),
                )
                for ref, node in members
            )
        )

    async def _carry_out(self, effect: Effect) -> None:
        plan = effect.plan
        self.state.dirty.add(plan.group)
        if isinstance(effect, PlanCreated):
            log.info("gang %s planned: %s", plan.group, sorted(plan.placements.values()))
            await self._set_planned_nodes(
                plan.group, [(plan.names[uid], node) for uid, node in plan.placements.items()]
            )
        elif isinstance(effect, PlanDropped):
            kind = "timeout" if effect.timed_out else "other"
            self.metrics.plans_dropped.labels(reason=kind).inc()
            log.info("gang %s plan dropped: %s", plan.group, effect.reason)
            unbound = [uid for uid in plan.placements if uid not in plan.bound]
            await self._set_planned_nodes(plan.group, [(plan.names[uid], None) for uid in unbound])
            reason = "GangTimeout" if effect.timed_out else "GangWaiting"
            await self._event_on_members(plan.group, reason, effect.reason, "Warning")
        elif isinstance(effect, GangBound):
            self.metrics.gangs_bound.inc()
            members = [self.core.snapshot.pods.get(uid) for uid in plan.placements]
            created = [p.created for p in members if p is not None and p.created]
            start = min(created) if created else None
            if start:
                self.metrics.gang_wait_seconds.observe(max(0.0, time.time() - start))
            log.info("gang %s bound", plan.group)
            placement = ", ".join(
                f"{plan.names[uid].split('/', 1)[1]}->{node}"
                for uid, node in sorted(plan.placements.items(), key=lambda i: plan.names[i[0]])
            )
            await self._event_on_members(
                plan.group, "GangScheduled", f"gang {plan.group} bound: {placement}", "Normal"
            )

    async def _event_on_members(
        self, key: GroupKey, reason: str, message: str, event_type: str
    ) -> None:
        pods = list(self.state.group_pods.get(key, {}).values())
        timeout = self.settings.api_write_timeout_seconds

        def write(meta: dict[str, Any]) -> Callable[[], None]:
            involved = {
                "apiVersion": "v1",
                "kind": "Pod",
                "namespace": meta["namespace"],
                "name": meta["name"],
                "uid": meta.get("uid", ""),
            }
            return lambda: emit_event(
                self.raw,
                involved=involved,
                reason=reason,
                message=message,
                event_type=event_type,
                timeout=timeout,
            )

        await asyncio.gather(
            *(
                self._write(
                    WRITE_EVENT,
                    key,
                    f"Event {reason} on pod {p['metadata']['namespace']}/{p['metadata']['name']}",
                    write(p["metadata"]),
                )
                for p in pods
            )
        )

    def _queue_event(self, key: GroupKey, reason: str, message: str, event_type: str) -> None:
        """An Event on every member, after the group's effects queued so far."""
        self._effects.submit(key, lambda: self._event_on_members(key, reason, message, event_type))

    # ---- the group reconciler ----
    async def _reconcile_loop(self) -> None:
        last_resync = 0.0
        while True:
            await asyncio.sleep(self.settings.reconcile_interval_seconds)
            self.coordinator.tick()
            if self.cache is None or not self.cache.synced():
                continue
            if self.leader is not None and not self.leader.is_leader:
                continue
            now = time.time()
            if now - last_resync > RESYNC_SECONDS:
                self.state.dirty.update(self.core.snapshot.group_keys())
                last_resync = now
            dirty, self.state.dirty = self.state.dirty, set()
            self._update_gauges()
            for key in sorted(dirty):
                try:
                    await self._reconcile_group(key)
                except (KubeError, urllib3.exceptions.HTTPError) as err:
                    if _namespace_terminating(err):
                        continue  # the namespace and everything in it is going away
                    # Status and reason only: an error's text can echo the response body.
                    log.warning("reconcile %s: %s; retrying", key, api_error_summary(err))
                    self.metrics.api_write_errors.labels(kind=WRITE_RECONCILE).inc()
                    self.state.dirty.add(key)
                except (WiringConflictError, MembershipError) as err:
                    # _reconcile_group reports these to the user; this is a safety net.
                    log.warning("reconcile %s: %s", key, err)
                except Exception:
                    log.exception("reconcile %s failed; retrying", key)
                    self.state.dirty.add(key)

    async def _reconcile_group(self, key: GroupKey) -> None:
        spec = self.core.snapshot.group_spec(key)
        pods = list(self.state.group_pods.get(key, {}).values())
        podgroup = self.state.podgroup_object(key)
        if not pods and podgroup is None:
            self._forget_group(key)
            return
        if spec is not None and spec.source == "annotation" and spec.error is None and pods:
            layout = None
            with contextlib.suppress(MembershipError):  # reported by _layout_problem
                layout = task_layout(pods[0]["metadata"])
            await asyncio.to_thread(
                create_podgroup,
                self.raw,
                namespace=key.namespace,
                name=key.name,
                min_member=spec.min_member,
                min_task_member=layout,
            )
        ours = podgroup is not None and podgroup.get("apiVersion", "").startswith(
            "scheduling.gang-extender.io/"
        )
        if ours:
            await self._write_status(key)
        self._announce_waiting(key)
        problems: list[_Problem] = []
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
                    await asyncio.to_thread(
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
        await self._report_problems(key, tuple(problems), write_status=ours)

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

    def _forget_group(self, key: GroupKey) -> None:
        """A group with no pods and no PodGroup left: drop what was remembered about it,
        so the service's memory follows the groups that exist, not all it ever saw."""
        for memo in (self._written_status, self._announced, self._wired, self._problems):
            memo.pop(key, None)

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
                self._queue_event(key, MISCONFIGURED_EVENT, problem.message, "Warning")
        if write_status:
            await self._write_status(key)

    def _status_body(self, key: GroupKey, status: GroupStatus, when: str) -> dict[str, Any]:
        body = status.as_api(when)
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
        self._queue_event(key, "GangWaiting", status.message, event_type)

    def _update_gauges(self) -> None:
        phases: dict[str, int] = defaultdict(int)
        for key in self.core.snapshot.group_keys():
            status = group_status(self.core, key)
            if status is not None:
                phases[status.phase] += 1
        for phase in ("Pending", "Scheduling", "Scheduled", "Running", "Succeeded", "Failed"):
            self.metrics.groups.labels(phase=phase).set(phases.get(phase, 0))
        pools: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        for name, node in self.core.snapshot.nodes.items():
            pool = node.labels.get(POOL_LABEL, "default")
            total = node.allocatable.get(GPU, 0)
            if not total:
                continue
            bound = self.core.snapshot.used(name).get(GPU, 0)
            reserved = self.core.ledger.reserved(name).get(GPU, 0)
            pools[pool]["bound"] += bound
            pools[pool]["reserved"] += reserved
            pools[pool]["free"] += max(0, total - bound - reserved)
        for pool, states in pools.items():
            for state, value in states.items():
                self.metrics.gpus.labels(pool=pool, state=state).set(value)
        for pool in self._gpu_pools - pools.keys():  # its last GPU node is gone
            for state in GPU_STATES:
                with contextlib.suppress(KeyError):
                    self.metrics.gpus.remove(pool, state)
        self._gpu_pools = set(pools)

    # ---- listeners ----
    def tls(self) -> TLSMaterial:
        """The serving cert and key; StartupError when they cannot be read or made."""
        s = self.settings
        if s.tls_cert and s.tls_key:
            try:
                return provided_cert(s.tls_cert, s.tls_key, None)
            except TLSError as err:
                raise StartupError(f"--tls-cert/--tls-key: {err}") from None
            except OSError as err:
                raise StartupError(
                    f"--tls-cert/--tls-key: cannot read {err.filename}: {err.strerror}; "
                    f"give readable PEM files"
                ) from None
        try:
            return ensure_serving_cert(s.tls_dir, list(s.tls_hosts))
        except TLSError as err:
            raise StartupError(f"self-managed TLS in {s.tls_dir}: {err}") from None
        except OSError as err:
            raise StartupError(
                f"self-managed TLS: cannot use {err.filename or s.tls_dir}: {err.strerror}; "
                f"set --tls-dir (GANG_TLS_DIR) to a writable directory"
            ) from None

    def health_app(self) -> FastAPI:
        app = FastAPI(title="gang-extender health", docs_url=None, redoc_url=None)

        @app.get("/healthz")
        async def healthz() -> PlainTextResponse:
            return PlainTextResponse("ok")

        @app.get("/readyz")
        async def readyz() -> PlainTextResponse:
            ok, why = self.ready()
            return PlainTextResponse(why, status_code=200 if ok else 503)

        @app.get("/metrics")
        async def metrics() -> Response:
            return Response(generate_latest(self.metrics.registry), media_type=CONTENT_TYPE_LATEST)

        return app

    def _podgroup_reader(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.state.podgroup_object(GroupKey(namespace, name))

    async def _write_ca_bundle(self, ca_pem: bytes, retry_in: float) -> bool:
        name = self.settings.webhook_config_name
        if not name:
            return True
        try:
            await asyncio.to_thread(write_ca_bundle, self.raw, name, ca_pem)
        except WebhookConfigError as err:  # our own text: says what to apply
            why = str(err)
        except Exception as err:
            why = api_error_summary(err)
        else:
            self._ca_bundle_written = True
            return True
        self.metrics.api_write_errors.labels(kind=WRITE_CA_BUNDLE).inc()
        log.warning(
            "could not write the CA bundle into MutatingWebhookConfiguration %s: %s; "
            "not Ready until it is written, trying again in %.0fs",
            name,
            why,
            retry_in,
        )
        return False

    async def _keep_writing_ca_bundle(self, ca_pem: bytes) -> None:
        """Until the CA bundle is in the webhook configuration (bounded backoff)."""
        delay = self.settings.ca_bundle_retry_min_seconds
        while True:
            await asyncio.sleep(delay)
            delay = min(delay * 2, self.settings.ca_bundle_retry_max_seconds)
            if await self._write_ca_bundle(ca_pem, retry_in=delay):
                log.info("CA bundle written; the webhook can be called")
                return

    async def run(self, tls: TLSMaterial | None = None) -> None:
        loop = asyncio.get_running_loop()
        tls = tls or self.tls()
        if not self.settings.tls_cert:  # one CA for all replicas, published for kube-scheduler
            tls = await asyncio.to_thread(
                share_ca,
                self.raw,
                namespace=self.settings.lease_namespace,
                local=tls,
                hosts=list(self.settings.tls_hosts),
            )
        tasks: list[asyncio.Task[None]] = []
        if not self._ca_bundle_written and not await self._write_ca_bundle(
            tls.ca_pem, retry_in=self.settings.ca_bundle_retry_min_seconds
        ):
            tasks.append(
                asyncio.create_task(self._keep_writing_ca_bundle(tls.ca_pem), name="ca-bundle")
            )
        self.cache = WatchCache(self.raw, self.state, loop, self.metrics)
        self.cache.start()
        if self.leader is not None:
            self.leader.start(loop)
        s = self.settings
        extender_app = create_extender_app(
            port=self.coordinator, metrics=self.metrics, max_request_bytes=s.max_request_bytes
        )
        webhook_app = create_webhook_app(
            admitter=Admitter(self.allocator, podgroup_reader=self._podgroup_reader)
        )
        _time_admission(webhook_app, self.metrics)
        configs = [
            uvicorn.Config(
                extender_app,
                host=s.bind_address,
                port=s.extender_port,
                ssl_certfile=str(tls.cert_path),
                ssl_keyfile=str(tls.key_path),
                log_level="warning",
                access_log=False,
                timeout_graceful_shutdown=s.shutdown_grace_seconds,
                timeout_keep_alive=75,
            ),
            uvicorn.Config(
                webhook_app,
                host=s.bind_address,
                port=s.webhook_port,
                ssl_certfile=str(tls.cert_path),
                ssl_keyfile=str(tls.key_path),
                log_level="warning",
                access_log=False,
                timeout_graceful_shutdown=s.shutdown_grace_seconds,
            ),
            uvicorn.Config(
                self.health_app(),
                host=s.bind_address,
                port=s.metrics_port,
                log_level="warning",
                access_log=False,
                timeout_graceful_shutdown=s.shutdown_grace_seconds,
            ),
        ]
        self._servers = [_QuietServer(c) for c in configs]
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.shutdown)
        tasks.append(asyncio.create_task(self._reconcile_loop(), name="reconcile"))
        log.info(
            "serving extender :%d, webhook :%d, metrics :%d (policy %s)",
            s.extender_port,
            s.webhook_port,
            s.metrics_port,
            self.policy.name,
        )
        try:
            await asyncio.gather(*(server.serve() for server in self._servers))
        finally:
            for task in tasks:
                task.cancel()
            self._effects.cancel()
            self.cache.stop()
            if self.leader is not None:
                self.leader.stop()
            self.binder.close()

    def shutdown(self) -> None:
        for server in self._servers:
            server.should_exit = True


def _time_admission(app: FastAPI, metrics: Metrics) -> None:
    """Admission latency and errors as verb "admit" (the webhook app itself knows no metrics)."""

    @app.middleware("http")
    async def timed(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        started = time.perf_counter()
        try:
            response = await call_next(request)
        except Exception:
            metrics.extender_errors.labels(verb="admit").inc()
            raise
        finally:
            metrics.request_seconds.labels(verb="admit").observe(time.perf_counter() - started)
        if response.status_code >= 400:
            metrics.extender_errors.labels(verb="admit").inc()
        return response


class _QuietServer(uvicorn.Server):
    """Signals are handled once for all three servers by GangService."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def _api_client(settings: Settings) -> Any:
    """The API client from settings.kubeconfig (else in-cluster); StartupError if unusable."""
    path = settings.kubeconfig
    hint = "give a readable kubeconfig with --kubeconfig (or GANG_KUBECONFIG)"
    if path is not None:
        if not path.is_file():
            raise StartupError(f"kubeconfig {path} does not exist or is not a file; {hint}")
        try:
            path.read_bytes()
        except OSError as err:
            raise StartupError(
                f"kubeconfig {path} cannot be read ({err.strerror}); {hint}"
            ) from None
    try:
        return load_api_client(str(path) if path is not None else None)
    except Exception as err:
        # Only the library's own messages are quoted: a YAML error would quote the
        # file's text, which may hold a token.
        why = str(err) if isinstance(err, KubeconfigError) else type(err).__name__
        if path is None:
            raise StartupError(
                f"no kubeconfig given and no in-cluster configuration ({why}); {hint}"
            ) from None
        raise StartupError(f"kubeconfig {path} is not usable ({why}); {hint}") from None


def serve(settings: Settings) -> None:
    """Run until SIGTERM; StartupError (before anything listens) on bad configuration."""
    logging.basicConfig(
        level=settings.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    service = GangService(settings)
    try:
        tls = service.tls()
    except StartupError:
        service.binder.close()
        raise
    # uvloop: a libuv event loop, several times cheaper per request than asyncio's own;
    # with httptools (picked by uvicorn's http="auto") it is most of an extender call.
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(service.run(tls))
