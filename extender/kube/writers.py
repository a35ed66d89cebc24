"""Writes to the API server: pod bindings, plan annotations, Events, PodGroups.

Each function is one request through `RawApi`; callers on the event loop run
them in a thread (`asyncio.to_thread` or the binder's pool).
"""

from __future__ import annotations

import asyncio
import functools
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from extender.domain.objects.membership import (
    ADMISSION_GATE,
    CREATED_FROM_ANNOTATION,
    PLANNED_NODE_ANNOTATION,
    SCHEDULER_NAME,
)
from extender.kube.rawapi import KubeError, RawApi, path_of
from extender.ports.binding import BindError

PODGROUP_API = "scheduling.gang-extender.io/v1alpha1"
# Callers on the event loop pass settings.api_write_timeout_seconds; RawApi's default otherwise.
WRITE_TIMEOUT_SECONDS = 30.0
# Answers worth trying again: no answer at all (0), request timeout, throttled, and
# the server-side failures a restarting or overloaded API server gives.
TRANSIENT_STATUSES = frozenset({0, 408, 429, 500, 502, 503, 504})
HTTP_NOT_FOUND = 404
HTTP_CONFLICT = 409


def is_transient(err: KubeError) -> bool:
    return err.status in TRANSIENT_STATUSES


def api_error_summary(err: BaseException) -> str:
    """What an API failure was, safe to log: the status code and reason, never a body.

    A response body can echo what was sent (a Secret's data), and the kubernetes
    client's ApiException puts the whole body and headers into str(err).
    """
    status = getattr(err, "status", None)
    if status is None:
        return type(err).__name__
    if status == 0:
        return "no answer from the API server"
    reason = str(getattr(err, "reason", "") or "").strip()
    return f"status {status} {reason}".rstrip()


class ApiBinder:
    """Binds through the `pods/binding` subresource; a gang's binds go out in parallel.

    A transient failure (no answer, 408, 429, 5xx) or a 409 is not the end: the pod
    is read back first, because the binding may have landed before the answer was
    lost. On `node` already: success. Bound elsewhere, deleted or re-created: a
    BindError saying so (`bound_to`, `gone`). Still unbound: posted again after
    `retry_backoff_seconds` (doubling), all attempts within `timeout_seconds` in
    total, so a bind still answers inside the scheduler's extender httpTimeout.
    Before each retry it asks `acting()`: a replica that lost the Lease meanwhile posts
    no more (BindError "not the leader"; `on_not_acting` counts it), since the new
    leader owns the gang now.

    The service passes `Settings.binder_workers`, `Settings.binding_timeout_seconds`
    and `Settings.binding_retry_backoff_seconds` (the reasons are there); the
    defaults are the same values.
    """

    def __init__(
        self,
        raw: RawApi,
        *,
        workers: int = 32,
        timeout_seconds: float = 10.0,
        retry_backoff_seconds: float = 0.2,
        on_retry: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        acting: Callable[[], bool] = lambda: True,
        on_not_acting: Callable[[], None] | None = None,
    ) -> None:
        self.raw = raw
        self._acting = acting
        self._on_not_acting = on_not_acting
        self.timeout_seconds = timeout_seconds
        self.retry_backoff_seconds = retry_backoff_seconds
        self._on_retry = on_retry
        self._clock = clock
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="bind")

    async def bind(self, *, namespace: str, name: str, uid: str, node: str) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            # The uid makes the bind fail if the pod was deleted and re-created.
            "metadata": {"name": name, "namespace": namespace, "uid": uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        path = path_of("api", "v1", "namespaces", namespace, "pods", name, "binding")
        started = self._clock()
        delay = self.retry_backoff_seconds
        timeout = self.timeout_seconds
        while True:
            try:
                await self._run(
                    functools.partial(self.raw.call, "POST", path, body=body, timeout=timeout)
                )
                return
            except KubeError as err:
                if not (is_transient(err) or err.status == HTTP_CONFLICT):
                    raise BindError(str(err), gone=err.status == HTTP_NOT_FOUND) from None
                failure = err
            if await self._landed(namespace, name, uid, node, failure):
                return
            remaining = self.timeout_seconds - (self._clock() - started) - delay
            if remaining <= 0:
                raise BindError(f"{failure} (gave up after {self.timeout_seconds:g}s)")
            await asyncio.sleep(delay)
            delay *= 2
            timeout = remaining
            if not self._acting():
                if self._on_not_acting is not None:
                    self._on_not_acting()
                raise BindError(f"{failure}; not retried: not the leader any more")
            if self._on_retry is not None:
                self._on_retry()

    async def _landed(
        self, namespace: str, name: str, uid: str, node: str, failure: KubeError
    ) -> bool:
        """After a failed POST: True if the pod is on `node`; BindError if it never will be.

        False when it is still unbound (or could not be read): worth posting again.
        """
        path = path_of("api", "v1", "namespaces", namespace, "pods", name)
        try:
            pod = await self._run(lambda: self.raw.call("GET", path, timeout=self.timeout_seconds))
        except KubeError as err:
            if err.status == HTTP_NOT_FOUND:
                raise BindError(
                    f"{failure}; pod {namespace}/{name} was deleted", gone=True
                ) from None
            return False
        meta = pod.get("metadata") or {}
        if meta.get("uid") != uid or meta.get("deletionTimestamp"):
            raise BindError(f"{failure}; pod {namespace}/{name} was deleted", gone=True)
        bound = (pod.get("spec") or {}).get("nodeName")
        if bound == node:
            return True
        if bound:
            raise BindError(
                f"{failure}; pod {namespace}/{name} is bound to {bound}", bound_to=bound
            )
        return False

    async def _run(self, call: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        return await asyncio.get_running_loop().run_in_executor(self._pool, call)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def set_planned_node(
    raw: RawApi,
    namespace: str,
    name: str,
    node: str | None,
    *,
    lift_gate: bool = False,
    nominate: bool = False,
    timeout: float = WRITE_TIMEOUT_SECONDS,
) -> None:
    """Record (or clear) a member's planned node on the pod.

    The annotation makes a plan survive a restart, and the pod update makes
    kube-scheduler move the pod out of its unschedulable queue to be retried now.
    With `nominate`, the same write, through the status subresource (which keeps
    metadata changes and resets only spec, deletionTimestamp and ownerReferences),
    sets the planned node as `status.nominatedNodeName`: kube-scheduler then checks
    that node alone, and calls the extender with that one name, before it runs its
    filters over every node and sends every name (`findNodesThatFitPod` in
    pkg/scheduler/schedule_one.go; docs/design.md#the-planned-node-and-nominatednodename).
    A clear removes both.
    With `lift_gate`, the write removes gang-extender's admission gate instead
    (`lift_admission_gate`): a spec change, which only the pod itself takes, so
    the gated member enters kube-scheduler's queue with the annotation alone.
    With both, the nomination is written first and the gate lifted second: two
    writes, but the member enters kube-scheduler's queue already nominated, so even
    its first attempt checks the planned node alone (ungated, the nomination races
    the member's first attempt).
    """
    annotation = {"metadata": {"annotations": {PLANNED_NODE_ANNOTATION: node}}}
    if lift_gate and not nominate:
        patch_pod(raw, namespace, name, annotation | _LIFT_GATE, STRATEGIC_MERGE_PATCH, timeout)
        return
    if not nominate:
        patch_pod(raw, namespace, name, annotation, MERGE_PATCH, timeout)
        return
    nomination = annotation | {"status": {"nominatedNodeName": node}}
    try:
        patch_pod(raw, namespace, name, nomination, MERGE_PATCH, timeout, subresource="status")
    except KubeError as err:
        # kube-scheduler bound the member before this write ran (under load, most of a
        # gang often is): the API server refuses a nomination on a bound pod
        # (ClearingNominatedNodeNameAfterBinding), and a bound member needs neither it
        # nor the annotation (recovery reads only unbound members').
        if not (err.status == HTTP_UNPROCESSABLE and ALREADY_BOUND in err.message):
            raise
    if lift_gate:
        lift_admission_gate(raw, namespace, name, timeout=timeout)


HTTP_UNPROCESSABLE = 422
# The API server's words when a nomination is set on a pod already bound.
ALREADY_BOUND = "already bound to a node"


def patch_pod(
    raw: RawApi,
    namespace: str,
    name: str,
    patch: dict[str, Any],
    content_type: str,
    timeout: float,
    *,
    subresource: str | None = None,
) -> None:
    """PATCH one pod (or its `subresource`): the planned node, the nomination, the
    admission gate, the preempted-by mark, the DisruptionTarget condition."""
    pod = path_of("api", "v1", "namespaces", namespace, "pods", name)
    raw.call(
        "PATCH",
        f"{pod}/{subresource}" if subresource else pod,
        body=patch,
        content_type=content_type,
        timeout=timeout,
    )


def lift_admission_gate(
    raw: RawApi, namespace: str, name: str, *, timeout: float = WRITE_TIMEOUT_SECONDS
) -> None:
    """Remove gang-extender's admission gate from a pod, leaving any other gate.

    A strategic merge patch deletes the one list entry by its name, so a gate
    another controller (Kueue) holds or lifts meanwhile is neither kept nor re-added
    (gates can only be removed after creation). Removing a gate the pod no longer
    has is a no-op.
    """
    patch_pod(raw, namespace, name, _LIFT_GATE, STRATEGIC_MERGE_PATCH, timeout)


MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
_LIFT_GATE = {"spec": {"schedulingGates": [{"name": ADMISSION_GATE, "$patch": "delete"}]}}


def emit_event(
    raw: RawApi,
    *,
    involved: dict[str, Any],
    reason: str,
    message: str,
    event_type: str = "Normal",
    timeout: float = WRITE_TIMEOUT_SECONDS,
) -> None:
    """A core/v1 Event on an object (`involved` = {kind, namespace, name, uid, apiVersion})."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    namespace = involved["namespace"]
    body = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{involved['name']}.{uuid.uuid4().hex[:12]}",
            "namespace": namespace,
        },
        "involvedObject": involved,
        "reason": reason,
        "message": message[:1024],
        "type": event_type,
        "source": {"component": SCHEDULER_NAME},
        "reportingComponent": SCHEDULER_NAME,
        "reportingInstance": SCHEDULER_NAME,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
    raw.call(
        "POST",
        path_of("api", "v1", "namespaces", namespace, "events"),
        body=body,
        timeout=timeout,
    )


def pod_owner_references(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Owner references to these pods (not controllers, not blocking their deletion)."""
    return [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": pod["metadata"]["name"],
            "uid": pod["metadata"]["uid"],
        }
        for pod in sorted(pods, key=lambda p: str(p["metadata"].get("name", "")))
        if pod["metadata"].get("uid")
    ]


def podgroup_path(namespace: str, name: str | None = None, *, status: bool = False) -> str:
    parts = [
        "apis",
        "scheduling.gang-extender.io",
        "v1alpha1",
        "namespaces",
        namespace,
        "podgroups",
    ]
    if name is not None:
        parts.append(name)
        if status:
            parts.append("status")
    return path_of(*parts)


def create_podgroup(
    raw: RawApi,
    *,
    namespace: str,
    name: str,
    min_member: int,
    min_task_member: dict[str, int] | None,
    owners: list[dict[str, Any]],
) -> None:
    """Create the PodGroup a group declared only by annotation; 409 means someone won the race.

    `owners` (the group's pods, see `pod_owner_references`) make Kubernetes' garbage
    collector delete it once the last of them is gone; the service never deletes.
    """
    spec: dict[str, Any] = {"minMember": min_member}
    if min_task_member:
        spec["minTaskMember"] = min_task_member
    body = {
        "apiVersion": PODGROUP_API,
        "kind": "PodGroup",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/managed-by": SCHEDULER_NAME},
            # What marks it as ours: it follows its members and goes with the last one.
            "annotations": {CREATED_FROM_ANNOTATION: "min-available annotation"},
            "ownerReferences": owners,
        },
        "spec": spec,
    }
    try:
        raw.call("POST", podgroup_path(namespace), body=body)
    except KubeError as err:
        if err.status != 409:
            raise


def update_podgroup(
    raw: RawApi,
    *,
    namespace: str,
    name: str,
    uid: str,
    resource_version: str,
    min_member: int,
    owners: list[dict[str, Any]],
) -> None:
    """Bring a PodGroup gang-extender created in step with its members: size and owners.

    Only the version the caller looked at: a 409 (changed meanwhile) is retried by
    the reconciler with what the watch says next.
    """
    raw.call(
        "PATCH",
        podgroup_path(namespace, name),
        body={
            "metadata": {
                "uid": uid,
                "resourceVersion": resource_version,
                "ownerReferences": owners,
            },
            "spec": {"minMember": min_member},
        },
        content_type="application/merge-patch+json",
    )


def write_podgroup_status(raw: RawApi, namespace: str, name: str, status: dict[str, Any]) -> None:
    raw.call(
        "PATCH",
        podgroup_path(namespace, name, status=True),
        body={"status": status},
        content_type="application/merge-patch+json",
    )


def foreign_podgroup_path(api_version: str, namespace: str, name: str, *, status: bool) -> str:
    """Path of another scheduler's PodGroup (`group/version`), or of its status subresource."""
    group, version = api_version.split("/", 1)
    parts = ["apis", group, version, "namespaces", namespace, "podgroups", name]
    return path_of(*parts, "status") if status else path_of(*parts)


def write_foreign_podgroup_status(
    raw: RawApi,
    *,
    api_version: str,
    namespace: str,
    name: str,
    uid: str,
    status: dict[str, Any],
    subresource: bool,
) -> dict[str, Any]:
    """Merge `status` into another scheduler's PodGroup: through its status subresource
    (scheduler-plugins' CRD has one), or with the object where the CRD has none
    (Volcano's), which is how Volcano's own scheduler writes it. The uid makes it
    fail (409) rather than write to a PodGroup re-created meanwhile. The object as
    the API server has it after the patch."""
    return raw.call(
        "PATCH",
        foreign_podgroup_path(api_version, namespace, name, status=subresource),
        body={"metadata": {"uid": uid}, "status": status},
        content_type="application/merge-patch+json",
    )


def write_upstream_podgroup_condition(
    raw: RawApi,
    *,
    api_version: str,
    namespace: str,
    name: str,
    uid: str,
    condition: dict[str, Any],
) -> dict[str, Any]:
    """Merge one condition into a `scheduling.k8s.io` PodGroup's status, through its
    status subresource. A strategic merge patch (conditions merge by type), so the
    conditions kube-scheduler writes (DisruptionTarget) are kept; the uid makes it
    fail (409) rather than write to a PodGroup re-created meanwhile."""
    return raw.call(
        "PATCH",
        foreign_podgroup_path(api_version, namespace, name, status=True),
        body={"metadata": {"uid": uid}, "status": {"conditions": [condition]}},
        content_type="application/strategic-merge-patch+json",
    )
