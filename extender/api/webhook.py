"""HTTP edge of the mutating admission webhook: `POST /mutate` (admission.k8s.io/v1).

A thin shell: the decisions are `extender.injection.admission`'s; this module
only reads the body, looks up the PodGroup, asks the allocator for an index when
the pod brings none, and writes the AdmissionReview back.

HTTP status: 400 only for a body that is not an AdmissionReview (the caller's
bug); every decision about a pod, including a denial, is a 200 AdmissionReview.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import orjson
import urllib3
from fastapi import FastAPI, Request
from fastapi.responses import Response
from kubernetes.client.exceptions import ApiException

from extender.injection.admission import (
    AdmissionDenied,
    AdmissionRequest,
    ReviewError,
    allowed_response,
    check_member_index,
    denied_response,
    no_free_index_message,
    parse_review,
    pod_group,
    read_membership,
    render_pod_patch,
    wants_wiring,
)
from extender.kube.indexes import IndexAllocator, NoFreeIndexError

log = logging.getLogger(__name__)

PodGroupReader = Callable[[str, str], dict[str, Any] | None]
"""(namespace, name) -> the PodGroup as a JSON dict, or None when there is none."""

# A denial because the API server could not be read: temporary, the creator retries.
UNAVAILABLE_CODE = 503
UNAVAILABLE_REASON = "ServiceUnavailable"


def create_webhook_app(
    *, allocator: IndexAllocator, podgroup_reader: PodGroupReader | None = None
) -> FastAPI:
    """The webhook's FastAPI app. `podgroup_reader` gives spec.minTaskMember; None: no PodGroups."""
    app = FastAPI(title="gang-extender webhook", docs_url=None, redoc_url=None, openapi_url=None)

    @app.post("/mutate")
    async def mutate(request: Request) -> Response:
        body = await request.body()
        try:
            review = parse_review(orjson.loads(body))
        except orjson.JSONDecodeError as error:
            return _json({"error": f"body is not JSON: {error}"}, status=400)
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
    remembered = False
    if index is None:
        limit = membership.task_limit()
        try:
            index = await allocator.allocate(
                namespace=namespace,
                group=group,
                task=membership.task,
                limit=limit,
                dry_run=review.dry_run,
            )
        except NoFreeIndexError as full:
            return _deny(review, no_free_index_message(membership, full.limit))
        except (ApiException, urllib3.exceptions.HTTPError) as error:
            message = (
                f"gang-extender could not list the pods of group {group!r} to pick a free "
                f"task index ({_describe(error)}); the create can be retried"
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


def _describe(error: Exception) -> str:
    if isinstance(error, ApiException):
        return f"API server answered {error.status} {error.reason}"
    return f"API server unreachable: {error}"


def _json(body: Any, *, status: int = 200) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type="application/json")
