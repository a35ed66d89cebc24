"""Workload 1: extender latency over HTTPS at cluster scale, memory and start-up time.

For each size (nodes, bound pods) the cache holds, the service is restarted
(start-up to /readyz is timed, VmRSS read from /proc), then each verb is called
in a bounded loop over one keep-alive HTTPS connection verified against the
stack's CA, with `NodeNames` (nodeCacheCapable) listing every node, as
kube-scheduler does with `percentageOfNodesToScore: 100`.

Nodes are plain Node objects (no kubelet, no kwok) and bound pods are created
with `spec.nodeName` set: the service's cache cannot tell them from real ones,
and the control plane stays idle while latencies are measured.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from bench.env import CREATE_WORKERS, BenchEnv
from bench.kubeclient import ApiError, bulk, count, pods_path
from bench.objects import (
    GANG_PODGROUP_API,
    UNSERVED_SCHEDULER,
    dra_device_class,
    dra_slice,
    gang_member,
    pod_body,
)
from bench.profile import as_text, summarize
from bench.service import ExtenderClient, PySpy, binding_args, extender_args, restart_service
from bench.stats import summary_ms
from bench.workloads.common import (
    PARTIAL_GANGS_METRIC,
    clear,
    observed_partial_gangs,
    service_metric,
)
from extender.domain.objects.membership import GROUP_LABEL, SCHEDULER_NAME
from extender.domain.objects.model import STARVATION_ANNOTATION

log = logging.getLogger("bench.latency")

WORKLOAD = "cache"
RESOURCE_API = "/apis/resource.k8s.io/v1"
GANG_SIZE = 8
# The probe gangs outlive their plans (nobody binds them) and, past the default
# starvationSeconds (60 s), one at the head would reserve a node, which is not the
# verb cost measured here: the plain-pod filter then refuses that node.
NEVER_STARVING = {STARVATION_ANNOTATION: "86400"}
#: Requests before each measured loop (connection, caches, first-call costs).
WARMUP_REQUESTS = 20
#: Loops of the profiled pass (each bounded by seconds_per_scenario).
PROFILED_LOOPS = 5
#: After ready: let the service apply the last pages and settle its GC before timing.
SETTLE_SECONDS = 2.0


@dataclass
class LatencyConfig:
    sizes: list[tuple[int, int]]  # (nodes, bound pods), ascending
    requests: int  # per scenario
    binds: int
    plans: int  # gangs planned (one filter each) per size
    seconds_per_scenario: float  # bound on each loop's time
    restarts: int = 1  # service starts timed per size (the median is reported)
    # GPUs as DRA devices: nodes advertise no nvidia.com/gpu, each publishes this many
    # in a ResourceSlice, a DeviceClass maps nvidia.com/gpu to them (0: device plugin).
    dra_devices: int = 0
    profile_dir: Path | None = None  # py-spy of the largest size's verbs, when set
    service_src: Path | None = None


@dataclass
class Probes:
    """Pods the verbs are asked about (in their API form, as kube-scheduler sends them)."""

    plain: dict[str, Any]
    held: dict[str, Any]
    bind: list[dict[str, Any]] = field(default_factory=list)
    direct: list[dict[str, Any]] = field(default_factory=list)
    gangs: list[list[dict[str, Any]]] = field(default_factory=list)


def _loop(
    client: ExtenderClient,
    verb: str,
    body: bytes,
    count: int,
    seconds: float,
    cpu: Callable[[], float],
) -> tuple[list[float], bytes, float]:
    """The timed requests (after a warm-up), their last answer, and the service's CPU
    seconds over them: on a shared machine, CPU per request is the figure that load
    on other processes does not move, where wall-clock latency does."""
    last = b""
    for _ in range(WARMUP_REQUESTS):
        _, status, last = client.post(verb, body)
        if status != 200:
            raise RuntimeError(f"/{verb} answered {status}: {last[:300]!r}")
    samples: list[float] = []
    cpu_start = cpu()
    deadline = time.monotonic() + seconds
    while len(samples) < count and time.monotonic() < deadline:
        took, status, last = client.post(verb, body)
        if status != 200:
            raise RuntimeError(f"/{verb} answered {status}: {last[:300]!r}")
        samples.append(took)
    return samples, last, cpu() - cpu_start


class LatencyWorkload:
    def __init__(self, env: BenchEnv, cfg: LatencyConfig) -> None:
        self.env = env
        self.cfg = cfg
        self.nodes: list[str] = []
        self.pods = 0
        self.namespace = ""
        self.probe_namespace = ""

    # ---- cluster contents ----
    def _grow(self, nodes: int, pods: int) -> None:
        env = self.env
        if len(self.nodes) < nodes:
            dra = self.cfg.dra_devices
            added = env.add_nodes(
                nodes - len(self.nodes),
                WORKLOAD,
                kwok=False,
                prefix="cache",
                start=len(self.nodes),
                gpus=None if dra else 8,
            )
            if dra:
                self._publish_devices(added, dra)
            self.nodes += added
        if self.pods < pods:
            ns = self.namespace
            width = len(self.nodes)

            def create(i: int) -> None:
                # Pods go round the nodes; every fifth round holds a GPU, so 10 pods
                # per node leave 6 of 8 GPUs free.
                body = pod_body(
                    f"bound-{i:06d}",
                    WORKLOAD,
                    scheduler=UNSERVED_SCHEDULER,
                    gpus=1 if (i // width) % 5 == 0 else 0,
                    node_name=self.nodes[i % width],
                )
                env.api.create(pods_path(ns), body)

            result = bulk(range(self.pods, pods), create, workers=CREATE_WORKERS)
            if result.errors:
                raise RuntimeError(f"bound pods: {result.errors} failed: {result.first_error}")
            log.info("created %d bound pods in %.1fs", result.done, result.seconds)
            self.pods = pods

    def _publish_devices(self, nodes: list[str], devices: int) -> None:
        """The DeviceClass (once) and one ResourceSlice of `devices` GPUs per node."""
        api = self.env.api
        if not self.nodes:
            api.create(f"{RESOURCE_API}/deviceclasses", dra_device_class())
        result = bulk(
            nodes,
            lambda n: api.create(f"{RESOURCE_API}/resourceslices", dra_slice(n, devices)),
            workers=CREATE_WORKERS,
        )
        if result.errors:
            raise RuntimeError(f"resource slices: {result.errors} failed: {result.first_error}")
        log.info(
            "published %d DRA devices in %d slices in %.1fs",
            devices * len(nodes),
            result.done,
            result.seconds,
        )

    def _probes(self, tag: str) -> Probes:
        env, ns, cfg = self.env, self.probe_namespace, self.cfg

        def make(body: dict[str, Any]) -> dict[str, Any]:
            return env.api.create(pods_path(ns), body)

        probes = Probes(
            plain=make(pod_body(f"plain-{tag}", WORKLOAD, scheduler=UNSERVED_SCHEDULER)),
            held=make(
                gang_member(
                    f"held-{tag}-0", f"held-{tag}", GANG_SIZE, WORKLOAD, annotations=NEVER_STARVING
                )
            ),
        )
        # The extender binds only pods of its own schedulerName (bind integrity); the
        # gang kube-scheduler is stopped, so nobody else acts on them. The direct ones
        # are the same pods, for a like-for-like comparison.
        bodies = [
            pod_body(f"{kind}-{tag}-{k:04d}", WORKLOAD, scheduler=SCHEDULER_NAME)
            for kind in ("bind", "direct")
            for k in range(cfg.binds)
        ]
        bodies += [
            gang_member(
                f"plan-{tag}-{g:03d}-{m}",
                f"plan-{tag}-{g:03d}",
                GANG_SIZE,
                WORKLOAD,
                annotations=NEVER_STARVING,
            )
            for g in range(cfg.plans)
            for m in range(GANG_SIZE)
        ]
        made: dict[str, dict[str, Any]] = {}

        def create(body: dict[str, Any]) -> None:
            obj = make(body)
            made[obj["metadata"]["name"]] = obj

        result = bulk(bodies, create, workers=CREATE_WORKERS)
        if result.errors:
            raise RuntimeError(f"probe pods: {result.errors} failed: {result.first_error}")
        probes.bind = [made[f"bind-{tag}-{k:04d}"] for k in range(cfg.binds)]
        probes.direct = [made[f"direct-{tag}-{k:04d}"] for k in range(cfg.binds)]
        probes.gangs = [
            [made[f"plan-{tag}-{g:03d}-{m}"] for m in range(GANG_SIZE)] for g in range(cfg.plans)
        ]
        return probes

    # ---- one size ----
    def measure(self, index: int, nodes: int, pods: int, *, profile: bool) -> dict[str, Any]:
        env, cfg = self.env, self.cfg
        self._grow(nodes, pods)
        tag = f"s{index}"
        probes = self._probes(tag)
        quiet_wait = env.wait_nodes_settled() + env.wait_quiet()
        # What each start lists, counted, not assumed: the size's pods and nodes plus
        # its probes (once the service has made their PodGroups), and whatever an
        # earlier workload left behind.
        contents = {
            "nodes": count(env.api, "/api/v1/nodes"),
            "pods": count(env.api, "/api/v1/pods"),
            "podgroups": count(env.api, f"/apis/{GANG_PODGROUP_API}/podgroups"),
        }
        quiet_wait += env.wait_quiet()
        starts = [
            restart_service(env, f"gang-extender-{tag}-{attempt}", service_src=cfg.service_src)
            for attempt in range(cfg.restarts)
        ]
        pid = env.stack.service.pid if env.stack.service else 0
        rss_ready = env.rss_mb(pid)
        time.sleep(SETTLE_SECONDS)
        # After a start the service reconciles every group it listed (this size's 100
        # probe gangs: status, Events) and the control plane digests those writes; verbs
        # timed meanwhile measured that (a plain filter's p99 was 24-78 ms with 100
        # probe gangs, against 1.4-4.3 ms with 20). Start-up itself is timed above.
        settle_wait = env.wait_quiet()
        ready = sorted(s.ready_s for s in starts)
        healthz = sorted(s.healthz_s for s in starts)
        log.info(
            "size %d nodes / %d pods: ready in %s s, RSS %.0f MB",
            nodes,
            pods,
            ", ".join(f"{r:.2f}" for r in ready),
            rss_ready.get("VmRSS", 0),
        )
        names = self.nodes[:nodes]
        client = ExtenderClient(env)
        verbs: dict[str, Any] = {}
        cpu_before = env.cpu_seconds(pid)

        def loop(label: str, verb: str, body: bytes, into: dict[str, Any] = verbs) -> bytes:
            samples, last, cpu = _loop(
                client,
                verb,
                body,
                cfg.requests,
                cfg.seconds_per_scenario,
                lambda: env.cpu_seconds(pid),
            )
            into[label] = {
                **summary_ms(samples),
                "service_cpu_ms": round(1000 * cpu / len(samples), 3) if samples else 0.0,
                "response_bytes": len(last),
                "request_bytes": len(body),
            }
            return last

        # 1. a pod without a group, nothing reserved: every candidate passes
        out = orjson.loads(loop("filter plain pod", "filter", extender_args(probes.plain, names)))
        kept = len(out["NodeNames"] or [])
        assert kept == nodes, f"filter of a plain pod kept {kept} of {nodes} nodes: {out}"[:2000]
        loop("prioritize plain pod", "prioritize", extender_args(probes.plain, names))
        # 2. a member of a gang short of its quorum: held on every node (unresolvable)
        out = orjson.loads(
            loop("filter gang member, held", "filter", extender_args(probes.held, names))
        )
        assert len(out["FailedAndUnresolvableNodes"]) == nodes
        # 3. bind a plain pod through the extender (a real pods/binding), vs the same
        #    binding sent straight to the API server: the difference is our overhead
        ext_binds, direct_binds = [], []
        for k, pod in enumerate(probes.bind):
            # As kube-scheduler does, a filter first (untimed): the extender binds a pod
            # only to a node its last filter answer offered (bind integrity).
            _, status, data = client.post("filter", extender_args(pod, [names[k % nodes]]))
            if status != 200 or orjson.loads(data).get("NodeNames") != [names[k % nodes]]:
                raise RuntimeError(f"filter before bind failed: {status} {data[:300]!r}")
            took, status, data = client.post("bind", binding_args(pod, names[k % nodes]))
            if status != 200 or orjson.loads(data).get("Error"):
                raise RuntimeError(f"bind through the extender failed: {status} {data[:300]!r}")
            ext_binds.append(took)
        for k, pod in enumerate(probes.direct):
            meta = pod["metadata"]
            binding = {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {
                    "name": meta["name"],
                    "namespace": meta["namespace"],
                    "uid": meta["uid"],
                },
                "target": {"apiVersion": "v1", "kind": "Node", "name": names[k % nodes]},
            }
            started = time.perf_counter()
            status, data = env.api.request(
                "POST", f"{pods_path(meta['namespace'])}/{meta['name']}/binding", binding
            )
            direct_binds.append(time.perf_counter() - started)
            if status != 201:
                raise RuntimeError(f"direct binding failed: {status} {data[:300]!r}")
        verbs["bind plain pod (extender)"] = summary_ms(ext_binds)
        verbs["bind plain pod (direct to API server)"] = summary_ms(direct_binds)
        # 4. the first member of a complete gang: plans all 8 members over every node
        plan_samples = []
        for gang in probes.gangs:
            took, status, data = client.post("filter", extender_args(gang[0], names))
            if status != 200 or len(orjson.loads(data).get("NodeNames") or []) != 1:
                raise RuntimeError(f"gang planning failed: {status} {data[:300]!r}")
            plan_samples.append(took)
        verbs["filter gang member, plans the gang"] = summary_ms(plan_samples)
        if probes.gangs:
            member = probes.gangs[0][1]
            out = orjson.loads(
                loop("filter gang member, planned", "filter", extender_args(member, names))
            )
            assert len(out["NodeNames"] or []) == 1, f"planned member: {out}"[:3000]
            loop("prioritize gang member, planned", "prioritize", extender_args(member, names))
            loop("filter plain pod, gangs reserved", "filter", extender_args(probes.plain, names))
        cpu = env.cpu_seconds(pid) - cpu_before
        # The profile is a second pass over the loops that can run again, with py-spy
        # attached: its sampling takes CPU from the same two cores, so no figure above
        # is timed under it. The pass's own timings are kept beside them.
        spy: PySpy | None = None
        profiled: dict[str, Any] = {}
        if profile and cfg.profile_dir is not None:
            # raw stacks (MBs) stay with the cluster's logs; the summary goes to results
            spy = PySpy(
                pid,
                env.cluster.workdir.parent / f"profile-{nodes}-nodes.txt",
                seconds=PROFILED_LOOPS * cfg.seconds_per_scenario + 30,
            )
            if spy.available:
                plain = extender_args(probes.plain, names)
                loop("prioritize plain pod", "prioritize", plain, profiled)
                loop(
                    "filter gang member, held",
                    "filter",
                    extender_args(probes.held, names),
                    profiled,
                )
                if probes.gangs:
                    planned = extender_args(probes.gangs[0][1], names)
                    loop("filter gang member, planned", "filter", planned, profiled)
                    loop("prioritize gang member, planned", "prioritize", planned, profiled)
                loop("filter plain pod, gangs reserved", "filter", plain, profiled)
        client.close()
        # Gangs were planned but none of their members bound: none may be partial.
        partial = observed_partial_gangs(env, self.probe_namespace, GROUP_LABEL)
        counted = service_metric(env, PARTIAL_GANGS_METRIC)  # since this size's restart
        # The next size starts from no plans or reservations: its probes are its own.
        # A loaded API server may time the deletion out (504): this size's figures are
        # kept with the error; a next size would start with the probes left.
        cleanup_error = None
        try:
            clear(env, self.probe_namespace)
        except ApiError as err:
            log.error("clearing %s failed: %s", self.probe_namespace, err)
            cleanup_error = repr(err)
        result: dict[str, Any] = {
            "nodes": nodes,
            "bound_pods": pods,
            "dra_devices": nodes * cfg.dra_devices,
            "cluster_at_start": contents,
            # median of the restarts (each one under "ready_all_s")
            "healthz_s": round(healthz[len(healthz) // 2], 2),
            "ready_s": round(ready[len(ready) // 2], 2),
            "ready_all_s": [round(r, 2) for r in ready],
            "quiet_wait_s": round(quiet_wait, 1),
            "rss_ready_mb": round(rss_ready.get("VmRSS", 0), 1),
            "rss_after_mb": round(env.rss_mb(pid).get("VmRSS", 0), 1),
            "rss_peak_mb": round(env.rss_mb(pid).get("VmHWM", 0), 1),
            "service_cpu_s_during_verbs": round(cpu, 2),
            "verbs": verbs,
            "partial_gangs": partial,
            "partial_gangs_counted": counted,
            "settle_after_start_s": round(settle_wait, 1),
            "cleanup_error": cleanup_error,
            "bind_overhead_ms": {
                q: round(
                    verbs["bind plain pod (extender)"][f"{q}_ms"]
                    - verbs["bind plain pod (direct to API server)"][f"{q}_ms"],
                    3,
                )
                for q in ("p50", "p99")
            },
        }
        if spy is not None and cfg.profile_dir is not None and spy.stop():
            result["verbs_under_profiler"] = profiled
            text = as_text(
                f"service at {nodes} nodes / {pods} pods, during a second pass of the repeatable "
                "loops (after the timed one)",
                summarize(spy.out),
            )
            text += "\n" + as_text("inside POST /filter", summarize(spy.out, within="filter_route"))
            text += "\n" + as_text(
                "inside POST /prioritize", summarize(spy.out, within="prioritize_route")
            )
            summary_path = cfg.profile_dir / f"profile-{nodes}-nodes.summary.txt"
            summary_path.write_text(text)
            result["profile"] = str(summary_path)
        return result

    def run(self) -> dict[str, Any]:
        # The verbs are driven by the bench alone: no kube-scheduler may act on the probes.
        if self.env.stack.scheduler is not None:
            self.env.stack.scheduler.stop()
        self.namespace = self.env.namespace("bench-cache")
        self.probe_namespace = self.env.namespace("bench-probe")
        sizes = []
        for i, (nodes, pods) in enumerate(self.cfg.sizes):
            last = i == len(self.cfg.sizes) - 1
            sizes.append(self.measure(i, nodes, pods, profile=last))
        return {"sizes": sizes}
