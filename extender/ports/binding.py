"""The bind port: how the scheduling side posts a pod's binding, and how that fails.

`SchedulingCoordinator` depends on `Binder`; `kube.writers.ApiBinder` implements it
and raises `BindError`. Neither side imports the other.
"""

from __future__ import annotations

from typing import Protocol


class BindError(Exception):
    """The API server refused a binding; the message is the scheduler's error text."""


class Binder(Protocol):
    async def bind(self, *, namespace: str, name: str, uid: str, node: str) -> None:
        """POST pods/binding. Raises BindError. Must not be retried blindly: a 409
        means someone else bound the pod."""
        ...
