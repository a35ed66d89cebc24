"""PriorityClasses made for the length of a block on a local cluster.

Shared by the e2e tests of priority (the gang queue, preemption, the Workload API)
and the bench's gang workload. Each speaks to the API server through its own client
(kube/rawapi.py's RawApi, the bench's raw-bytes client): both have `call(method,
path, body=...)` and raise an error carrying the HTTP `status`, which is all this
needs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

PRIORITY_CLASSES = "/apis/scheduling.k8s.io/v1/priorityclasses"


class ApiCaller(Protocol):
    def call(self, method: str, path: str, *, body: Any = None) -> object:
        """One request; raises an exception with the answer's `status` on non-2xx."""


def priority_class(name: str, value: int, **fields: Any) -> dict[str, Any]:
    """A PriorityClass `name` of `value`, with `fields` (e.g. preemptionPolicy)."""
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
        **fields,
    }


@contextlib.contextmanager
def temporary_priority_classes(
    api: ApiCaller, values: Mapping[str, int], *, exist_ok: bool = False, **fields: Any
) -> Iterator[None]:
    """PriorityClasses `name: value` (each with `fields`) for the block; deleted after
    (gone already is fine). `exist_ok`: a class already there (left by an earlier run
    on a control plane that is reused) is taken as it is; otherwise it is an error, so
    a test never runs against a class of another value."""
    for name, value in values.items():
        try:
            api.call("POST", PRIORITY_CLASSES, body=priority_class(name, value, **fields))
        except Exception as err:
            if not (exist_ok and _status(err) == 409):
                raise
    try:
        yield
    finally:
        for name in values:
            try:
                api.call("DELETE", f"{PRIORITY_CLASSES}/{name}")
            except Exception as err:
                if _status(err) != 404:
                    raise


def _status(err: Exception) -> int | None:
    """The HTTP status an API client's error carries (None: not an HTTP answer)."""
    status = getattr(err, "status", None)
    return status if isinstance(status, int) else None
