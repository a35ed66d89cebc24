"""The three gang schedulers of the gang workload, behind one interface.

- gang-extender: the stock kube-scheduler with the gang-extender profile (extender
  filter/prioritize/bind) and the service; gangs are gang-extender PodGroups.
- upstream: Kubernetes' own gang scheduling (1.37 `GenericWorkload`, beta): the
  default kube-scheduler restarted with the gate, whose default profile then holds
  the `GangScheduling` plugin; gangs are `scheduling.k8s.io/v1beta1` PodGroups
  (`spec.schedulingPolicy.gang.minCount`) that pods name in
  `spec.schedulingGroup.podGroupName`. kube-apiserver serves that API only when the
  bench started the control plane with it (`extender.devcluster.workload_api`).
- coscheduling: scheduler-plugins' scheduler with its shipped Coscheduling config.

Each runs alone: the others' processes are stopped (or, for the default
kube-scheduler, left without the gate, so it ignores pods it is not named by).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import coscheduling
from bench.env import BenchEnv
from bench.kubeclient import ApiError
from bench.objects import (
    BENCH_LABEL,
    COSCHEDULING_PODGROUP_API,
    COSCHEDULING_SCHEDULER,
    GANG_PODGROUP_API,
    UPSTREAM_SCHEDULER,
    coscheduling_member,
    gang_member,
    podgroup_body,
    upstream_member,
)
from bench.schedmetrics import scrape
from bench.service import BenchStack
from extender.devcluster.loopback import free_port
from extender.devcluster.process import ManagedProcess
from extender.devcluster.workload_api import GATE, PODGROUP_API_VERSION, upstream_podgroup
from extender.domain.objects.membership import ADMISSION_GATE, SCHEDULER_NAME

KINDS = ("gang-extender", "upstream", "coscheduling")


@dataclass
class Scheduler:
    """One gang scheduler: its pods' schedulerName (its metrics' `profile` label), the
    PodGroup API its gangs use, and how to start, stop and read it."""

    kind: str
    profile: str
    podgroup_api: str
    root: Path | None = None  # scheduler-plugins' build (coscheduling only)
    metrics_port: int = 0
    # gang-extender only: members created behind its admission gate (ADMISSION_GATE)
    admission_gate: bool = False
    _proc: ManagedProcess | None = field(default=None, repr=False)

    def bodies(
        self, gangs: int, size: int, workload: str, *, priority_class: str | None = None
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """(PodGroups, pods) of `gangs` gangs of `size` 1-GPU members, named g000-0..."""
        groups = [f"g{g:03d}" for g in range(gangs)]
        if self.kind == "upstream":
            podgroups = [upstream_podgroup(g, size, {BENCH_LABEL: workload}) for g in groups]
            if priority_class:
                # 1.37 refuses a group whose pods' priority differs from the group's own
                # (validatePodGroup in schedule_one_podgroup.go); the admission plugin
                # sets spec.priority from the class, as for pods.
                for pg in podgroups:
                    pg["spec"]["priorityClassName"] = priority_class
        else:
            podgroups = [podgroup_body(self.podgroup_api, g, size, workload) for g in groups]
        pods = []
        for g in groups:
            for m in range(size):
                name = f"{g}-{m}"
                if self.kind == "gang-extender":
                    pod = gang_member(name, g, size, workload)
                    if self.admission_gate:
                        pod["spec"]["schedulingGates"] = [{"name": ADMISSION_GATE}]
                elif self.kind == "upstream":
                    pod = upstream_member(name, g, workload)
                else:
                    pod = coscheduling_member(name, g, workload)
                if priority_class:
                    pod["spec"]["priorityClassName"] = priority_class
                pods.append(pod)
        return podgroups, pods

    def start(self, env: BenchEnv) -> None:
        if self.kind == "gang-extender":
            stack = env.stack
            if stack.service is None or not stack.service.alive():
                stack.start_service()
            if stack.scheduler is None or not stack.scheduler.alive():
                stack.start_scheduler()
        elif self.kind == "upstream":
            env.cluster.restart_scheduler(feature_gates={GATE: True})
        else:
            assert self.root is not None
            self.metrics_port = free_port()
            self._proc = coscheduling.start(env, self.root, self.metrics_port)

    def stop(self, env: BenchEnv) -> None:
        if self.kind == "gang-extender":
            # The others get the machine to themselves.
            env.stack.stop()
        elif self.kind == "upstream":
            # Back to the stock default scheduler for the workloads that follow.
            env.cluster.restart_scheduler(feature_gates={})
        elif self._proc is not None:
            self._proc.stop()
            self._proc = None

    def metrics_text(self, env: BenchEnv) -> str:
        if self.kind == "upstream":
            return env.cluster.component_metrics("kube-scheduler")
        if self.kind == "gang-extender":
            if not isinstance(env.stack, BenchStack):
                raise TypeError("the gang kube-scheduler serves /metrics only under BenchStack")
            return scrape(env.stack.scheduler_metrics_port)
        return scrape(self.metrics_port)


def schedulers(scheduler_plugins: Path, *, admission_gate: bool = False) -> dict[str, Scheduler]:
    return {
        "gang-extender": Scheduler(
            "gang-extender", SCHEDULER_NAME, GANG_PODGROUP_API, admission_gate=admission_gate
        ),
        "upstream": Scheduler("upstream", UPSTREAM_SCHEDULER, PODGROUP_API_VERSION),
        "coscheduling": Scheduler(
            "coscheduling",
            COSCHEDULING_SCHEDULER,
            COSCHEDULING_PODGROUP_API,
            root=scheduler_plugins,
        ),
    }


def upstream_unavailable(env: BenchEnv) -> str | None:
    """Why Kubernetes' own gang scheduling cannot run on this control plane, or None."""
    try:
        env.api.call("GET", "/apis/scheduling.k8s.io/v1beta1")
    except ApiError as err:
        return (
            f"kube-apiserver does not serve {PODGROUP_API_VERSION} ({err.status}); it needs 1.37+ "
            f"with {GATE}=true and --runtime-config=scheduling.k8s.io/v1beta1=true"
        )
    return None
