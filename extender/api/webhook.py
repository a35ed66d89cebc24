"""HTTP edge of the mutating admission webhook: `POST /mutate` (admission.k8s.io/v1).

A thin shell: the decisions are `extender.injection.admission`'s; this module
only reads the body, looks up the PodGroup, asks the allocator for an index when
the pod brings none (or to claim the one it brings, denied when another live member
of its task holds it), and writes the AdmissionReview back.

HTTP status: 400, with {"error": ...}, only for a body that is too large, not JSON
or not an AdmissionReview (the caller's bug); every decision about a pod, including
a denial, is a 200 AdmissionReview.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import Response

from extender.api.body import BodyError, read_json_body
from extender.injection.admission import (
    AdmissionDenied,
    AdmissionRequest,
    ReviewError,
    allowed_response,
    carries_wiring,
    check_member_index,
    denied_response,
    index_owner,
    index_taken_message,
    no_free_index_message,
    parse_review,
    pod_group,
    read_membership,
    render_pod_patch,
    wants_wiring,
)
from extender.kube.indexes import IndexAllocator
from extender.ports.indexes import (
    Claimant,
    IndexTakenError,
    NoFreeIndexError,
    PodsUnreadableError,
)

log = logging.getLogger(__name__)

PodGroupReader = Callable[[str, str], dict[str, Any] | None]
"""(namespace, name) -> the PodGroup as a JSON dict, or None when there is none."""

# Largest AdmissionReview body read. The API server refuses a request body over 3 MiB,
# so a review carrying one pod (an UPDATE carries two) stays well below this.
MAX_REQUEST_BYTES = 8 * 1024 * 1024

# A denial because the API server could not be read: temporary, the creator retries.
UNAVAILABLE_CODE = 503
UNAVAILABLE_REASON = "ServiceUnavailable"


def create_webhook_app(
    *,
    allocator: IndexAllocator,
    podgroup_reader: PodGroupReader | None = None,
    max_request_bytes: int = MAX_REQUEST_BYTES,
) -> FastAPI:
    """The webhook's FastAPI app. `podgroup_reader` gives spec.minTaskMember; None: no PodGroups.

    A body over `max_request_bytes` is answered with HTTP 400 before it is read in full.
    """
    app = FastAPI(title="gang-extender webhook", docs_url=None, redoc_url=None, openapi_url=None)

    @app.post("/mutate")
    async def mutate(request: Request) -> Response:
        try:
            review = parse_review(await read_json_body(request, max_request_bytes))
        except BodyError as error:
            return _json({"error": error.message}, status=400)
        except ReviewError as error:
            return _json({"error": str(error)}, status=400)
        return _json(await admit(review, allocator=allocator, podgroup_reader=podgroup_reader))

    return app


async def admit(
    review: AdmissionRequest,
    *,
    allocator: IndexAllocator,
    podgroup_reader: PodGroupReader | None,
) -> dict[str, Any]:
    """The AdmissionReview answering `review` (see extender.injection.admission for the steps)."""
    if not wants_wiring(review) or review.pod is None:
        return allowed_response(review.uid)
    pod = review.pod
    namespace = review.namespace or (pod.get("metadata") or {}).get("namespace") or "default"
    try:
        group = pod_group(pod)
        if group is None:
            return allowed_response(review.uid)
        podgroup = (
            await asyncio.to_thread(podgroup_reader, namespace, group)
            if podgroup_reader is not None
            else None
        )
        membership = read_membership(pod=pod, namespace=namespace, group=group, podgroup=podgroup)
    except AdmissionDenied as denial:
        return _deny(review, str(denial))

    index = membership.explicit_index
    meta = pod.get("metadata") or {}
    try:
        if index is None:
            index = await allocator.allocate(
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
            await allocator.claim(
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
            allocator.release(namespace=namespace, group=group, task=membership.task, index=index)
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
    return allowed_response(review.uid, patch)


def _deny(review: AdmissionRequest, message: str, *, code: int | None = None) -> dict[str, Any]:
    pod = review.pod or {}
    log.info("denied pod %s/%s: %s", review.namespace, _pod_name(pod), message)
    if code is None:
        return denied_response(review.uid, message)
    return denied_response(review.uid, message, code=code, reason=UNAVAILABLE_REASON)


def _pod_name(pod: dict[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return str(meta.get("name") or f"{meta.get('generateName') or ''}<generated>")


def _json(body: Any, *, status: int = 200) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type="application/json")
