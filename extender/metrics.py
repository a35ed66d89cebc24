"""Prometheus metrics of the service, one registry per process (tests make their own).

Names and meanings are documented in docs/metrics.md. Beside the service's own
metrics, the registry carries prometheus-client's standard collectors (process:
memory, CPU, open fds; platform: python_info; the garbage collector), which
Prometheus users alert on and which a custom registry does not get by itself.
"""

from __future__ import annotations

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
)

# Extender verbs are sub-millisecond when healthy; bind includes the barrier wait.
LATENCY_BUCKETS = (
    0.0005,
    0.001,
    0.002,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    30,
    60,
)
# Nodes kube-scheduler offers in one filter: 1 when it checks a pod's nominated node
# first (the planned node, written as nominatedNodeName), else every feasible node.
CANDIDATE_BUCKETS = (1, 2, 8, 64, 512, 4096, 16384)
# Gang wait: first member created -> all members bound.
WAIT_BUCKETS = (0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800, 3600)


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        # The standard collectors read the process (/proc, gc, platform) when scraped;
        # the same instances prometheus-client puts on its default registry.
        for standard in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
            r.register(standard)
        self.request_seconds = Histogram(
            "gang_extender_request_duration_seconds",
            "Latency of extender and webhook requests, per verb.",
            ["verb"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.filter_candidates = Histogram(
            "gang_extender_filter_candidate_nodes",
            "Nodes kube-scheduler offered in each filter request (1: the nominated node alone).",
            buckets=CANDIDATE_BUCKETS,
            registry=r,
        )
        self.extender_errors = Counter(
            "gang_extender_request_errors_total",
            "Requests answered with an HTTP error or an Error body, per verb.",
            ["verb"],
            registry=r,
        )
        self.groups = Gauge("gang_extender_groups", "Pod groups by phase.", ["phase"], registry=r)
        self.gang_wait_seconds = Histogram(
            "gang_extender_gang_wait_seconds",
            "Time from a gang's first member being created to all planned members bound.",
            buckets=WAIT_BUCKETS,
            registry=r,
        )
        self.gangs_bound = Counter(
            "gang_extender_gangs_bound_total", "Gangs whose plan was fully bound.", registry=r
        )
        self.plans_dropped = Counter(
            "gang_extender_plans_dropped_total",
            "Plans dropped before binding, by reason class.",
            ["reason"],
            registry=r,
        )
        self.barrier_timeouts = Counter(
            "gang_extender_bind_barrier_timeouts_total",
            "Bind barriers that timed out (the gang was released, nothing bound).",
            registry=r,
        )
        self.partial_gangs = Counter(
            "gang_extender_partial_gangs_total",
            "Gangs released to bind that lost a member which can never be bound "
            "(deleted, node gone): left with fewer members bound than planned.",
            registry=r,
        )
        self.gang_faults = Counter(
            "gang_extender_gang_faults_total",
            "Exceptions contained to one gang: the gang is held with the error and the "
            "others are answered as usual (where: plan, reconcile).",
            ["where"],
            registry=r,
        )
        self.reconcile_seconds = Histogram(
            "gang_extender_reconcile_duration_seconds",
            "Time one group's reconcile took (wiring, lifecycle, status); groups are "
            "reconciled one after another, so a slow one delays the rest.",
            buckets=WAIT_BUCKETS,
            registry=r,
        )
        self.bind_retries = Counter(
            "gang_extender_bind_retries_total",
            "Binding requests tried again after a transient failure (no answer, 408, "
            "409, 429, 5xx).",
            registry=r,
        )
        self.reservations = Gauge(
            "gang_extender_reservations",
            "Pods with capacity planned but not yet bound.",
            registry=r,
        )
        self.barrier_waiting = Gauge(
            "gang_extender_bind_barrier_waiting",
            "Binds held at a gang's bind barrier, waiting for the rest of the gang.",
            registry=r,
        )
        self.gpus = Gauge(
            "gang_extender_gpus",
            "Accelerators per node pool (label gang-extender.io/pool, else 'default'), "
            "resource (nvidia.com/gpu, amd.com/gpu, ...) and state.",
            ["pool", "resource", "state"],
            registry=r,
        )
        self.cache_synced = Gauge(
            "gang_extender_cache_synced",
            "1 when the watch cache of a resource has listed and is watching.",
            ["resource"],
            registry=r,
        )
        self.watch_restarts = Counter(
            "gang_extender_watch_restarts_total",
            "Watch restarts, per resource and cause (expired = 410 Gone, error).",
            ["resource", "cause"],
            registry=r,
        )
        self.api_write_errors = Counter(
            "gang_extender_api_write_errors_total",
            "API writes that failed for good (after retries), by what was written.",
            ["kind"],
            registry=r,
        )
        self.is_leader = Gauge(
            "gang_extender_leader", "1 on the replica that holds the lease.", registry=r
        )
        self.plans_recovered = Counter(
            "gang_extender_plans_recovered_total",
            "Plans rebuilt from planned-node annotations on taking over (recovered), "
            "or not rebuilt because partial or stale (refused).",
            ["outcome"],
            registry=r,
        )
        self.not_leader_refusals = Counter(
            "gang_extender_not_leader_total",
            "Verbs refused and queued API writes skipped because this replica was not "
            "the leader, by what (filter, prioritize, bind, write, reconcile).",
            ["what"],
            registry=r,
        )
        self.index_reads = Counter(
            "gang_extender_index_reads_total",
            "Group members read by the webhook to allocate or check a task index, by "
            "source: watch (the pod watch, caught up) or list (an API list per create).",
            ["source"],
            registry=r,
        )
        self.cache_rejected_objects = Counter(
            "gang_extender_cache_rejected_objects_total",
            "Objects from a list page or watch event that could not be read (logged, "
            "skipped; the rest of the page is applied), by kind.",
            ["kind"],
            registry=r,
        )
        # Lifecycle policies (domain/lifecycle/lifecycle.py, docs/podgroup.md#lifecycle-policies).
        self.gang_restarts = Counter(
            "gang_extender_gang_restarts_total",
            "Gangs restarted by their lifecycle policy (RestartJob), by the event that "
            "caused it (PodEvicted, PodFailed, PodsNotReady).",
            ["cause"],
            registry=r,
        )
        self.gangs_aborted = Counter(
            "gang_extender_gangs_aborted_total",
            "Gangs aborted by their lifecycle policy (AbortJob), by cause.",
            ["cause"],
            registry=r,
        )
        self.gangs_failed = Counter(
            "gang_extender_gangs_retries_exhausted_total",
            "Gangs left Failed after maxRetry restarts, by the cause of the last failure.",
            ["cause"],
            registry=r,
        )
        # Gang preemption (domain/preemption/preemption.py, docs/podgroup.md#preemption).
        self.preemption_evictions = Counter(
            "gang_extender_preemption_evictions_total",
            "Pods gang preemption asked the Eviction API to evict, by result: evicted, "
            "refused (a PodDisruptionBudget's 429), or failed (the mark or the eviction "
            "forbidden, or failing through every retry).",
            ["result"],
            registry=r,
        )
        self.gang_recovery_seconds = Histogram(
            "gang_extender_gang_recovery_seconds",
            "Time from the failure that restarted a gang to its new members bound whole, by cause.",
            ["cause"],
            buckets=WAIT_BUCKETS,
            registry=r,
        )
