"""`gang-extender serve`: the composition root. One process, three listeners, one event loop.

`create_service` builds the pieces from `Settings` and what the service talks to
(`Deps`: the RawApi, optionally fakes): the core, the
coordinator, the cluster state the watch cache feeds, the effect writer, the
group reconciler, the webhook's index allocator, leader election and the CA
bundle. `GangService.run` then serves the extender (HTTPS), the webhook (HTTPS)
and metrics/health (HTTP) until SIGTERM. What each piece does is in its own
module: `controller/` (state, writes, reconciler, gauges), `bootstrap`
(start-up inputs, CA bundle, readiness), `api/health`.

Each call whose signature is shared with other modules (the coordinator, the
binder, the wiring controller, the index allocator, the CA-bundle write, the
shared CA, the webhook app) is made in exactly one place here.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import uvicorn
import uvloop

from extender.admitter import Admitter
from extender.api.extender import create_extender_app
from extender.api.health import create_health_app, time_admission
from extender.api.webhook import create_webhook_app
from extender.bootstrap import (
    CaBundle,
    StartupError,
    api_client_from,
    policy_from,
    readiness,
    serving_tls,
)
from extender.config import Settings
from extender.controller.cluster_state import ClusterState
from extender.controller.effects import EffectWriter, GroupQueues
from extender.controller.failover import Failover, LeaderOnlyBinder
from extender.controller.gauges import Gauges
from extender.controller.reconciler import GroupReconciler, Wiring
from extender.coordinator import SchedulingCoordinator
from extender.domain.gang import GangCore, Timeouts
from extender.domain.membership import GroupKey
from extender.domain.policy import Policy
from extender.kube.ca_publish import share_ca
from extender.kube.cache import CacheTuning, WatchCache
from extender.kube.indexes import IndexAllocator
from extender.kube.leader import LeaderElector
from extender.kube.rawapi import RawApi
from extender.kube.webhook_config import write_ca_bundle
from extender.kube.wiring import WiringController
from extender.kube.writers import ApiBinder
from extender.metrics import Metrics
from extender.tls import TLSMaterial

__all__ = ["Deps", "GangService", "StartupError", "create_service", "production_deps", "serve"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Deps:
    """What the service talks to. `production_deps` builds it from settings; tests pass fakes.

    Every API call goes through `raw`; a field left None is built on it.
    """

    raw: RawApi
    binder: ApiBinder | None = None
    wiring: Wiring | None = None
    # (MutatingWebhookConfiguration name, CA PEM) -> None, blocking
    write_ca_bundle: Callable[[str, bytes], None] | None = None


def production_deps(settings: Settings) -> Deps:
    """The API client from the kubeconfig (or in-cluster); StartupError if unusable."""
    return Deps(raw=RawApi(api_client_from(settings)))


@dataclass(eq=False)
class GangService:
    """The wired service. Built by `create_service`; `run` serves until `shutdown`."""

    settings: Settings
    deps: Deps
    metrics: Metrics
    policy: Policy
    core: GangCore
    binder: ApiBinder
    coordinator: SchedulingCoordinator
    state: ClusterState
    queues: GroupQueues
    writer: EffectWriter
    gauges: Gauges
    reconciler: GroupReconciler
    allocator: IndexAllocator
    leader: LeaderElector | None
    failover: Failover
    ca_bundle: CaBundle
    cache: WatchCache | None = None
    _servers: list[uvicorn.Server] = field(default_factory=list)

    def ready(self) -> tuple[bool, str]:
        ok, why = readiness(
            caches_synced=self.cache is not None and self.cache.synced(),
            ca_bundle=self.ca_bundle,
            leader=self.leader,
        )
        # One writer: Ready only once the previous leader's plans are reserved here.
        return self.failover.ready() if ok else (ok, why)

    def tls(self) -> TLSMaterial:
        """The serving cert and key; StartupError when they cannot be read or made."""
        return serving_tls(self.settings)

    def _podgroup_reader(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.state.podgroup_object(GroupKey(namespace, name))

    async def run(self, tls: TLSMaterial | None = None) -> None:
        loop = asyncio.get_running_loop()
        tls = tls or self.tls()
        if not self.settings.tls_cert:  # one CA for all replicas, published for kube-scheduler
            tls = await asyncio.to_thread(
                share_ca,
                self.deps.raw,
                namespace=self.settings.lease_namespace,
                local=tls,
                hosts=list(self.settings.tls_hosts),
            )
        tasks: list[asyncio.Task[None]] = []
        if not self.ca_bundle.written and not await self.ca_bundle.write(
            tls.ca_pem, retry_in=self.settings.ca_bundle_retry_min_seconds
        ):
            tasks.append(
                asyncio.create_task(self.ca_bundle.keep_writing(tls.ca_pem), name="ca-bundle")
            )
        cache = self.cache = WatchCache(
            self.deps.raw,
            self.state,
            loop,
            self.metrics,
            tuning=CacheTuning.from_settings(self.settings),
        )
        cache.start()
        self.failover.synced = cache.synced
        tasks.append(
            asyncio.create_task(
                self.failover.run(self.settings.failover_check_seconds), name="failover"
            )
        )
        if self.leader is not None:
            self.leader.start(loop)
        s = self.settings
        extender_app = create_extender_app(
            port=self.coordinator,
            metrics=self.metrics,
            max_request_bytes=s.max_request_bytes,
            acting=self.failover.acting,
        )
        webhook_app = create_webhook_app(
            admitter=Admitter(self.allocator, podgroup_reader=self._podgroup_reader)
        )
        time_admission(webhook_app, self.metrics)
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
                timeout_keep_alive=s.extender_keep_alive_seconds,
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
                create_health_app(self.ready, self.metrics),
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
        tasks.append(asyncio.create_task(self.reconciler.run(cache.synced), name="reconcile"))
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
            self.queues.cancel()
            cache.stop()
            if self.leader is not None:
                self.leader.stop()
            self.binder.close()

    def shutdown(self) -> None:
        for server in self._servers:
            server.should_exit = True


def create_service(settings: Settings, deps: Deps | None = None) -> GangService:
    """The service wired from `settings`; `deps` None: the real API client (production_deps).

    StartupError on a bad policy (checked first) or an unusable kubeconfig.
    """
    metrics = Metrics()
    policy = policy_from(settings)
    if deps is None:
        deps = production_deps(settings)
    core = GangCore(
        policy=policy,
        timeouts=Timeouts(
            schedule_timeout_seconds=settings.default_schedule_timeout_seconds,
            bind_barrier_timeout_seconds=settings.bind_barrier_timeout_seconds,
            replan_backoff_seconds=settings.replan_backoff_seconds,
        ),
    )
    binder = (
        deps.binder
        if deps.binder is not None
        else ApiBinder(
            deps.raw,
            workers=settings.binder_workers,
            timeout_seconds=settings.binding_timeout_seconds,
        )
    )
    # The state flushes the core's effects through the coordinator, whose sink is
    # the writer, which reads the state: the coordinator is looked up when the
    # first cache traffic arrives (in run), by which time it exists.
    leader = (
        LeaderElector(
            deps.raw,
            namespace=settings.lease_namespace,
            name=settings.lease_name,
            lease_seconds=settings.lease_duration_seconds,
            renew_seconds=settings.lease_renew_seconds,
            metrics=metrics,
        )
        if settings.leader_elect
        else None
    )
    # One writer: every verb, binding call and queued write asks failover.acting().
    failover = Failover(core, leader, metrics, flush_effects=lambda: coordinator.flush_effects())
    if leader is not None:
        leader.on_change = failover.on_leadership
    state = ClusterState(core, flush_effects=lambda: coordinator.flush_effects(), metrics=metrics)
    queues = GroupQueues(settings.effect_concurrency)
    writer = EffectWriter(
        settings,
        raw=deps.raw,
        metrics=metrics,
        core=core,
        state=state,
        queues=queues,
        acting=failover.acting,
    )
    coordinator = SchedulingCoordinator(
        core,
        LeaderOnlyBinder(binder, failover.acting, metrics),
        metrics,
        effect_sink=writer.queue_effects,
    )
    wiring = deps.wiring if deps.wiring is not None else WiringController(deps.raw)
    allocator = IndexAllocator(
        deps.raw,
        hold_seconds=settings.index_hold_seconds,
        list_timeout_seconds=settings.index_list_timeout_seconds,
    )
    gauges = Gauges(core, metrics)
    reconciler = GroupReconciler(
        settings,
        raw=deps.raw,
        metrics=metrics,
        core=core,
        state=state,
        writer=writer,
        wiring=wiring,
        gauges=gauges,
        tick=coordinator.tick,
        acting=failover.acting,
    )
    write = (
        deps.write_ca_bundle
        if deps.write_ca_bundle is not None
        else functools.partial(write_ca_bundle, deps.raw)
    )
    ca_bundle = CaBundle(settings, metrics, write)
    return GangService(
        settings=settings,
        deps=deps,
        metrics=metrics,
        policy=policy,
        core=core,
        binder=binder,
        coordinator=coordinator,
        state=state,
        queues=queues,
        writer=writer,
        gauges=gauges,
        reconciler=reconciler,
        allocator=allocator,
        leader=leader,
        failover=failover,
        ca_bundle=ca_bundle,
    )


class _QuietServer(uvicorn.Server):
    """Signals are handled once for all three servers by GangService."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def serve(settings: Settings) -> None:
    """Run until SIGTERM; StartupError (before anything listens) on bad configuration."""
    logging.basicConfig(
        level=settings.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    service = create_service(settings)
    try:
        tls = service.tls()
    except StartupError:
        service.binder.close()
        raise
    # uvloop: a libuv event loop, several times cheaper per request than asyncio's own;
    # with httptools (picked by uvicorn's http="auto") it is most of an extender call.
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(service.run(tls))
