"""HTTP scheduler extender: `POST /filter`, `/prioritize`, `/bind`, `/preempt` for kube-scheduler.

A thin adapter: parse the wire format, ask the scheduling port, translate the
core's verdict into `ExtenderFilterResult` / `HostPriority` / `ExtenderBindingResult`.

One writer: each verb asks `acting()` when it acts. A replica that is not the
leader (a deposed one still reached over a kept-alive connection) holds every
candidate in `FailedAndUnresolvableNodes` ("not the leader"), scores nothing and
answers bind with an `Error`: kube-scheduler retries, and its next connection
reaches the leader.

`/preempt` (kube-scheduler's preemptVerb, ProcessPreemption) answers with the
victims per node made whole-gang (domain/preemption/preemption.py `gang_aware_victims`):
nodes dropped, gangs widened to their members on the node; a replica that is not
the leader, or a failure, answers no node (kube-scheduler preempts nothing now
and retries the pod later).

Never a 500: a body that is not the wire format is a 400 naming the field; an
unexpected failure while answering is logged, counted and answered with an
`Error` in a 200 body (prioritize: no scores), which kube-scheduler retries.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import Response
from pydantic import BaseModel, ValidationError

from extender.api.body import BodyError, parse_json, read_json_body, read_limited_body
from extender.api.candidates import CandidateMemo
from extender.api.priority_wire import HostPriorityEncoder
from extender.api.wire import (
    ExtenderArgs,
    ExtenderBindingArgs,
    ExtenderPreemptionArgs,
    node_name,
)
from extender.domain.planning.scoring import Priorities
from extender.domain.preemption.preemption import GangAwareAnswer, NodeVictims
from extender.domain.state.decisions import FilterDecision, Verdict
from extender.metrics import Metrics

Model = TypeVar("Model", bound=BaseModel)

log = logging.getLogger(__name__)

NOT_THE_LEADER = "not the leader: this replica does not hold the lease; retry"


class SchedulingPort(Protocol):
    """What the routes need from the scheduling side (see extender.coordinator)."""

    def filter(self, pod: dict[str, Any], candidates: list[str]) -> FilterDecision: ...

    def prioritize(self, pod: dict[str, Any], candidates: list[str]) -> Priorities:
        """The nodes that score; a candidate not in the answer scores 0."""
        ...

    async def bind(self, *, namespace: str, name: str, uid: str, node: str) -> str:
        """Bind or refuse; returns "" on success, else the error for the scheduler."""
        ...

    def preempt(self, pod: dict[str, Any], proposed: dict[str, NodeVictims]) -> GangAwareAnswer:
        """kube-scheduler's proposed victims per node, made whole-gang."""
        ...


def preemption_result(answer: GangAwareAnswer) -> dict[str, Any]:
    """ExtenderPreemptionResult: the victims kept per node, as MetaVictims."""
    return {
        "NodeNameToMetaVictims": {
            node: {
                "Pods": [{"UID": uid} for uid in victims.uids],
                "NumPDBViolations": victims.pdb_violations,
            }
            for node, victims in answer.nodes.items()
        }
    }


class BadRequest(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def json_response(body: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type="application/json")


async def read_model(request: Request, model: type[Model], max_bytes: int) -> Model:
    try:
        raw = await read_json_body(request, max_bytes)
    except BodyError as err:
        raise BadRequest(err.message) from None
    return validated(model, raw)


def validated(model: type[Model], raw: Any) -> Model:
    if not isinstance(raw, dict):
        raise BadRequest(f"expected a JSON object for {model.__name__}")
    try:
        return model.model_validate(raw)
    except ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or model.__name__}: {e['msg']}"
            for e in err.errors()
        )
        raise BadRequest(f"invalid {model.__name__}: {problems}") from None


async def read_extender_args(request: Request, memo: CandidateMemo, max_bytes: int) -> ExtenderArgs:
    """`read_model(request, ExtenderArgs, ...)`, with the candidates' names parsed only
    when they differ from the last request's (extender/api/candidates.py)."""
    try:
        body = await read_limited_body(request, max_bytes)
        recalled = memo.recall(body)
        if recalled is not None:
            head, names = recalled
            args = validated(ExtenderArgs, head)
            args.NodeNames = names
            return args
        raw = parse_json(body)
    except BodyError as err:
        raise BadRequest(err.message) from None
    args = validated(ExtenderArgs, raw)
    memo.remember(body, args.NodeNames)
    return args


def filter_result(args: ExtenderArgs, decision: FilterDecision) -> dict[str, Any]:
    """ExtenderFilterResult as a plain dict, keys in the model's field order.

    The same JSON as `ExtenderFilterResult(...).model_dump()`, without validating
    and copying an answer that lists up to every node of the cluster twice.
    """
    nodes: dict[str, Any] | None = None
    names: list[str] | None = None
    if args.NodeNames is not None or args.Nodes is None:
        names = decision.nodes
    else:
        keep = set(decision.nodes)
        nodes = {"items": [n for n in args.Nodes.items if node_name(n) in keep]}
    return {
        "Nodes": nodes,
        "NodeNames": names,
        "FailedNodes": decision.failed,
        "FailedAndUnresolvableNodes": decision.unresolvable,
        "Error": "",
    }


def _always() -> bool:
    return True


def create_extender_app(
    *,
    port: SchedulingPort,
    metrics: Metrics,
    max_request_bytes: int,
    acting: Callable[[], bool] = _always,
) -> FastAPI:
    """`acting`: may this replica plan and bind now (controller.failover.Failover.acting)."""
    app = FastAPI(title="gang-extender scheduler extender", docs_url=None, redoc_url=None)
    priorities = HostPriorityEncoder()
    # One per verb: kube-scheduler sends filter and prioritize the same candidates,
    # but a plain pod's filter is not followed by a prioritize of the same list.
    filter_candidates, prioritize_candidates = CandidateMemo(), CandidateMemo()

    async def timed(
        verb: str, work: Callable[[], Awaitable[Response]], failed: Callable[[str], Response]
    ) -> Response:
        started = time.perf_counter()
        try:
            return await work()
        except BadRequest as err:
            metrics.extender_errors.labels(verb=verb).inc()
            return json_response({"Error": err.message}, status=400)
        except Exception as err:  # never a 500: kube-scheduler takes any non-200 as fatal
            log.exception("%s failed", verb)
            metrics.extender_errors.labels(verb=verb).inc()
            return failed(f"internal error in {verb}: {type(err).__name__}; retry")
        finally:
            metrics.request_seconds.labels(verb=verb).observe(time.perf_counter() - started)

    def error_body(message: str) -> Response:
        return json_response({"Error": message})

    def no_scores(_message: str) -> Response:
        return json_response([])

    def not_leader(what: str) -> None:
        metrics.not_leader_refusals.labels(what=what).inc()

    @app.post("/filter")
    async def filter_route(request: Request) -> Response:
        async def work() -> Response:
            args = await read_extender_args(request, filter_candidates, max_request_bytes)
            candidates = args.candidate_names()
            metrics.filter_candidates.observe(len(candidates))
            if not acting():
                not_leader("filter")
                held = FilterDecision(
                    Verdict.WAIT, [], {}, dict.fromkeys(candidates, NOT_THE_LEADER), NOT_THE_LEADER
                )
                return json_response(filter_result(args, held))
            decision = port.filter(args.Pod, candidates)
            return json_response(filter_result(args, decision))

        return await timed("filter", work, error_body)

    @app.post("/prioritize")
    async def prioritize_route(request: Request) -> Response:
        async def work() -> Response:
            args = await read_extender_args(request, prioritize_candidates, max_request_bytes)
            if not acting():
                not_leader("prioritize")
                return json_response([])
            candidates = args.candidate_names()
            scores = port.prioritize(args.Pod, candidates)
            return Response(priorities.encode(scores, candidates), media_type="application/json")

        return await timed("prioritize", work, no_scores)

    @app.post("/bind")
    async def bind_route(request: Request) -> Response:
        async def work() -> Response:
            args = await read_model(request, ExtenderBindingArgs, max_request_bytes)
            if not acting():
                not_leader("bind")
                metrics.extender_errors.labels(verb="bind").inc()
                return json_response({"Error": NOT_THE_LEADER})
            error = await port.bind(
                namespace=args.PodNamespace, name=args.PodName, uid=args.PodUID, node=args.Node
            )
            if error:  # a refused bind (barrier timeout, API error) is an Error body, not a 4xx
                metrics.extender_errors.labels(verb="bind").inc()
            return json_response({"Error": error})

        return await timed("bind", work, error_body)

    def no_preemption(_message: str) -> Response:
        return json_response({"NodeNameToMetaVictims": {}})

    @app.post("/preempt")
    async def preempt_route(request: Request) -> Response:
        async def work() -> Response:
            args = await read_model(request, ExtenderPreemptionArgs, max_request_bytes)
            if not acting():
                not_leader("preempt")
                return no_preemption(NOT_THE_LEADER)
            proposed = {
                node: NodeVictims(tuple(uids), pdb) for node, (uids, pdb) in args.proposed().items()
            }
            answer = port.preempt(args.Pod, proposed)
            if answer.dropped:
                log.info(
                    "preempt: nodes dropped from kube-scheduler's preemption: %s",
                    "; ".join(f"{n}: {why}" for n, why in sorted(answer.dropped.items())),
                )
            return json_response(preemption_result(answer))

        return await timed("preempt", work, no_preemption)

    return app
