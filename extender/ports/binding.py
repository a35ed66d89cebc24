"""The bind port: how the scheduling side posts a pod's binding, and how that fails.

`SchedulingCoordinator` depends on `Binder`; `kube.writers.ApiBinder` implements it
and raises `BindError`. Neither side imports the other.
"""

from __future__ import annotations

from typing import Protocol


class BindError(Exception):
    """The API server refused a binding; the message is the scheduler's error text.

    `gone`: the pod was deleted (or re-created under a new uid), so it can never be
    bound. `bound_to`: the pod is bound to that other node (someone else bound it).
    Neither: the binding failed and may succeed when kube-scheduler retries it.
    """

    def __init__(self, message: str, *, gone: bool = False, bound_to: str | None = None) -> None:
        super().__init__(message)
        self.gone = gone
        self.bound_to = bound_to


class Binder(Protocol):
    async def bind(self, *, namespace: str, name: str, uid: str, node: str) -> None:
        """POST pods/binding. Raises BindError. Must not be retried blindly: a 409
        means someone bound the pod, maybe us. An implementation that retries reads
        the pod first: already on `node` is success, elsewhere or gone a BindError
        saying so."""
        ...
