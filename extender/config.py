"""Service settings: every tuning constant lives here, with its reason.

Read from `GANG_*` environment variables and overridden by `gang-extender serve`
flags (see `extender.cli`). Documented in docs/deploy.md (configuration reference).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from extender.domain.objects.accelerators import (
    DEFAULT_ACCELERATOR_PATTERNS,
    AcceleratorPatternError,
    Accelerators,
)

MAX_PORT = 65535
WIRING_ONLY = "wiring-only"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="GANG_", extra="forbid")

    kubeconfig: Path | None = Field(
        default=None, description="kubeconfig file; in-cluster config when unset"
    )
    bind_address: str = Field(default="0.0.0.0", description="address all listeners bind")
    extender_port: int = Field(
        default=8443, ge=0, le=MAX_PORT, description="HTTPS scheduler-extender port"
    )
    webhook_port: int = Field(
        default=9443, ge=0, le=MAX_PORT, description="HTTPS admission-webhook port"
    )
    metrics_port: int = Field(
        default=8080, ge=0, le=MAX_PORT, description="HTTP /metrics, /healthz, /readyz port"
    )

    tls_cert: Path | None = Field(default=None, description="serving cert (PEM); with tls_key")
    tls_key: Path | None = Field(default=None, description="serving key (PEM); with tls_cert")
    tls_dir: Path = Field(
        default=Path("/tmp/gang-extender-tls"),
        description="where the self-managed CA and serving cert are kept when no cert is given",
    )
    tls_hosts: list[str] = Field(
        default_factory=lambda: [
            "localhost",
            "127.0.0.1",
            "gang-extender.gang-system.svc",
            "gang-extender.gang-system.svc.cluster.local",
        ],
        description="DNS names / IPs the self-managed serving cert is valid for",
    )
    webhook_config_name: str | None = Field(
        default="gang-extender",
        description="MutatingWebhookConfiguration whose caBundle the service keeps current "
        "when it manages its own CA; None to leave it alone",
    )
    # Mutual TLS on the extender listener (docs/deploy.md#trust): /filter, /prioritize
    # and /bind answer only a client whose certificate chains to this CA bundle and,
    # unless extender_client_names is empty, names one of them (CN or DNS SAN). Anyone
    # else is refused in the TLS handshake. Unset: the self-managed CA, which issues
    # kube-scheduler's certificate itself; with a provided tls_cert it must be given.
    extender_client_ca: Path | None = Field(default=None)
    extender_client_names: list[str] = Field(default_factory=lambda: ["gang-scheduler"])
    # With the self-managed CA: the Secret (in lease_namespace) the service issues
    # kube-scheduler's client certificate into; deploy/scheduler mounts it. None: issue none.
    scheduler_client_secret: str | None = Field(default="gang-extender-scheduler-client")
    # The webhook answers only at /mutate/<secret>: a random token kept in this Secret (in
    # lease_namespace, shared by every replica) and written by the service into the
    # MutatingWebhookConfiguration's path, so only the API server (and whoever may read
    # that configuration) can make the webhook hold task indexes. None: plain /mutate.
    webhook_path_secret: str | None = Field(default="gang-extender-webhook-path")
    # Optional mutual TLS on the webhook listener, for API servers configured to present
    # a client certificate to webhooks (an AdmissionConfiguration kubeConfigFile): unset,
    # any TLS client may call /mutate (docs/deploy.md#trust says what that allows).
    webhook_client_ca: Path | None = Field(default=None)
    webhook_client_names: list[str] = Field(default_factory=list)

    policy: Path | None = Field(
        default=None, description="placement policy file; built-in binpack when unset"
    )

    # Bind barrier: kube-scheduler's extender httpTimeout must exceed this, or the
    # scheduler gives up on a bind we would still complete.
    bind_barrier_timeout_seconds: float = Field(default=30.0, gt=0)
    # The binding request (POST pods/binding) a released member then makes gives up
    # after this long: with the barrier's 30 s a bind still answers inside the
    # scheduler's 45 s extender httpTimeout, as an error it retries, not a timeout.
    binding_timeout_seconds: float = Field(default=10.0, gt=0)
    # Binding requests in flight at once, each a blocking call on its own thread: a
    # released gang's members bind in parallel; a bigger gang binds in waves.
    binder_workers: int = Field(default=32, ge=1)
    # A binding that failed transiently (no answer, 408, 429, 5xx) or with a 409 is
    # read back and, still unbound, posted again after this wait (doubling), all
    # within binding_timeout_seconds: a gang whose barrier released is finished, not
    # left with one member missing because of one throttled request.
    binding_retry_backoff_seconds: float = Field(default=0.2, gt=0)
    # Opt-in: the webhook also sets spec.schedulerName: gang-extender on every pod
    # that requests an accelerator resource (accelerator_resources) in namespaces
    # labelled gang-extender.io/inject: enabled, so plain GPU pods there are filtered against gang reservations instead
    # of being placed by the default scheduler, which does not see them. Needs the
    # webhook's gpu-routing entry (in deploy/webhook.yaml).
    route_gpu_pods: bool = Field(default=False)
    # Opt-in (docs/design.md#gated-admission): the webhook creates gang members of
    # this scheduler behind the scheduling gate gang-extender.io/admission, and the
    # service lifts it, with the planned node, once the whole gang is planned: kube-
    # scheduler never tries an incomplete gang or one that does not fit. The service
    # lifts the gate whatever this says (a pod template may carry it).
    admission_gate: bool = Field(default=False)
    # Opt-in (docs/design.md#the-planned-node-and-nominatednodename): the planned-node
    # write also sets the member's status.nominatedNodeName, so kube-scheduler checks
    # the planned node alone first. Off by default: its gain is not shown on 2 cores,
    # and kube-scheduler at times counted a nominated member twice and refused the node.
    nominate_planned_node: bool = Field(default=False)
    # Which resources are accelerators (docs/deploy.md "Accelerators"): comma-separated
    # extended resource names, a trailing `*` a prefix. Every GPU figure (plan, hold,
    # reservation, placeholder, score, gauge, hostfile slots, GPU routing) keys on them;
    # DRA class resources (deviceclass.resource.kubernetes.io/...) always count.
    accelerator_resources: str = Field(
        default=",".join(DEFAULT_ACCELERATOR_PATTERNS),
        description="accelerator resources, comma-separated; a trailing * is a prefix",
    )
    # A plan nobody acts on (a member the scheduler keeps rejecting for its own
    # reasons) must not hold capacity forever.
    default_schedule_timeout_seconds: float = Field(default=60.0, gt=0)
    # A held gang at the head of the queue that has waited this long reserves the
    # nodes it will use (domain/starvation/reservations.py); a PodGroup's spec.starvationSeconds
    # (or the members' gang-extender.io/starvation-seconds) wins.
    default_starvation_seconds: float = Field(default=60.0, gt=0)
    # A reservation gives up after this long and re-chooses nodes, so one busy node
    # cannot hold a gang's room (and everyone else's) forever.
    reservation_max_seconds: float = Field(default=300.0, gt=0)
    # While a reservation holds GPUs, placeholder pods request them on the reserved
    # nodes (domain/starvation/placeholders.py), so the default scheduler and the cluster
    # autoscaler see them taken too.
    reservation_placeholders: bool = True
    # While a reservation holds nodes, they carry the NoSchedule taint
    # gang-extender.io/reserved (domain/cluster/fences.py), which gang members tolerate (the
    # webhook adds it): no other scheduler places a pod there, even one already
    # pending when a GPU frees. Needs RBAC to patch nodes (deploy/rbac.yaml).
    reservation_taints: bool = True
    # After a plan is dropped, wait before planning the same group again so
    # another gang gets its turn at the capacity.
    replan_backoff_seconds: float = Field(default=2.0, ge=0)
    # The reconcile tick: plan expiry, PodGroup status, Events and wiring of groups
    # that changed are handled at most this often (status is written only on change).
    reconcile_interval_seconds: float = Field(default=1.0, gt=0)
    # Every group is re-checked this often even without events, so status drift and
    # failed writes are corrected.
    resync_seconds: float = Field(default=30.0, gt=0)
    # Idle extender connections stay open this long, so kube-scheduler reuses its
    # connection instead of a TLS handshake per call (uvicorn's own default is 5 s).
    # Longer than kube-scheduler's own idle timeout (90 s, apimachinery's transport
    # defaults), so the client closes first: a server closing first races a call sent
    # on the connection at that moment, which the client does not retry.
    extender_keep_alive_seconds: int = Field(default=120, gt=0)
    # On SIGTERM, open connections get this long to finish before they are closed:
    # kube-scheduler keeps a keep-alive connection to the extender for good, and
    # without a bound the process would wait for the kubelet's SIGKILL.
    shutdown_grace_seconds: int = Field(default=5, gt=0)
    # Gang preemption (docs/podgroup.md#preemption): a gang that does not fit evicts
    # whole lower-priority gangs and plain pods through the Eviction API, and
    # kube-scheduler's own preemption (the preempt verb) never leaves part of a gang
    # running. Off: no gang preempts, and kube-scheduler's victims pass unchanged.
    preemption: bool = Field(default=True)
    # How long a preemptor's plan holds the room its victims free before it must have
    # bound (they get their termination grace period, 30 s by default, to leave), and
    # how long a gang or pod whose eviction a PodDisruptionBudget refused is left out.
    preemption_hold_seconds: float = Field(default=120.0, gt=0)
    # How long a gang or pod is left out of preemption after the API server forbade
    # marking or evicting it (403: the service has no RoleBinding in its namespace; an
    # admission policy): that does not change by itself, as a budget's answer does, and
    # choosing it again would hold the preemptor's nodes for nothing.
    preemption_forbidden_seconds: float = Field(default=900.0, gt=0)
    # Largest request body the extender accepts; a 5,000-node NodeNames list is ~150 KB.
    max_request_bytes: int = Field(default=16 * 1024 * 1024, gt=0)

    # "full": extender verbs (filter, prioritize, bind: gang scheduling), webhook and
    # controller. "wiring-only": the webhook and the wiring controller only (SSH Secret,
    # headless Service, hostfile ConfigMap, VC_* env), for clusters where another
    # scheduler gang-schedules (Kubernetes' GangScheduling plugin, Volcano, Kueue,
    # coscheduling): the extender port is not opened, no PodGroup status or GangWaiting
    # Event is written (that scheduler reports), and no client certificate is issued.
    mode: Literal["full", "wiring-only"] = Field(default="full")

    leader_elect: bool = Field(default=False, description="run leader election on a Lease")
    lease_namespace: str = Field(default="gang-system")
    lease_name: str = Field(default="gang-extender-service")
    lease_duration_seconds: float = Field(default=15.0, gt=0)
    lease_renew_seconds: float = Field(default=5.0, gt=0)
    # One writer (controller/failover.py): how often a replica checks whether its
    # lease lapsed between renew rounds and whether it can rebuild the previous
    # leader's plans (leading and caches synced). Bounds how long a new leader stays
    # un-Ready after both hold; a lapsed lease is refused at once regardless.
    failover_check_seconds: float = Field(default=0.5, gt=0)

    # Watch cache (list + watch of nodes, pods, PodGroups, namespaces). A relist is
    # read in pages of this many objects, so one answer's memory stays bounded on a
    # large cluster.
    list_page_size: int = Field(default=1000, gt=0)
    # Read a list as a watch that starts with the current state (Kubernetes' WatchList:
    # on by default from 1.34, and in 1.27-1.32 where its gate is on), still handed over
    # in pages of list_page_size: no round trip per page. An API server that refuses it
    # is read in pages, as with false.
    watch_list: bool = True
    # Read a list as one answer from the API server's watch cache, cut into items as it
    # arrives and handed over in pages of list_page_size (50,000 pods in 1.0-1.5 s,
    # against 3.0-3.3 s as a WatchList stream). The API server streams such an answer
    # from 1.33 (StreamingCollectionEncodingToJSON, on by default); older ones build it
    # whole in their memory first: there, on a large cluster, set false (watch_list).
    # An answer whose items cannot be cut apart is read the watch_list way instead.
    whole_list: bool = True
    # The API server closes a watch after this long; it is reopened from the last
    # resourceVersion, so nothing is missed, and reconnects are spread out.
    watch_timeout_seconds: int = Field(default=300, gt=0)
    # A failed list or watch is tried again after this, doubling up to the cap: an
    # API server that is restarting is not hammered, one that is back is found soon.
    watch_retry_min_seconds: float = Field(default=0.5, gt=0)
    watch_retry_max_seconds: float = Field(default=10.0, gt=0)
    # An optional API (a CRD that may not be installed, e.g. scheduler-plugins'
    # PodGroup) is looked for again this often, so installing it later is noticed.
    optional_api_recheck_seconds: float = Field(default=30.0, gt=0)
    # Python's cyclic GC is paused during the first list (it parses ~100 MB of pod
    # JSON at 50,000 pods) at most this long; a list that never ends does not keep it off.
    sync_gc_pause_max_seconds: float = Field(default=60.0, gt=0)

    # API writes the controller makes on the core's behalf (planned-node annotations,
    # Events): a transient failure (no answer, 408, 429, 5xx) is tried again, up to
    # this many attempts in all, waiting api_write_backoff_seconds after the first
    # failure and doubling up to api_write_backoff_max_seconds. What still fails is
    # logged and counted in gang_extender_api_write_errors_total.
    api_write_attempts: int = Field(default=4, ge=1)
    api_write_backoff_seconds: float = Field(default=0.2, gt=0)
    api_write_backoff_max_seconds: float = Field(default=2.0, gt=0)
    # One write must not hold a group's effects for long: a slow API server fails
    # the attempt, and the retry above tries again.
    api_write_timeout_seconds: float = Field(default=10.0, gt=0)
    # Groups whose effects are carried out at the same time. One group's effects
    # always run one after another, in the order the core emitted them.
    effect_concurrency: int = Field(default=8, ge=1)
    # Threads for the blocking API calls made off the event loop (the effects' writes,
    # the webhook's lists); the default is Python's own (cores + 4, at most 32). More
    # send more writes at once to a busy API server: at 5,000 nodes 32 threads on
    # 2 cores bound 657 gangs in one run and 414 in the next, against 561 and 564 with 6
    # (docs/benchmarks.md round 21), so the default stays.
    api_threads: int = Field(
        default_factory=lambda: min(32, (os.cpu_count() or 1) + 4), ge=1, le=256
    )
    # A CA bundle that could not be written into the MutatingWebhookConfiguration
    # (the API server could not call the webhook) is written again in the
    # background, doubling the wait up to the maximum; the replica is not Ready
    # until it succeeds.
    ca_bundle_retry_min_seconds: float = Field(default=1.0, gt=0)
    ca_bundle_retry_max_seconds: float = Field(default=30.0, gt=0)

    # Task indexes the webhook hands out (extender.kube.indexes). An index handed out
    # stays taken this long without a pod showing it: longer than the API server takes
    # to store a pod after admission (each webhook in the chain may take up to 30 s),
    # short enough that a create that failed after us frees its index soon. A pod
    # watch silent this long is not trusted for indexes (a list is made instead).
    index_hold_seconds: float = Field(default=60.0, gt=0)
    # The list of a group's pods behind an allocation (made only while the pod watch
    # is not caught up) must end well before the webhook's own timeout (10 s in
    # deploy/webhook.yaml).
    index_list_timeout_seconds: float = Field(default=5.0, gt=0)

    log_level: str = Field(default="INFO", description="DEBUG, INFO, WARNING, ERROR")

    @field_validator("accelerator_resources")
    @classmethod
    def _accelerator_patterns(cls, value: str) -> str:
        try:
            Accelerators.from_setting(value)
        except AcceleratorPatternError as err:
            raise ValueError(str(err)) from None
        return value

    @property
    def accelerators(self) -> Accelerators:
        """The accelerator matcher the core and the webhook are given."""
        return Accelerators.from_setting(self.accelerator_resources)

    @field_validator("log_level")
    @classmethod
    def _known_log_level(cls, value: str) -> str:
        level = value.strip().upper()
        if level not in LOG_LEVELS:
            raise ValueError(f"unknown log level {value!r}; use one of {', '.join(LOG_LEVELS)}")
        return level
