"""Fixtures and helpers for e2e tests of the product: the service + gang scheduler on the cluster.

`gang_stack` runs `gang-extender serve` and a second stock kube-scheduler with
deploy/scheduler/scheduler-config.yaml against the session cluster, exactly as
`gang-extender dev up` does.
"""

from __future__ import annotations

import hashlib
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from extender.devcluster.cluster import LocalCluster, new_namespace
from extender.devcluster.nodes import add_gpu_nodes, wait_for_nodes_ready
from extender.devcluster.stack import GangStack
from extender.domain.lifecycle.lifecycle import RESTART_GENERATION_LABEL
from extender.domain.objects.membership import (
    GROUP_LABEL,
    INJECT_NAMESPACE_LABEL,
    SCHEDULER_NAME,
    TASK_LABEL,
)
from extender.kube.rawapi import KubeError, RawApi, path_of
from extender.kube.writers import podgroup_path

# Bounded waits: generous for a loaded 2-core CI machine; they bound hangs, they do not measure.
SETTLE_SECONDS = 90


@pytest.fixture(scope="session")
def gang_stack(cluster: LocalCluster) -> Iterator[GangStack]:
    yield from running_stack(cluster)


def running_stack(cluster: LocalCluster, env: dict[str, str] | None = None) -> Iterator[GangStack]:
    """A fixture's body: the service and its kube-scheduler on `cluster`, with `env` for
    the service (GANG_* settings), started, yielded and stopped."""
    stack = GangStack(cluster, env=env)
    stack.start()
    try:
        yield stack
    finally:
        stack.stop()


@pytest.fixture(scope="session")
def raw(api: k8s.ApiClient) -> RawApi:
    return RawApi(api)


def service_metric(stack: GangStack, name: str) -> float:
    """One unlabelled sample of the service's own metrics; 0 when not exported yet."""
    for line in stack.metrics_text().splitlines():
        if line.startswith(f"{name} "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


@pytest.fixture
def no_partial_gangs(gang_stack: GangStack) -> Iterator[None]:
    """After the test: the service counted no partial gang (issue #11: never one, anywhere)."""
    yield
    assert service_metric(gang_stack, "gang_extender_partial_gangs_total") == 0, (
        "a gang was left partial: look for GangPartial Events"
    )


@pytest.fixture
def injected_namespace(
    api: k8s.ApiClient, core: k8s.CoreV1Api, gang_stack: GangStack
) -> Iterator[str]:
    """A fresh namespace labelled gang-extender.io/inject=enabled."""
    name = new_namespace(api, "wired", labels={INJECT_NAMESPACE_LABEL: "enabled"})
    yield name
    delete_namespace(core, name)


def parse_status_table(output: str) -> dict[str, dict[str, str]]:
    """`gang-extender status` output as {group name: {column: cell}} (columns are padded)."""
    from extender.status_view import STATUS_HEADER

    lines = output.splitlines()
    starts = [re.search(rf"(?<!\S){re.escape(c)}(?!\S)", lines[0]).start() for c in STATUS_HEADER]  # type: ignore[union-attr]
    rows = {}
    for line in lines[1:]:
        ends = [*starts[1:], len(line) + 1]
        cells = [line[a:b].strip() for a, b in zip(starts, ends, strict=True)]
        rows[cells[1]] = dict(zip(STATUS_HEADER, cells, strict=True))
    return rows


def delete_namespace(core: k8s.CoreV1Api, name: str) -> None:
    """Delete without waiting; gone already is fine."""
    try:
        core.delete_namespace(name)
    except k8s.ApiException as exc:
        if exc.status != 404:
            raise


def wait_until(probe: Callable[[], Any], *, timeout: float = SETTLE_SECONDS, what: str = "") -> Any:
    """Poll until probe() is truthy; its value. Fails the test with `what` on timeout."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(0.25)
    pytest.fail(f"timed out after {timeout}s waiting for {what or probe.__name__} (last: {last!r})")


def gang_pod(
    name: str,
    group: str,
    *,
    gpus: int = 0,
    cpu: str = "100m",
    memory: str = "128Mi",
    task: str | None = None,
    node_selector: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    scheduler: str = SCHEDULER_NAME,
    gated: bool = False,
    resource: str = "nvidia.com/gpu",
) -> dict[str, Any]:
    labels = {GROUP_LABEL: group} if group else {}
    if task:
        labels[TASK_LABEL] = task
    resources: dict[str, Any] = {"requests": {"cpu": cpu, "memory": memory}, "limits": {}}
    if gpus:
        resources["limits"][resource] = gpus
        resources["requests"][resource] = gpus
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "nodeSelector": node_selector or {},
        "containers": [
            {"name": "main", "image": "registry.example/train:1", "resources": resources}
        ],
    }
    if gated:
        # kube-scheduler leaves a gated pod alone until `ungate`: a member that counts
        # toward its gang but cannot reach bind, which holds the others in the barrier.
        spec["schedulingGates"] = [{"name": HOLD_GATE}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels, "annotations": annotations or {}},
        "spec": spec,
    }


HOLD_GATE = "gang-extender.io/test-hold"


def ungate(raw: RawApi, namespace: str, name: str) -> None:
    raw.call(
        "PATCH",
        path_of("api", "v1", "namespaces", namespace, "pods", name),
        body=[{"op": "remove", "path": "/spec/schedulingGates"}],
        content_type="application/json-patch+json",
    )


def planned(pod: dict[str, Any]) -> bool:
    return "gang-extender.io/planned-node" in (pod["metadata"].get("annotations") or {})


def podgroup(name: str, min_member: int, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.gang-extender.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {"minMember": min_member, **spec},
    }


def create(raw: RawApi, namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
    if obj["kind"] == "PodGroup":
        path = podgroup_path(namespace)
    else:
        path = path_of("api", "v1", "namespaces", namespace, "pods")
    return raw.call("POST", path, body=obj)


def list_pods(raw: RawApi, namespace: str, selector: str | None = None) -> list[dict[str, Any]]:
    query = {"labelSelector": selector} if selector else None
    return raw.call("GET", path_of("api", "v1", "namespaces", namespace, "pods"), query=query)[
        "items"
    ]


def get_podgroup(raw: RawApi, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        return raw.call("GET", podgroup_path(namespace, name))
    except KubeError as err:
        if err.status == 404:
            return None
        raise


def condition_message(pg: dict[str, Any] | None) -> str:
    for c in ((pg or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == "Scheduled":
            return str(c.get("message", ""))
    return ""


def bound(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in pods if p["spec"].get("nodeName")]


def delete_pods(raw: RawApi, namespace: str, selector: str) -> None:
    raw.call(
        "DELETE",
        path_of("api", "v1", "namespaces", namespace, "pods"),
        query={"labelSelector": selector, "gracePeriodSeconds": 0},
    )


@dataclass
class BindRecorder:
    """Watches a namespace and records when each pod first got a node, and GPU use per node."""

    raw: RawApi
    namespace: str
    first_bound: dict[str, float] = field(default_factory=dict)
    node_of: dict[str, str] = field(default_factory=dict)
    max_gpus_per_node: dict[str, int] = field(default_factory=dict)
    _gpus: dict[str, int] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        """Watch until stopped; never die. A loaded API server may end a watch with an
        ERROR event (e.g. "too large resource version" while its watch cache lags the
        list): then relist, seeing every pod the list returns, as the service's own
        cache does. A recorder that died silently would record nothing."""
        path = path_of("api", "v1", "namespaces", self.namespace, "pods")
        version: str | None = None
        while not self._stop.is_set():
            try:
                if version is None:
                    listed = self.raw.call("GET", path)
                    # The list is the truth now: pods deleted while unwatched are gone.
                    self.node_of.clear()
                    self._gpus.clear()
                    for pod in listed.get("items", []):
                        self._see("ADDED", pod)
                    version = listed["metadata"]["resourceVersion"]
                for event in self.raw.stream(
                    path,
                    query={"watch": "true", "resourceVersion": version, "timeoutSeconds": 5},
                    read_timeout=10,
                ):
                    obj = event.get("object") or {}
                    if event.get("type") == "ERROR":
                        raise KubeError(int(obj.get("code") or 500), str(obj.get("message")))
                    version = obj.get("metadata", {}).get("resourceVersion", version)
                    if event.get("type") != "BOOKMARK":
                        self._see(event["type"], obj)
            except Exception:  # relist after any failure, and keep recording
                version = None
                self._stop.wait(0.2)

    def _see(self, kind: str, pod: dict[str, Any]) -> None:
        name = pod["metadata"]["name"]
        node = pod["spec"].get("nodeName")
        gpus = int(
            ((pod["spec"]["containers"][0].get("resources") or {}).get("limits") or {}).get(
                "nvidia.com/gpu", 0
            )
        )
        if kind == "DELETED":
            old = self.node_of.pop(name, None)
            if old:
                self._gpus[old] -= gpus
            return
        if node and name not in self.node_of:
            self.first_bound.setdefault(name, time.time())
            self.node_of[name] = node
            self._gpus[node] = self._gpus.get(node, 0) + gpus
            self.max_gpus_per_node[node] = max(
                self.max_gpus_per_node.get(node, 0), self._gpus[node]
            )

    def stop(self) -> None:
        self._stop.set()


# ---- modules that run a control plane of their own (the Workload API's releases) ----


def minor_version(version: str) -> int:
    """1.37 of "v1.37.2"; 0 when the version does not read."""
    found = re.match(r"v1\.(\d+)\.", version)
    return int(found.group(1)) if found else 0


def own_control_plane(workdir: Path, bin_dir: Path, **options: Any) -> Iterator[LocalCluster]:
    """A module-scoped fixture's body: a LocalCluster with `options` (feature gates,
    runtime config), started, yielded and stopped."""
    cluster = LocalCluster(workdir, bin_dir, **options)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def gpu_pool_for(
    api: k8s.ApiClient, request: pytest.FixtureRequest, *, gpus: int, label: str
) -> dict[str, str]:
    """Two fresh GPU nodes named after the test; the node selector that keeps its pods there.

    The name is the test's, cut short, plus a hash of all of it: two tests (or two
    parameters of one) whose names start alike get nodes of their own."""
    full = request.node.name.lower()
    digest = hashlib.sha256(full.encode()).hexdigest()[:6]
    name = f"{re.sub(r'[^a-z0-9]+', '-', full)[:13].strip('-')}-{digest}"
    names = add_gpu_nodes(api, 2, gpus=gpus, labels={label: name}, name_prefix=f"gpu-{name}")
    wait_for_nodes_ready(api, names)
    return {label: name}


def indexed_job_of(
    name: str, *, completions: int, parallelism: int, template: dict[str, Any], **spec: Any
) -> dict[str, Any]:
    """An Indexed Job of pod `template` ({metadata, spec}); `spec` adds to the Job's spec."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "completionMode": "Indexed",
            "completions": completions,
            "parallelism": parallelism,
            **spec,
            "template": template,
        },
    }


def gpu_indexed_job(
    name: str,
    *,
    completions: int,
    parallelism: int,
    gpus: int,
    node_selector: dict[str, str],
    **pod_spec: Any,
) -> dict[str, Any]:
    """An Indexed Job whose pods each ask for `gpus` GPUs; `pod_spec` adds to the pods'
    spec (schedulerName, the group reference a test is about)."""
    container = {
        "name": "train",
        "image": "registry.example/train:1",
        "resources": {
            "requests": {"cpu": "100m", "nvidia.com/gpu": gpus},
            "limits": {"nvidia.com/gpu": gpus},
        },
    }
    pod = {**pod_spec, "restartPolicy": "Never", "nodeSelector": node_selector}
    return indexed_job_of(
        name,
        completions=completions,
        parallelism=parallelism,
        template={"spec": {**pod, "containers": [container]}},
    )


def job_pods(raw: RawApi, namespace: str, job: str) -> list[dict[str, Any]]:
    """The pods a Job made, by the label the Job controller gives them."""
    return list_pods(raw, namespace, f"batch.kubernetes.io/job-name={job}")


def unschedulable(pod: dict[str, Any] | None) -> dict[str, Any] | None:
    """The pod's PodScheduled=False condition (kube-scheduler found no node for it), or
    None: none yet, or no pod."""
    for condition in ((pod or {}).get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return dict(condition)
    return None


def unschedulable_message(pod: dict[str, Any] | None) -> str:
    """The PodScheduled=False condition's message ("" when there is none)."""
    return str((unschedulable(pod) or {}).get("message") or "")


def get_or_none(raw: RawApi, path: str) -> dict[str, Any] | None:
    """The object at `path`, or None when it does not exist (404)."""
    try:
        return raw.call("GET", path)
    except KubeError as err:
        if err.status == 404:
            return None
        raise


def hostfile(raw: RawApi, namespace: str, group: str) -> list[str]:
    """The lines of the group's wiring ConfigMap `<group>-svc` hostfile ([] until it exists)."""
    configmap = get_or_none(
        raw, path_of("api", "v1", "namespaces", namespace, "configmaps", f"{group}-svc")
    )
    return str(((configmap or {}).get("data") or {}).get("hostfile", "")).splitlines()


# ---- a gang's life after bind: evict, wait for the restart (tests/e2e/test_gang_lifecycle.py) ----


def pod_path(namespace: str, name: str | None = None, *sub: str) -> str:
    return path_of("api", "v1", "namespaces", namespace, "pods", *([name] if name else []), *sub)


def delete_pod(raw: RawApi, namespace: str, name: str) -> None:
    """Delete the pod at once (grace period 0), as a pod that finished or was killed goes."""
    raw.call("DELETE", pod_path(namespace, name), query={"gracePeriodSeconds": 0})


def live(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The pods not being deleted (no deletionTimestamp)."""
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def bound_live_names(raw: RawApi, namespace: str, selector: str | None = None) -> set[str]:
    """The names of the pods (of `selector`) bound to a node and not being deleted."""
    return {p["metadata"]["name"] for p in live(bound(list_pods(raw, namespace, selector)))}


def pods_by_name(raw: RawApi, namespace: str) -> dict[str, dict[str, Any]]:
    """Every pod of the namespace, by name (one list)."""
    return {p["metadata"]["name"]: p for p in list_pods(raw, namespace)}


def get_pod(raw: RawApi, namespace: str, name: str) -> dict[str, Any] | None:
    """The pod named `name`, or None when there is none."""
    return pods_by_name(raw, namespace).get(name)


def evict(raw: RawApi, namespace: str, name: str) -> None:
    """The Eviction API, as `kubectl drain` uses it."""
    raw.call(
        "POST",
        pod_path(namespace, name, "eviction"),
        body={
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
        },
    )


def hold_unready(raw: RawApi, namespace: str, name: str) -> None:
    """Let a gated pod go bound but never Ready: KWOK v0.7's pod-ready stage (Running,
    Ready; a Job's pod Succeeded) only takes pods without status.podIP, so one set
    before the bind keeps it Pending, as a container still starting would."""
    raw.call(
        "PATCH",
        pod_path(namespace, name, "status"),
        body={"status": {"podIP": "10.250.0.1", "podIPs": [{"ip": "10.250.0.1"}]}},
        content_type="application/merge-patch+json",
    )
    ungate(raw, namespace, name)


def uids(pods: list[dict[str, Any]]) -> set[str]:
    return {str(p["metadata"]["uid"]) for p in pods}


def live_members(raw: RawApi, namespace: str, group: str) -> list[dict[str, Any]]:
    return live(list_pods(raw, namespace, f"{GROUP_LABEL}={group}"))


def events(raw: RawApi, namespace: str, reason: str) -> list[dict[str, Any]]:
    items = raw.call("GET", path_of("api", "v1", "namespaces", namespace, "events"))["items"]
    return [e for e in items if e.get("reason") == reason]


def placed_as_gang(raw: RawApi, namespace: str, group: str) -> dict[str, str]:
    """Member -> node, as the group's `GangScheduled` Event lists them (one Event a
    gang, on its PodGroup): the members gang-extender planned and bound together."""
    prefix = f"gang {namespace}/{group} bound: "
    placed: dict[str, str] = {}
    for event in events(raw, namespace, "GangScheduled"):
        message = event.get("message", "")
        if message.startswith(prefix):
            for pair in message[len(prefix) :].split(", "):
                member, _, node = pair.partition("->")
                placed[member] = node
    return placed


def podgroup_status(raw: RawApi, namespace: str, group: str) -> dict[str, Any]:
    return (get_podgroup(raw, namespace, group) or {}).get("status") or {}


def lifecycle_condition(raw: RawApi, namespace: str, group: str) -> dict[str, Any]:
    for c in podgroup_status(raw, namespace, group).get("conditions") or []:
        if c.get("type") == "Lifecycle":
            return dict(c)
    return {}


def whole_gang(raw: RawApi, namespace: str, group: str, size: int, old: set[str]) -> Any:
    """`size` live members, none of them of `old` uids, every one bound; else falsy."""
    pods = live_members(raw, namespace, group)
    if len(pods) == size and not (uids(pods) & old) and len(bound(pods)) == size:
        return pods
    return None


def running_gang(raw: RawApi, namespace: str, group: str, size: int, old: set[str]) -> Any:
    """As `whole_gang`, and every member Running: the Eviction API marks only a running
    pod with DisruptionTarget (a Pending one is deleted as is, which is no eviction)."""
    pods = whole_gang(raw, namespace, group, size, old)
    return pods if pods and all(p["status"].get("phase") == "Running" for p in pods) else None


def replaced_whole(
    raw: RawApi,
    namespace: str,
    group: str,
    size: int,
    before: list[dict[str, Any]],
    *,
    running: bool = False,
    what: str = "",
) -> list[dict[str, Any]]:
    """Wait for `size` new members (none of `before`'s uids) bound whole (and Running)."""
    probe = running_gang if running else whole_gang
    found: list[dict[str, Any]] = wait_until(
        lambda: probe(raw, namespace, group, size, uids(before)),
        what=what or f"the {size} members of {group} replaced (new UIDs) and bound whole",
    )
    return found


def restart_message(raw: RawApi, namespace: str, naming: str = "") -> str:
    """Wait for a GangRestarted Event (naming `naming`, when given); its message."""
    messages = wait_until(
        lambda: [
            e["message"] for e in events(raw, namespace, "GangRestarted") if naming in e["message"]
        ],
        what=f"a GangRestarted Event{f' naming {naming}' if naming else ''}",
    )
    return str(messages[0])


def labelled_generation(raw: RawApi, namespace: str, group: str, generation: int) -> None:
    """Wait until every live member carries restart generation `generation`."""
    wait_until(
        lambda: (
            {
                p["metadata"]["labels"].get(RESTART_GENERATION_LABEL)
                for p in live_members(raw, namespace, group)
            }
            == {str(generation)}
        ),
        what=f"the members of {group} labelled with restart generation {generation}",
    )


def held_in_phase(
    raw: RawApi, namespace: str, group: str, phase: str, reason: str
) -> dict[str, Any]:
    """Wait for the PodGroup's `phase` with a Lifecycle condition of `reason`; the condition.

    Both, not the phase alone: the status writer and the lifecycle controller patch the
    status separately, so the phase can show before the condition that explains it."""

    def held() -> dict[str, Any] | None:
        condition = lifecycle_condition(raw, namespace, group)
        if podgroup_status(raw, namespace, group).get("phase") != phase:
            return None
        return condition if condition.get("reason") == reason else None

    found: dict[str, Any] = wait_until(
        held, what=f"phase {phase} with the Lifecycle condition {reason}"
    )
    return found


# ---- a gang starved by 1-GPU pods (test_gang_starvation.py, test_gang_placeholders.py) ----

STARVING_GANG = "big"  # 4 members of 1 GPU, big-0..big-3


def starving_gang_bound(raw: RawApi, namespace: str) -> bool:
    return len(bound(list_pods(raw, namespace, f"{GROUP_LABEL}={STARVING_GANG}"))) == 4


def default_scheduler_pods(role: str) -> Callable[[int, dict[str, str]], dict[str, Any]]:
    """A maker of 1-GPU pods `small-<index>` of the DEFAULT scheduler, labelled
    role=<role> and kept on a pool by its node selector (starve_until_reserved's
    `small_pod`)."""

    def make(index: int, selector: dict[str, str]) -> dict[str, Any]:
        pod = gang_pod(
            f"small-{index}", "", gpus=1, node_selector=selector, scheduler="default-scheduler"
        )
        pod["metadata"]["labels"]["role"] = role
        return pod

    return make


def starve_until_reserved(
    raw: RawApi,
    namespace: str,
    pool: Any,
    small_pod: Callable[[int, dict[str, str]], dict[str, Any]],
    small_selector: str,
    *,
    starvation_seconds: int,
) -> int:
    """On `pool` (of the gpu_nodes fixture: one node of 4 GPUs), fill the node with four
    1-GPU pods `small_pod(0..3, pool.node_selector)` (of label selector
    `small_selector`), create the gang STARVING_GANG of 4 x 1 GPU there, then let a
    bound 1-GPU pod finish and a replacement `small_pod(i, ...)` take its GPU, again
    and again, until the gang's PodGroup says it is reserving the node. The index of
    the next 1-GPU pod."""
    node, node_selector = pool.nodes[0], pool.node_selector

    def bound_smalls() -> set[str]:
        return bound_live_names(raw, namespace, small_selector)

    def reservation_shown() -> bool:
        message = condition_message(get_podgroup(raw, namespace, STARVING_GANG))
        return f"reserving {node}" in message

    for i in range(4):
        create(raw, namespace, small_pod(i, node_selector))
    wait_until(lambda: len(bound_smalls()) == 4, what="four 1-GPU pods to fill the node")
    create(raw, namespace, podgroup(STARVING_GANG, 4, starvationSeconds=starvation_seconds))
    for i in range(4):
        member = gang_pod(
            f"{STARVING_GANG}-{i}", STARVING_GANG, gpus=1, node_selector=node_selector
        )
        create(raw, namespace, member)

    # Before the reservation: a 1-GPU pod finishes, its replacement takes the GPU.
    next_index = 4
    while not reservation_shown():
        delete_pod(raw, namespace, sorted(bound_smalls())[0])
        replacement = small_pod(next_index, node_selector)
        create(raw, namespace, replacement)
        next_index += 1
        wait_until(
            lambda r=replacement["metadata"]["name"]: r in bound_smalls() or reservation_shown(),
            what="the replacement to be bound, or the gang's reservation to start",
        )
    assert not starving_gang_bound(raw, namespace)
    return next_index


# ---- other schedulers' PodGroups (Volcano, scheduler-plugins) ----


def podgroups_path(api_version: str, namespace: str, name: str | None = None) -> str:
    """The path of PodGroups of `api_version` ("scheduling.volcano.sh/v1beta1", ...)."""
    group, version = api_version.split("/")
    parts = ["apis", group, version, "namespaces", namespace, "podgroups"]
    return path_of(*parts, *([name] if name else []))


def create_podgroup_of(
    raw: RawApi, api_version: str, namespace: str, name: str, **spec: Any
) -> dict[str, Any]:
    """Create a PodGroup of another scheduler's API group with `spec`."""
    return raw.call(
        "POST",
        podgroups_path(api_version, namespace),
        body={
            "apiVersion": api_version,
            "kind": "PodGroup",
            "metadata": {"name": name},
            "spec": spec,
        },
    )


def gang_status_text(cluster: LocalCluster, namespace: str) -> str:
    """What `gang-extender status -n <namespace>` prints, run as a user runs it."""
    import os
    import subprocess
    import sys

    listed = subprocess.run(
        [sys.executable, "-m", "extender", "status", "-n", namespace]
        + [f"--kubeconfig={cluster.kubeconfig}"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    return listed.stdout


def gang_status(cluster: LocalCluster, namespace: str) -> dict[str, dict[str, str]]:
    """`gang-extender status -n <namespace>` as a user runs it, parsed by group name."""
    return parse_status_table(gang_status_text(cluster, namespace))
