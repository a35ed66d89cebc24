"""The pod requests of a gang's lifecycle policy: label, mark, delete, recreate.

controller/lifecycle_writes.py decides what to do with each answer (a 404 is moot, a
namespace being deleted refuses quietly); the paths and bodies are built here. One
request per function, through `RawApi`; callers on the event loop run them in a
thread. Each raises `KubeError` for the caller to judge.
"""

from __future__ import annotations

from typing import Any

from extender.domain.lifecycle.lifecycle import (
    DISRUPTION_TARGET,
    POLICY_DISRUPTION_REASON,
    RESTART_GENERATION_LABEL,
)
from extender.kube.rawapi import RawApi, path_of
from extender.kube.writers import STRATEGIC_MERGE_PATCH, patch_pod


def _pod_path(namespace: str, name: str | None = None) -> str:
    parts = ["api", "v1", "namespaces", namespace, "pods"]
    return path_of(*parts, *([name] if name else []))


def namespace_is_terminating(raw: RawApi, namespace: str, *, timeout: float) -> bool:
    """Is the namespace being deleted, as the API server says now.

    Listed by name (namespaces are listed and watched anyway; no `get` grant is needed).
    """
    answer = raw.call(
        "GET",
        path_of("api", "v1", "namespaces"),
        query={"fieldSelector": f"metadata.name={namespace}"},
        timeout=timeout,
    )
    return any(
        (item.get("metadata") or {}).get("deletionTimestamp")
        or (item.get("status") or {}).get("phase") == "Terminating"
        for item in answer.get("items") or []
    )


def label_restart_generation(
    raw: RawApi, pod: dict[str, Any], generation: int, *, timeout: float
) -> None:
    """Label this pod (this uid only) with the gang's restart generation."""
    meta = pod["metadata"]
    raw.call(
        "PATCH",
        _pod_path(meta["namespace"], meta["name"]),
        body={
            "metadata": {
                "uid": meta.get("uid"),
                "labels": {RESTART_GENERATION_LABEL: str(generation)},
            }
        },
        content_type="application/merge-patch+json",
        timeout=timeout,
    )


def mark_disrupted_by_policy(
    raw: RawApi, meta: dict[str, Any], message: str, when: str, *, timeout: float
) -> None:
    """The DisruptionTarget condition (reason DeletedByGangPolicy) on a member to delete."""
    condition = {
        "type": DISRUPTION_TARGET,
        "status": "True",
        "reason": POLICY_DISRUPTION_REASON,
        "message": message,
        "lastTransitionTime": when,
    }
    patch_pod(
        raw,
        meta["namespace"],
        meta["name"],
        {"metadata": {"uid": meta.get("uid")}, "status": {"conditions": [condition]}},
        STRATEGIC_MERGE_PATCH,
        timeout,
        subresource="status",
    )


def delete_pod(raw: RawApi, meta: dict[str, Any], *, timeout: float) -> None:
    """DELETE the pod, this uid only (a re-created pod of that name is spared)."""
    raw.call(
        "DELETE",
        _pod_path(meta["namespace"], meta["name"]),
        body={"preconditions": {"uid": meta.get("uid")}},
        timeout=timeout,
    )


def read_pod(raw: RawApi, namespace: str, name: str, *, timeout: float) -> dict[str, Any]:
    """GET the pod; a 404 (`KubeError`) says its name is free."""
    return raw.call("GET", _pod_path(namespace, name), timeout=timeout)


def create_pod(raw: RawApi, namespace: str, body: dict[str, Any], *, timeout: float) -> None:
    """POST the pod into the namespace; a 409 says the old one still holds its name."""
    raw.call("POST", _pod_path(namespace), body=body, timeout=timeout)
