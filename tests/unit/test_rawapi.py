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
