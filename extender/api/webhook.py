"""HTTP edge of the mutating admission webhook: `POST /mutate` (admission.k8s.io/v1).

A thin shell: it reads the body, hands the AdmissionRequest to the `Admitter`
(`extender.admitter`, the use case: PodGroup, task index, patch) and writes the
AdmissionReview it answers back.

HTTP status: 400, with {"error": ...}, only for a body that is too large, not JSON
or not an AdmissionReview (the caller's bug); every decision about a pod, including
a denial, is a 200 AdmissionReview. A pod the admission code fails to read (a field
of a JSON type the API server would never send, found by fuzzing) is denied, with
the failure logged: never a 500, never an exception out of the handler.

One writer: the webhook answers on every replica, leader or not. Pod creation must
not wait for a hand-over, and what it decides (a free task index) is derived from
the group's pods on the API server (`kube.indexes`), not from this replica's memory,
so two replicas cannot hand out diverging indexes for long (see docs/design.md).
"""

from __future__ import annotations

import logging
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import Response

from extender.admitter import Admitter
from extender.api.body import BodyError, read_json_body
from extender.injection.admission import ReviewError, denied_response, parse_review

log = logging.getLogger(__name__)

# Largest AdmissionReview body read. The API server refuses a request body over 3 MiB,
# so a review carrying one pod (an UPDATE carries two) stays well below this.
MAX_REQUEST_BYTES = 8 * 1024 * 1024


def create_webhook_app(
    *,
    admitter: Admitter,
    max_request_bytes: int = MAX_REQUEST_BYTES,
) -> FastAPI:
    """The webhook's FastAPI app, answering with `admitter`.

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
        try:
            return _json(await admitter.admit(review))
        except Exception as err:
            log.exception("admission of %s/%s failed", review.namespace, review.uid)
            return _json(
                denied_response(
                    review.uid,
                    f"gang-extender could not read this pod ({type(err).__name__}); check the "
                    "types of its labels, annotations and resources",
                )
            )

    return app


def _json(body: Any, *, status: int = 200) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type="application/json")
