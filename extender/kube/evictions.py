"""Evictions for gang preemption: the policy/v1 Eviction subresource, and who preempted.

One request per function, through `RawApi`; callers on the event loop run them in
a thread. The Eviction API (not a DELETE) so the API server enforces
PodDisruptionBudgets: it answers 429 when a budget forbids the eviction now.
"""

from __future__ import annotations

from extender.domain.preemption.preemption import PREEMPTED_BY_ANNOTATION
from extender.kube.rawapi import RawApi, path_of
from extender.kube.writers import MERGE_PATCH, patch_pod

# The API server's answer when a PodDisruptionBudget forbids an eviction now.
HTTP_TOO_MANY_REQUESTS = 429


def evict_pod(raw: RawApi, namespace: str, name: str, uid: str, *, timeout: float) -> None:
    """POST the pod's eviction; only this uid (a re-created pod of that name is spared)."""
    body = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": namespace},
        "deleteOptions": {"preconditions": {"uid": uid}},
    }
    raw.call(
        "POST",
        path_of("api", "v1", "namespaces", namespace, "pods", name, "eviction"),
        body=body,
        timeout=timeout,
    )


def mark_preempted(
    raw: RawApi, namespace: str, name: str, preemptor: str | None, *, timeout: float
) -> None:
    """Set (or, with None, clear) the gang-extender.io/preempted-by annotation."""
    patch = {"metadata": {"annotations": {PREEMPTED_BY_ANNOTATION: preemptor}}}
    patch_pod(raw, namespace, name, patch, MERGE_PATCH, timeout)
