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
import logging
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import uvicorn
import uvloop

from extender.admitter import Admitter
from extender.api.extender import create_extender_app
from extender.api.health import create_health_app, time_admission
from extender.api.webhook import create_webhook_app
from extender.api.webhook_path import behind_secret_path, mutate_path
from extender.bootstrap import (
    CaBundle,
    StartupError,
    api_client_from,
    extender_client_ca,
    policy_from,
    readiness,
    serving_tls,
    use_api_threads,
    webhook_client_ca,
)
from extender.config import Settings
from extender.controller.cluster_state import ClusterState
from extender.controller.effects import EffectWriter, GroupQueues
from extender.controller.failover import Failover, LeaderOnlyBinder
from extender.controller.gauges import Gauges
from extender.controller.lifecycle import LifecycleController
from extender.controller.reconciler import GroupReconciler, Wiring
from extender.coordinator import SchedulingCoordinator
from extender.domain.cluster.snapshot import ClusterSnapshot
from extender.domain.gang.gang import GangCore, Timeouts
from extender.domain.objects.membership import GroupKey
from extender.domain.objects.policy import Policy
from extender.domain.state.decisions import Effect
from extender.kube.ca_publish import (
    CAShareError,
    publish_client_cert,
    share_ca,
    shared_webhook_token,
)
from extender.kube.cache import CacheTuning, WatchCache
from extender.kube.indexes import IndexAllocator
from extender.kube.leader import LeaderElector
from extender.kube.ownership import OwnershipSeal
from extender.kube.rawapi import KubeError, RawApi
from extender.kube.webhook_config import write_client_config
from extender.kube.wiring import WiringController
from extender.kube.writers import ApiBinder
from extender.listeners import EXTENDER, QuietServer, listeners, server_configs
from extender.metrics import Metrics
from extender.tls import SCHEDULER_CLIENT_NAME, TLSMaterial

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


@dataclass
class WebhookPath:
    """The path the webhook is served at, once known (written into its configuration)."""

    path: str | None = None


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
    # /mutate/<token>, once run() has read the shared token; None: plain /mutate.
    webhook_path: WebhookPath = field(default_factory=WebhookPath)
    # The key of the seals on what the service creates (kube/ownership.py): from the
    # same token, set by run() before the watches start.
    seal: OwnershipSeal = field(default_factory=OwnershipSeal)
    _servers: list[uvicorn.Server] = field(default_factory=list)

    def update_gauges(self) -> None:
        """Before each /metrics scrape: groups per phase and GPUs per pool, drawn from
        the core. Why at scrape time: it is O(groups + nodes), and on a timer it was
        most of an idle service's CPU with 1,000 held gangs (docs/benchmarks.md); a
        scrape comes every 15-60 s. Only the acting leader with a synced cache
        answers (a follower's core holds no plans: its gauges keep their last value)."""
        if self.cache is not None and self.cache.synced() and self.failover.acting():
            self.gauges.update()

    def ready(self) -> tuple[bool, str]:
        ok, why = readiness(
            caches_synced=self.cache is not None and self.cache.synced(),
            ca_bundle=self.ca_bundle,
            leader=self.leader,
        )
        # One writer: Ready only once the previous leader's plans are reserved here.
        return self.failover.ready() if ok else (ok, why)

    @property
    def schedules(self) -> bool:
        """False in wiring-only mode: no extender verbs, another scheduler places groups."""
        return EXTENDER in listeners(self.settings)

    def tls(self) -> TLSMaterial:
        """The serving cert and key; StartupError when they cannot be read or made."""
        return serving_tls(self.settings)

    def _podgroup_reader(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.state.podgroup_object(GroupKey(namespace, name))

    async def run(self, tls: TLSMaterial | None = None) -> None:
        loop = asyncio.get_running_loop()
        use_api_threads(loop, self.settings)
        tls = tls or self.tls()
        if not self.settings.tls_cert:  # one CA for all replicas, published for kube-scheduler
            tls = await asyncio.to_thread(
                share_ca,
                self.deps.raw,
                namespace=self.settings.lease_namespace,
                local=tls,
                hosts=list(self.settings.tls_hosts),
            )
            if self.settings.scheduler_client_secret and self.schedules:
                await asyncio.to_thread(self._issue_scheduler_client_cert, tls)
        token = await asyncio.to_thread(self._webhook_token)
        if token is not None:
            self.webhook_path.path = mutate_path(token)
            self.seal.use_token(token)
        # Wiring-only: no extender listener, so no client CA is needed for one.
        opened = listeners(self.settings)
        client_ca = extender_client_ca(self.settings, tls) if EXTENDER in opened else None
        hook_client_ca = webhook_client_ca(self.settings)
        tasks: list[asyncio.Task[None]] = []
        if not self.ca_bundle.written and not await self.ca_bundle.write(
            tls.ca_pem, retry_in=self.settings.ca_bundle_retry_min_seconds
        ):
            tasks.append(
                asyncio.create_task(self.ca_bundle.keep_writing(tls.ca_pem), name="ca-bundle")
            )
        # Pods also feed the webhook's task-index book, which answers once the pod
        # watch is caught up (listing per create until then: kube/indexes.py).
        cache = self.cache = WatchCache(
            self.deps.raw,
            self.allocator.feed(self.state),
            loop,
            self.metrics,
            tuning=CacheTuning.from_settings(self.settings),
            # Recover (and so become Ready) as soon as the lists are in, not at the
            # failover loop's next round (up to failover_check_seconds later).
            on_synced=self.failover.step,
        )
        self.allocator.answer_from_watch(lambda: cache.watching("pods"))
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
            admitter=Admitter(
                self.allocator,
                podgroup_reader=self._podgroup_reader,
                route_gpu_pods=s.route_gpu_pods,
                admission_gate=s.admission_gate,
                accelerators=s.accelerators,
            )
        )
        time_admission(webhook_app, self.metrics)
        webhook_asgi: Any = webhook_app if token is None else behind_secret_path(webhook_app, token)
        configs = server_configs(
            s,
            tls,
            extender_app=extender_app,
            webhook_app=webhook_asgi,
            health_app=create_health_app(self.ready, self.metrics, self.update_gauges),
            client_ca=client_ca,
            hook_client_ca=hook_client_ca,
        )
        self._servers = [QuietServer(c) for c in configs]
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.shutdown)
        loop.add_signal_handler(signal.SIGUSR2, log_task_stacks)
        tasks.append(asyncio.create_task(self.reconciler.run(cache.synced), name="reconcile"))
        if self.schedules:
            log.info(
                "serving extender :%d, webhook :%d, metrics :%d (policy %s)",
                s.extender_port,
                s.webhook_port,
                s.metrics_port,
                self.policy.name,
            )
        else:
            log.info(
                "wiring-only mode: serving webhook :%d, metrics :%d; no extender listener "
                "(another scheduler places the groups)",
                s.webhook_port,
                s.metrics_port,
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

    def _webhook_token(self) -> str | None:
        """The webhook's secret path token shared by every replica; None when not used."""
        s = self.settings
        if not s.webhook_path_secret:
            return None
        try:
            return shared_webhook_token(
                self.deps.raw, namespace=s.lease_namespace, secret_name=s.webhook_path_secret
            )
        except (KubeError, CAShareError) as err:
            raise StartupError(
                f"cannot read or store the webhook path token in Secret "
                f"{s.lease_namespace}/{s.webhook_path_secret} ({err}); check the API server "
                f"and the service's RBAC on Secrets in {s.lease_namespace}"
            ) from None

    def _issue_scheduler_client_cert(self, tls: TLSMaterial) -> None:
        """kube-scheduler's client certificate under the shared CA, in its Secret.

        A failure is logged, not fatal: the serving side works, and a scheduler that
        already has a certificate keeps using it; the next start tries again.
        """
        s = self.settings
        assert s.scheduler_client_secret is not None
        try:
            publish_client_cert(
                self.deps.raw,
                namespace=s.lease_namespace,
                secret_name=s.scheduler_client_secret,
                material=tls,
                common_name=SCHEDULER_CLIENT_NAME,
            )
        except (KubeError, CAShareError) as err:
            log.warning(
                "could not issue kube-scheduler's client certificate into Secret %s/%s: %s",
                s.lease_namespace,
                s.scheduler_client_secret,
                err,
            )

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
            starvation_seconds=settings.default_starvation_seconds,
            reservation_max_seconds=settings.reservation_max_seconds,
            preemption_hold_seconds=settings.preemption_hold_seconds,
            preemption_forbidden_seconds=settings.preemption_forbidden_seconds,
        ),
        preemption_enabled=settings.preemption,
        placeholders=settings.reservation_placeholders,
        fences=settings.reservation_taints,
        snapshot=ClusterSnapshot(settings.accelerators),
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
    binder = (
        deps.binder
        if deps.binder is not None
        else ApiBinder(
            deps.raw,
            workers=settings.binder_workers,
            timeout_seconds=settings.binding_timeout_seconds,
            retry_backoff_seconds=settings.binding_retry_backoff_seconds,
            on_retry=metrics.bind_retries.inc,
            # Each retry asks again: a replica deposed meanwhile stops binding.
            acting=failover.acting,
            on_not_acting=metrics.not_leader_refusals.labels(what="bind").inc,
        )
    )
    seal = OwnershipSeal()
    state = ClusterState(
        core,
        flush_effects=lambda: coordinator.flush_effects(),
        metrics=metrics,
        on_member_deleted=lambda key, obj: lifecycle.pod_gone(key, obj),
        seal=seal,
    )
    queues = GroupQueues(settings.effect_concurrency)
    writer = EffectWriter(
        settings,
        raw=deps.raw,
        metrics=metrics,
        core=core,
        state=state,
        queues=queues,
        acting=failover.acting,
        seal=seal,
    )
    lifecycle = LifecycleController(
        settings, raw=deps.raw, metrics=metrics, state=state, writer=writer
    )

    def effect_sink(effects: list[Effect]) -> None:
        lifecycle.see_effects(effects)  # GangBroken feeds the lifecycle policy
        writer.queue_effects(effects)

    coordinator = SchedulingCoordinator(
        core,
        LeaderOnlyBinder(binder, failover.acting, metrics),
        metrics,
        effect_sink=effect_sink,
        namespace_deleted=state.terminating,
    )
    wiring = (
        deps.wiring
        if deps.wiring is not None
        else WiringController(deps.raw, seal=seal, accelerators=settings.accelerators)
    )
    allocator = IndexAllocator(
        deps.raw,
        hold_seconds=settings.index_hold_seconds,
        list_timeout_seconds=settings.index_list_timeout_seconds,
        on_read=lambda source: metrics.index_reads.labels(source=source).inc(),
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
        tick=coordinator.tick,
        acting=failover.acting,
        schedules=EXTENDER in listeners(settings),
        lifecycle=lifecycle,
    )
    webhook_path = WebhookPath()

    def write_config(name: str, ca_pem: bytes) -> None:
        # The caBundle only for our own CA (cert-manager injects a provided one's).
        write_client_config(
            deps.raw,
            name,
            ca_pem=None if settings.tls_cert else ca_pem,
            mutate_path=webhook_path.path,
        )

    write = deps.write_ca_bundle if deps.write_ca_bundle is not None else write_config
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
        webhook_path=webhook_path,
        seal=seal,
    )


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


def log_task_stacks() -> None:
    """SIGUSR2: every asyncio task and where it waits, in the log (where a stuck loop is)."""
    for task in asyncio.all_tasks():
        frames = task.get_stack(limit=12)
        where = " <- ".join(f"{f.f_code.co_name}:{f.f_lineno}" for f in reversed(frames))
        log.warning("task %s: %s", task.get_name(), where or "(no frames)")
