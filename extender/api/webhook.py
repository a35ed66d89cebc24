"""HTTP edge of the mutating admission webhook: `POST /mutate` (admission.k8s.io/v1).

A thin shell: it reads the body, hands the AdmissionRequest to the `Admitter`
(`extender.admitter`, the use case: PodGroup, task index, patch) and writes the
AdmissionReview it answers back.

HTTP status: 400, with {"error": ...}, only for a body that is too large, not JSON
or not an AdmissionReview (the caller's bug); every decision about a pod, including
a denial, is a 200 AdmissionReview.
"""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import Response

from extender.admitter import Admitter
from extender.api.body import BodyError, read_json_body
from extender.injection.admission import ReviewError, parse_review

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
        return _json(await admitter.admit(review))

    return app


def _json(body: Any, *, status: int = 200) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type="application/json")
