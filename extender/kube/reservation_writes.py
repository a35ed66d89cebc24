"""Writes for a starving gang's reservation: its placeholder pods and its node fences.

The placeholders hold the free GPUs of reserved nodes (domain/starvation/placeholders.py);
a fence taints a reserved node against pods of other schedulers already pending
(domain/cluster/fences.py). Each function is one request (or a read-modify-write of a
node's taints) through `RawApi`; callers on the event loop run them in a thread.
"""

from __future__ import annotations

from typing import Any

from extender.domain.cluster.fences import FENCE_EFFECT, FENCE_TAINT_KEY
from extender.domain.objects.membership import SCHEDULER_NAME
from extender.domain.objects.model import PLACEHOLDER_LABEL
from extender.domain.objects.quantity import GPU
from extender.kube.ownership import SEAL_ANNOTATION
from extender.kube.rawapi import KubeError, RawApi, path_of
from extender.kube.writers import HTTP_CONFLICT, WRITE_TIMEOUT_SECONDS

# A placeholder runs nothing: the smallest image every cluster can pull.
PLACEHOLDER_IMAGE = "registry.k8s.io/pause:3.10"


def placeholder_pod(
    *,
    namespace: str,
    name: str,
    group: str,
    node: str,
    gpus: int,
    owner: dict[str, Any] | None,
    seal: str,
    resource: str = GPU,
) -> dict[str, Any]:
    """A pod bound to `node` holding `gpus` of `resource` (the gang's accelerator) for a
    starving gang (domain/starvation/placeholders.py).

    Bound directly (`spec.nodeName`), so no scheduler is involved; it tolerates every
    taint (the reserved node may be tainted for GPU work) and goes at once when deleted.
    `owner` (the group's PodGroup) lets the garbage collector remove it with the group.
    `seal` (kube/ownership.py) is what tells it from a pod that only carries the label.
    """
    resources = {resource: str(gpus)}
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": {
            PLACEHOLDER_LABEL: group,
            "app.kubernetes.io/managed-by": SCHEDULER_NAME,
        },
        "annotations": {SEAL_ANNOTATION: seal},
    }
    if owner is not None:
        metadata["ownerReferences"] = [owner]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 0,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "tolerations": [{"operator": "Exists"}],
            "containers": [
                {
                    "name": "placeholder",
                    "image": PLACEHOLDER_IMAGE,
                    "resources": {"requests": resources, "limits": resources},
                }
            ],
        },
    }


def create_placeholder(
    raw: RawApi, body: dict[str, Any], *, timeout: float = WRITE_TIMEOUT_SECONDS
) -> None:
    """Create a placeholder pod; 409 means it exists already (its name is deterministic)."""
    namespace = body["metadata"]["namespace"]
    try:
        raw.call(
            "POST",
            path_of("api", "v1", "namespaces", namespace, "pods"),
            body=body,
            timeout=timeout,
        )
    except KubeError as err:
        if err.status != HTTP_CONFLICT:
            raise


def delete_placeholder(
    raw: RawApi, namespace: str, name: str, *, timeout: float = WRITE_TIMEOUT_SECONDS
) -> None:
    """Delete a placeholder pod at once (grace 0: it runs nothing to stop)."""
    raw.call(
        "DELETE",
        path_of("api", "v1", "namespaces", namespace, "pods", name),
        body={"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0},
        timeout=timeout,
    )


# A node's taints are one list in the API (no merge key): read, change, write with the
# read's resourceVersion; a write another client made meanwhile is a 409, read again.
FENCE_WRITE_ATTEMPTS = 5


def set_node_fence(
    raw: RawApi, node: str, value: str | None, *, timeout: float = WRITE_TIMEOUT_SECONDS
) -> None:
    """Put the fence taint (domain/cluster/fences.py) with `value` on `node`, or take it off
    (`value` None), leaving every other taint as it is."""
    path = path_of("api", "v1", "nodes", node)
    for attempt in range(1, FENCE_WRITE_ATTEMPTS + 1):
        obj = raw.call("GET", path, timeout=timeout)
        taints = list((obj.get("spec") or {}).get("taints") or [])
        kept = [t for t in taints if t.get("key") != FENCE_TAINT_KEY]
        wanted = kept + ([fence_taint_object(value)] if value is not None else [])
        if wanted == taints:
            return
        try:
            raw.call(
                "PATCH",
                path,
                body={
                    "metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]},
                    "spec": {"taints": wanted or None},
                },
                content_type="application/merge-patch+json",
                timeout=timeout,
            )
            return
        except KubeError as err:
            if err.status != HTTP_CONFLICT or attempt == FENCE_WRITE_ATTEMPTS:
                raise


def fence_taint_object(value: str) -> dict[str, str]:
    return {"key": FENCE_TAINT_KEY, "value": value, "effect": FENCE_EFFECT}
