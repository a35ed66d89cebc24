"""Admission of a pod into its group, as a use case: the answer to one AdmissionRequest.

The decisions are `extender.injection.admission`'s (pure); this class adds the two
things they need from outside: the group's PodGroup (`PodGroupReader`) and a task
index, allocated when the pod brings none or claimed when it brings one (denied when
another live member of its task holds it), through `extender.ports.indexes`. It knows
no HTTP (`extender.api.webhook` is the route) and no kube/ (`extender.kube.indexes`
implements the port; `extender.service` wires them together).

Every outcome is an AdmissionReview dict: allowed with a patch, or denied saying
what to fix (503, retryable, when the API server could not be read).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from extender.domain.objects.accelerators import DEFAULT_ACCELERATORS, Accelerators
from extender.injection.admission import (
    AdmissionDenied,
    AdmissionRequest,
    allowed_response,
    carries_wiring,
    check_member_index,
    denied_response,
    index_owner,
    index_taken_message,
    no_free_index_message,
    pod_group,
    read_membership,
    render_pod_patch,
    wants_wiring,
)
from extender.injection.admission_gate import admission_gate_ops
from extender.injection.gpu_routing import route_to_gang_scheduler
from extender.injection.patch import JsonPatchOp
from extender.ports.indexes import (
    Claimant,
    IndexAllocatorPort,
    IndexTakenError,
    NoFreeIndexError,
    PodsUnreadableError,
)

log = logging.getLogger(__name__)

PodGroupReader = Callable[[str, str], dict[str, Any] | None]
"""(namespace, name) -> the PodGroup as a JSON dict, or None when there is none. Blocking."""

# A denial because the API server could not be read: temporary, the creator retries.
UNAVAILABLE_CODE = 503
UNAVAILABLE_REASON = "ServiceUnavailable"


class Admitter:
    """Wires pods of a group as they are created: membership, task index, patch."""

    def __init__(
        self,
        allocator: IndexAllocatorPort,
        *,
        podgroup_reader: PodGroupReader | None = None,
        route_gpu_pods: bool = False,
        admission_gate: bool = False,
        accelerators: Accelerators = DEFAULT_ACCELERATORS,
    ) -> None:
        """`podgroup_reader` gives spec.minTaskMember; None: there are no PodGroups.

        `route_gpu_pods` (Settings.route_gpu_pods): pods requesting GPUs that are left
        to the default scheduler get schedulerName gang-extender
        (extender.injection.gpu_routing), group or not. `admission_gate`
        (Settings.admission_gate): members kube-scheduler would place get
        gang-extender's scheduling gate, lifted once their gang is planned
        (extender.domain.queue.gang_admission).
        """
        self.allocator = allocator
        self.podgroup_reader = podgroup_reader
        self.route_gpu_pods = route_gpu_pods
        # Settings.admission_gate: members of our scheduler are created behind the gate.
        self.admission_gate = admission_gate
        self.accelerators = (
            accelerators  # which requests route a pod (Settings.accelerator_resources)
        )

    async def admit(self, review: AdmissionRequest) -> dict[str, Any]:
        """The AdmissionReview answering `review` (see extender.injection.admission for the steps)."""
        if not wants_wiring(review) or review.pod is None:
            return allowed_response(review.uid)
        pod = review.pod
        namespace = review.namespace or (pod.get("metadata") or {}).get("namespace") or "default"
        try:
            group = pod_group(pod)
            if group is None:
                return allowed_response(review.uid, self._routing(pod))
            podgroup = (
                await asyncio.to_thread(self.podgroup_reader, namespace, group)
                if self.podgroup_reader is not None
                else None
            )
            membership = read_membership(
                pod=pod, namespace=namespace, group=group, podgroup=podgroup
            )
        except AdmissionDenied as denial:
            return _deny(review, str(denial))

        index = membership.explicit_index
        meta = pod.get("metadata") or {}
        try:
            if index is None:
                index = await self.allocator.allocate(
                    namespace=namespace,
                    group=group,
                    task=membership.task,
                    limit=membership.task_limit(),
                    dry_run=review.dry_run,
                    claimant=Claimant(name=str(meta.get("name") or "")),
                )
            else:
                # An index the pod brings is taken through the same per-group lock as an
                # allocated one, so two concurrent creates cannot both hold it.
                await self.allocator.claim(
                    namespace=namespace,
                    group=group,
                    task=membership.task,
                    index=index,
                    claimant=Claimant(
                        name=str(meta.get("name") or ""),
                        owner=index_owner(meta),
                        rewiring=carries_wiring(pod, membership, index),
                    ),
                    dry_run=review.dry_run,
                )
        except NoFreeIndexError as full:
            return _deny(review, no_free_index_message(membership, full.limit))
        except IndexTakenError as taken:
            message = index_taken_message(
                membership,
                meta,
                index=taken.index,
                holder=taken.holder,
                stored=taken.stored,
                hold_left=taken.hold_left,
            )
            return _deny(review, message)
        except PodsUnreadableError as error:
            purpose = (
                "pick a free task index"
                if membership.explicit_index is None
                else f"check that task index {membership.explicit_index} is free"
            )
            message = (
                f"gang-extender could not list the pods of group {group!r} to {purpose} "
                f"({error.detail}); the create can be retried"
            )
            return _deny(review, message, code=UNAVAILABLE_CODE)
        remembered = not review.dry_run

        try:
            check_member_index(membership, index)
            patch = render_pod_patch(pod, membership, index)
        except AdmissionDenied as denial:
            if remembered:
                self.allocator.release(
                    namespace=namespace, group=group, task=membership.task, index=index
                )
            return _deny(review, str(denial))
        log.info(
            "wired pod %s/%s as %s %s[%d]%s (%d patch ops)",
            namespace,
            _pod_name(pod),
            group,
            membership.task,
            index,
            " (dry run)" if review.dry_run else "",
            len(patch),
        )
        routing = self._routing(pod)
        return allowed_response(review.uid, patch + routing + self._gate(pod, bool(routing)))

    def _gate(self, pod: dict[str, Any], routed: bool) -> list[JsonPatchOp]:
        if not self.admission_gate:
            return []
        return admission_gate_ops(pod, routed=routed)

    def _routing(self, pod: dict[str, Any]) -> list[JsonPatchOp]:
        return route_to_gang_scheduler(pod, self.accelerators) if self.route_gpu_pods else []


def _deny(review: AdmissionRequest, message: str, *, code: int | None = None) -> dict[str, Any]:
    pod = review.pod or {}
    log.info("denied pod %s/%s: %s", review.namespace, _pod_name(pod), message)
    if code is None:
        return denied_response(review.uid, message)
    return denied_response(review.uid, message, code=code, reason=UNAVAILABLE_REASON)


def _pod_name(pod: dict[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return str(meta.get("name") or f"{meta.get('generateName') or ''}<generated>")
