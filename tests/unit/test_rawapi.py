"""RawApi: every way the API server can fail to answer is one error type, KubeError.

Callers (leader election, binder, writers, wiring, the CLI) handle KubeError
alone; an exception of the HTTP library escaping would end a leader's renew
loop or turn a broken bind connection into an unhandled error.
"""

from __future__ import annotations

from typing import Any

import pytest
import urllib3

from extender.kube.rawapi import KubeError, RawApi


class FakeResponse:
    def __init__(self, status: int, body: bytes | Exception, reason: str = "OK") -> None:
        self.status = status
        self.reason = reason
        self._body = body

    def read(self) -> bytes:
        if isinstance(self._body, Exception):
            raise self._body
        return self._body


class FakeRestClient:
    def __init__(self, outcome: FakeResponse | Exception) -> None:
        self.outcome = outcome

    def request(self, method: str, url: str, **kwargs: Any) -> FakeResponse:
        if isinstance(self.outcome, Exception):
            raise self.outcome
        return self.outcome


class FakeApiClient:
    def __init__(self, outcome: FakeResponse | Exception) -> None:
        self.rest_client = FakeRestClient(outcome)

    def param_serialize(self, **kwargs: Any) -> tuple[Any, ...]:
        return ("", "https://api" + kwargs["resource_path"], kwargs["header_params"], None, None)


@pytest.mark.parametrize(
    "outcome",
    [
        pytest.param(ConnectionRefusedError(111, "Connection refused"), id="connection refused"),
        pytest.param(
            urllib3.exceptions.ProtocolError("Connection aborted.", ConnectionResetError()),
            id="connection reset mid-request",
        ),
        pytest.param(
            urllib3.exceptions.ReadTimeoutError(None, "/api", "Read timed out."),  # type: ignore[arg-type]
            id="read timeout",
        ),
        pytest.param(
            FakeResponse(
                200, urllib3.exceptions.ProtocolError("Connection broken: IncompleteRead")
            ),
            id="answer cut off mid-body",
        ),
    ],
)
def test_no_answer_is_a_kube_error_with_status_0(outcome: FakeResponse | Exception) -> None:
    raw = RawApi(FakeApiClient(outcome))  # type: ignore[arg-type]
    with pytest.raises(KubeError) as caught:
        raw.call("GET", "/api/v1/namespaces/default/pods")
    assert caught.value.status == 0
    assert "API server unreachable" in caught.value.message


def test_an_error_status_keeps_its_code_reason_and_message() -> None:
    body = b'{"kind":"Status","reason":"Conflict","message":"the object has been modified"}'
    raw = RawApi(FakeApiClient(FakeResponse(409, body, reason="Conflict")))  # type: ignore[arg-type]
    with pytest.raises(KubeError) as caught:
        raw.call("PUT", "/apis/coordination.k8s.io/v1/namespaces/x/leases/y", body={})
    assert (caught.value.status, caught.value.reason) == (409, "Conflict")
    assert caught.value.message == "the object has been modified"


def test_a_json_answer_is_returned_decoded() -> None:
    raw = RawApi(FakeApiClient(FakeResponse(200, b'{"items": []}')))  # type: ignore[arg-type]
    assert raw.call("GET", "/api/v1/nodes") == {"items": []}


class FakeStreamedBody:
    """urllib3's response under FakeResponse.response, for `pieces`: its pieces, then
    perhaps an error; whether the connection went back to the pool."""

    def __init__(self, pieces: list[bytes], then: Exception | None = None) -> None:
        self.pieces = pieces
        self.then = then
        self.released = False

    def stream(self, amt: int, decode_content: bool) -> Any:
        yield from self.pieces
        if self.then is not None:
            raise self.then

    def read(self) -> bytes:
        return b"".join(self.pieces)

    def release_conn(self) -> None:
        self.released = True


def streamed(status: int, body: FakeStreamedBody, reason: str = "OK") -> FakeResponse:
    response = FakeResponse(status, b"", reason=reason)
    response.response = body  # type: ignore[attr-defined]
    return response


def test_pieces_of_an_answer_come_as_they_arrive_and_the_connection_goes_back() -> None:
    body = FakeStreamedBody([b'{"items":[', b"]}"])
    raw = RawApi(FakeApiClient(streamed(200, body)))  # type: ignore[arg-type]
    assert list(raw.pieces("/api/v1/pods", query={}, read_timeout=5)) == [b'{"items":[', b"]}"]
    assert body.released


@pytest.mark.parametrize(
    ("body", "status", "reason", "message"),
    [
        (
            b'{"kind":"Status","reason":"Forbidden","message":"pods is forbidden"}',
            403,
            "Forbidden",
            "pods is forbidden",
        ),
        (b"404 page not found", 404, "", "404 page not found"),
    ],
)
def test_an_error_status_before_any_piece_is_a_kube_error_with_its_message(
    body: bytes, status: int, reason: str, message: str
) -> None:
    answer = FakeStreamedBody([body])
    raw = RawApi(FakeApiClient(streamed(status, answer, reason="Not OK")))  # type: ignore[arg-type]
    with pytest.raises(KubeError) as caught:
        raw.pieces("/api/v1/pods", query={}, read_timeout=5)  # raised when asked, not when read
    assert (caught.value.status, caught.value.reason, caught.value.message) == (
        status,
        reason,
        message,
    )
    assert caught.value.phrase == "Not OK"
    assert answer.released


def test_an_answer_cut_off_midway_is_a_kube_error_with_status_0() -> None:
    body = FakeStreamedBody(
        [b'{"items":['], then=urllib3.exceptions.ProtocolError("Connection broken: IncompleteRead")
    )
    raw = RawApi(FakeApiClient(streamed(200, body)))  # type: ignore[arg-type]
    pieces = raw.pieces("/api/v1/pods", query={}, read_timeout=5)
    assert next(pieces) == b'{"items":['
    with pytest.raises(KubeError) as caught:
        next(pieces)
    assert caught.value.status == 0
    assert "API server unreachable" in caught.value.message
    assert body.released
