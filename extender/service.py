"""`gang-extender serve`: one process, three listeners, one event loop.

Composition root: builds the core, the watch cache, the coordinator, the
webhook and the group reconciler from `Settings`, then serves the extender
(HTTPS), the webhook (HTTPS) and metrics/health (HTTP) until SIGTERM.

The group reconciler turns core state into API objects: PodGroup status and
auto-created PodGroups, Events (GangWaiting, GangScheduled, GangTimeout), plan
annotations, and (through the wiring controller) each group's Secret, Service
and ConfigMap.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import PlainTextResponse, Response
from kubernetes.client.exceptions import ApiException
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

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
from extender.domain.policy import load_policy
from extender.domain.quantity import GPU
from extender.domain.status import group_status
from extender.kube.ca_publish import share_ca
from extender.kube.cache import CacheSink, WatchCache
from extender.kube.indexes import IndexAllocator
from extender.kube.leader import LeaderElector
from extender.kube.rawapi import KubeError, RawApi, load_api_client
from extender.kube.webhook_config import write_ca_bundle
from extender.kube.wiring import WiringConflictError, WiringController
from extender.kube.writers import (
    ApiBinder,
    create_podgroup,
    emit_event,
    set_planned_node,
    write_podgroup_status,
)
from extender.metrics import Metrics
from extender.tls import TLSMaterial, ensure_serving_cert, provided_cert

log = logging.getLogger(__name__)

POOL_LABEL = "gang-extender.io/pool"
# Re-check every group this often even without events (status drift, failed writes).
RESYNC_SECONDS = 30.0
EFFECT_WORKERS = 8


def _namespace_terminating(err: Exception) -> bool:
    status = getattr(err, "status", None)
    text = str(getattr(err, "message", "") or getattr(err, "body", "") or err)
    return status == 403 and "being terminated" in text


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
        self.policy = load_policy(settings.policy)
        self.api_client = load_api_client(str(settings.kubeconfig) if settings.kubeconfig else None)
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
        self.wiring = WiringController(self.api_client)
        self.allocator = IndexAllocator(self.api_client)
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
        self._effects: asyncio.Queue[Effect] = asyncio.Queue()
        self._written_status: dict[GroupKey, dict[str, Any]] = {}
        self._announced: dict[GroupKey, str] = {}
        self._wired: dict[GroupKey, str] = {}
        self._first_created: dict[GroupKey, float] = {}
        self.cache: WatchCache | None = None
        self._servers: list[uvicorn.Server] = []

    # ---- readiness ----
    def ready(self) -> tuple[bool, str]:
        if self.cache is None or not self.cache.synced():
            return False, "caches not synced"
        if self.leader is not None and not self.leader.is_leader:
            return False, "not the leader"
        return True, "ok"

    # ---- effects: API writes the core asked for ----
    def _queue_effects(self, effects: list[Effect]) -> None:
        for effect in effects:
            self._effects.put_nowait(effect)

    async def _effect_worker(self) -> None:
        while True:
            effect = await self._effects.get()
            try:
                await self._carry_out(effect)
            except KubeError as err:
                log.warning("could not write effect %s: %s", type(effect).__name__, err)
            except Exception:
                log.exception("effect %s failed", type(effect).__name__)

    async def _carry_out(self, effect: Effect) -> None:
        plan = effect.plan
        self.state.dirty.add(plan.group)
        if isinstance(effect, PlanCreated):
            log.info("gang %s planned: %s", plan.group, sorted(plan.placements.values()))
            await asyncio.gather(
                *(
                    asyncio.to_thread(set_planned_node, self.raw, *_split(plan.names[uid]), node)
                    for uid, node in plan.placements.items()
                ),
                return_exceptions=True,
            )
        elif isinstance(effect, PlanDropped):
            kind = "timeout" if effect.timed_out else "other"
            self.metrics.plans_dropped.labels(reason=kind).inc()
            log.info("gang %s plan dropped: %s", plan.group, effect.reason)
            unbound = [uid for uid in plan.placements if uid not in plan.bound]
            await asyncio.gather(
                *(
                    asyncio.to_thread(set_planned_node, self.raw, *_split(plan.names[uid]), None)
                    for uid in unbound
                ),
                return_exceptions=True,
            )
            reason = "GangTimeout" if effect.timed_out else "GangWaiting"
            await self._event_on_members(plan.group, reason, effect.reason, "Warning")
        elif isinstance(effect, GangBound):
            self.metrics.gangs_bound.inc()
            first = self._first_created.get(plan.group)
            members = [self.core.snapshot.pods.get(uid) for uid in plan.placements]
            created = [p.created for p in members if p is not None and p.created]
            start = min(created) if created else first
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
        await asyncio.gather(
            *(
                asyncio.to_thread(
                    emit_event,
                    self.raw,
                    involved={
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "namespace": p["metadata"]["namespace"],
                        "name": p["metadata"]["name"],
                        "uid": p["metadata"].get("uid", ""),
                    },
                    reason=reason,
                    message=message,
                    event_type=event_type,
                )
                for p in pods
            ),
            return_exceptions=True,
        )

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
                except (KubeError, ApiException) as err:
                    if _namespace_terminating(err):
                        continue  # the namespace and everything in it is going away
                    log.warning("reconcile %s: %s; retrying", key, err)
                    self.state.dirty.add(key)
                except (WiringConflictError, MembershipError) as err:
                    # A user's object or spec is in the way: say so; retry on the next change.
                    log.warning("reconcile %s: %s", key, err)
                except Exception:
                    log.exception("reconcile %s failed; retrying", key)
                    self.state.dirty.add(key)

    async def _reconcile_group(self, key: GroupKey) -> None:
        spec = self.core.snapshot.group_spec(key)
        pods = list(self.state.group_pods.get(key, {}).values())
        podgroup = self.state.podgroup_object(key)
        if spec is not None and spec.source == "annotation" and spec.error is None and pods:
            layout = None
            with contextlib.suppress(ValueError):
                layout = task_layout(pods[0]["metadata"])
            await asyncio.to_thread(
                create_podgroup,
                self.raw,
                namespace=key.namespace,
                name=key.name,
                min_member=spec.min_member,
                min_task_member=layout,
            )
        if podgroup is not None and podgroup.get("apiVersion", "").startswith(
            "scheduling.gang-extender.io/"
        ):
            await self._write_status(key)
        await self._announce_waiting(key)
        if self.state.injected(key.namespace) and podgroup is not None and pods:
            fingerprint = repr(
                (
                    podgroup["metadata"].get("resourceVersion"),
                    sorted(p["metadata"].get("resourceVersion", "") for p in pods),
                )
            )
            if self._wired.get(key) != fingerprint:
                await asyncio.to_thread(
                    self.wiring.reconcile,
                    namespace=key.namespace,
                    group=key.name,
                    podgroup=podgroup,
                    pods=pods,
                )
                self._wired[key] = fingerprint

    async def _write_status(self, key: GroupKey) -> None:
        status = group_status(self.core, key)
        if status is None:
            return
        previous = self._written_status.get(key)
        comparable = status.as_api("")
        if previous == comparable:
            return
        await asyncio.to_thread(
            write_podgroup_status, self.raw, key.namespace, key.name, status.as_api(_utc_now())
        )
        self._written_status[key] = comparable

    async def _announce_waiting(self, key: GroupKey) -> None:
        """One GangWaiting Event per member each time the waiting reason changes."""
        status = group_status(self.core, key)
        if status is None or status.phase not in ("Pending",):
            return
        if self._announced.get(key) == status.message:
            return
        self._announced[key] = status.message
        event_type = "Warning" if status.reason == "InvalidSpec" else "Normal"
        await self._event_on_members(key, "GangWaiting", status.message, event_type)

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

    # ---- listeners ----
    def tls(self) -> TLSMaterial:
        s = self.settings
        if s.tls_cert and s.tls_key:
            return provided_cert(s.tls_cert, s.tls_key, None)
        return ensure_serving_cert(s.tls_dir, list(s.tls_hosts))

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

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        tls = self.tls()
        if not self.settings.tls_cert:  # one CA for all replicas, published for kube-scheduler
            tls = await asyncio.to_thread(
                share_ca,
                self.api_client,
                namespace=self.settings.lease_namespace,
                local=tls,
                hosts=list(self.settings.tls_hosts),
            )
        if self.settings.webhook_config_name and not self.settings.tls_cert:
            try:
                await asyncio.to_thread(
                    write_ca_bundle, self.api_client, self.settings.webhook_config_name, tls.ca_pem
                )
            except Exception as err:
                log.warning(
                    "could not write the CA bundle into MutatingWebhookConfiguration %s: %s",
                    self.settings.webhook_config_name,
                    err,
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
            allocator=self.allocator, podgroup_reader=self._podgroup_reader
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
            ),
            uvicorn.Config(
                self.health_app(),
                host=s.bind_address,
                port=s.metrics_port,
                log_level="warning",
                access_log=False,
            ),
        ]
        self._servers = [_QuietServer(c) for c in configs]
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.shutdown)
        tasks = [asyncio.create_task(self._reconcile_loop(), name="reconcile")]
        tasks += [
            asyncio.create_task(self._effect_worker(), name=f"effects-{i}")
            for i in range(EFFECT_WORKERS)
        ]
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


def serve(settings: Settings) -> None:
    logging.basicConfig(
        level=settings.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    service = GangService(settings)
    asyncio.run(service.run())
