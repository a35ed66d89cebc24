"""A raw-JSON client over the `kubernetes` package's connection and auth settings.

The generated model classes cost milliseconds per pod to build, which is too
slow for a watch cache of tens of thousands of pods, so the cache, binder and
writers speak JSON (parsed by orjson) through this one thin layer.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import quote

import orjson
import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.config.config_exception import ConfigException as KubeconfigError

__all__ = [
    "REQUEST_TIMEOUT_SECONDS",
    "KubeError",
    "KubeconfigError",
    "RawApi",
    "load_api_client",
    "path_of",
]

# The start-up and reconcile requests for one small object (the webhook configuration,
# the CA Secret, a job's wiring objects): a slow API server should fail the step (its
# caller retries) rather than hold the worker thread.
REQUEST_TIMEOUT_SECONDS = 10.0


class KubeError(Exception):
    """A non-2xx answer from the API server (status 0: no answer at all)."""

    def __init__(self, status: int, message: str, reason: str = "", *, phrase: str = "") -> None:
        super().__init__(f"{status} {reason}: {message}" if reason else f"{status}: {message}")
        self.status = status
        self.reason = reason  # the Status object's reason ("NotFound"), when the body had one
        self.message = message
        # The HTTP reason phrase ("Not Found"); "" when no answer came.
        self.phrase = phrase


def load_api_client(
    kubeconfig: str | None, *, pool_size: int = 32, retries: int | None = None
) -> k8s.ApiClient:
    """ApiClient from a kubeconfig file, else in-cluster config; `retries`: urllib3's
    connection retries (None: its default of 3), 0 for a command that reports at once."""
    configuration = k8s.Configuration()
    configuration.retries = retries
    if kubeconfig:
        k8s_config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    else:
        k8s_config.load_incluster_config(client_configuration=configuration)
    # Binds of a whole gang go out at once; the default pool (cores x 5) queues them.
    configuration.connection_pool_maxsize = pool_size
    return k8s.ApiClient(configuration)


def path_of(*parts: str) -> str:
    return "/" + "/".join(quote(p, safe="") for p in parts)


class RawApi:
    def __init__(self, api_client: k8s.ApiClient) -> None:
        self.api_client = api_client

    def _send(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | tuple[float, float] | None = None,
    ) -> Any:
        headers = {"Accept": "application/json"}
        if body is not None:
            # The client serialises JSON bodies itself (and passes bytes through
            # only for non-JSON types), so hand it the object.
            headers["Content-Type"] = content_type
        _, url, headers, _, _ = self.api_client.param_serialize(
            method=method,
            resource_path=path,
            query_params=[(k, v) for k, v in (query or {}).items() if v is not None],
            header_params=headers,
            auth_settings=["BearerToken"],
        )
        try:
            return self.api_client.rest_client.request(
                method, url, headers=headers, body=body, _request_timeout=timeout
            )
        except k8s.ApiException as err:
            raise KubeError(err.status or 0, str(err.reason), phrase=str(err.reason)) from None
        except (OSError, urllib3.exceptions.HTTPError) as err:
            # A refused or broken connection, or a read timeout: one error type for
            # every caller, status 0 ("no answer"), which the writers treat as transient.
            raise KubeError(0, f"API server unreachable: {err}") from None

    def call(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float = 30.0,
    ) -> dict[str, Any]:
        """One request; the decoded JSON answer. Raises KubeError on non-2xx."""
        response = self._send(
            method, path, query=query, body=body, content_type=content_type, timeout=timeout
        )
        try:
            raw = response.read()
        except (OSError, urllib3.exceptions.HTTPError) as err:  # cut off mid-answer
            raise KubeError(0, f"API server unreachable: {err}") from None
        if not 200 <= response.status < 300:
            raise _refusal(response.status, raw, str(response.reason or ""))
        try:
            data: Any = orjson.loads(raw) if raw else {}
        except orjson.JSONDecodeError:
            raise KubeError(response.status, f"answer is not JSON: {raw[:200]!r}") from None
        return data if isinstance(data, dict) else {"items": data}

    def pieces(
        self, path: str, *, query: Mapping[str, Any], read_timeout: float
    ) -> Iterator[bytes]:
        """A GET's answer in pieces as they arrive (a list read whole: kube/list_split.py).
        KubeError on a non-2xx answer, raised here, before any piece."""
        response = self._send("GET", path, query=query, timeout=(10.0, read_timeout))
        raw = response.response
        if not 200 <= response.status < 300:
            try:
                raise _refusal(response.status, raw.read(), str(response.reason or ""))
            finally:
                raw.release_conn()
        return _pieces(raw)

    def stream(
        self, path: str, *, query: Mapping[str, Any], read_timeout: float
    ) -> Iterator[dict[str, Any]]:
        """Watch events, one decoded JSON object per line."""
        response = self._send("GET", path, query=query, timeout=(10.0, read_timeout))
        raw = response.response
        try:
            if not 200 <= response.status < 300:
                raise _refusal(response.status, raw.read(), str(response.reason or ""))
            pending = b""
            for chunk in raw.stream(64 * 1024, decode_content=True):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield orjson.loads(line)
            if pending.strip():
                yield orjson.loads(pending)
        finally:
            raw.release_conn()


def _refusal(status: int, body: bytes, phrase: str) -> KubeError:
    """The KubeError of a non-2xx answer: its Status object's message and reason, else
    the start of its text (errors outside the API machinery: "404 page not found")."""
    try:
        data = orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        data = None
    text = body[:300].decode(errors="replace")
    if isinstance(data, dict):
        message, reason = str(data.get("message", text)), str(data.get("reason", ""))
        return KubeError(status, message, reason, phrase=phrase)
    return KubeError(status, text, phrase=phrase)


def _pieces(raw: Any) -> Iterator[bytes]:
    try:
        yield from raw.stream(256 * 1024, decode_content=True)
    except (OSError, urllib3.exceptions.HTTPError) as err:  # cut off mid-answer
        raise KubeError(0, f"API server unreachable: {err}") from None
    finally:
        raw.release_conn()
