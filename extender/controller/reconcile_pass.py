"""One group's reconcile inside a pass: timed, and a failure kept to that group.

`ReconcileFaults` owns what the reconciler remembers about groups whose reconcile
raised: the last error as shown (the PodGroup's `Reconciled` condition and a
Warning Event carry it, once per distinct error, until a reconcile of the group
succeeds), and the time each reconcile took (a slow one is named in the log,
since the groups after it in the pass wait for it).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from extender.controller.api_writes import namespace_terminating
from extender.controller.effects import EffectWriter
from extender.domain.objects.limits import clip
from extender.domain.objects.membership import GroupKey
from extender.kube.client import KubeError
from extender.kube.writers import api_error_summary
from extender.metrics import Metrics

log = logging.getLogger(__name__)

# The PodGroup condition (status False, reason RECONCILE_FAILED) of a group whose
# reconcile raised, with the error; absent once a reconcile of it succeeds. Not
# `InvalidSpec`: the spec may be fine, the failure is the service's (a defect).
RECONCILED_CONDITION = "Reconciled"
RECONCILE_FAILED = "ReconcileFailed"
# Warning Event on the members, once per distinct reconcile error of the group.
RECONCILE_FAILED_EVENT = "GangReconcileFailed"
# kind label of gang_extender_api_write_errors_total
WRITE_RECONCILE = "reconcile"
# A group's reconcile this slow is logged by name (a few API calls take milliseconds).
SLOW_RECONCILE_SECONDS = 5.0


class ReconcileFaults:
    """The groups whose last reconcile raised, with the error as shown to the user."""

    def __init__(self, *, metrics: Metrics, writer: EffectWriter) -> None:
        self.metrics = metrics
        self.writer = writer
        self._faults: dict[GroupKey, str] = {}

    def time_taken(self, key: GroupKey, seconds: float) -> None:
        """Observed per group; a slow one named in the log, since it delays every group
        after it in the pass (their wiring, status and lifecycle)."""
        self.metrics.reconcile_seconds.observe(seconds)
        if seconds >= SLOW_RECONCILE_SECONDS:
            log.warning(
                "reconcile of %s took %.1fs; the groups after it in this pass waited", key, seconds
            )

    def resolved(self, key: GroupKey) -> bool:
        """A reconcile of `key` succeeded: True when it had failed before (its
        condition must go)."""
        return self._faults.pop(key, None) is not None

    def forget(self, key: GroupKey) -> None:
        self._faults.pop(key, None)

    def condition(self, key: GroupKey, when: str) -> dict[str, Any] | None:
        """The `Reconciled` condition of a group whose last reconcile raised."""
        fault = self._faults.get(key)
        if fault is None:
            return None
        return {
            "type": RECONCILED_CONDITION,
            "status": "False",
            "reason": RECONCILE_FAILED,
            "message": fault,
            "lastTransitionTime": when,
        }

    async def failed(
        self,
        key: GroupKey,
        err: Exception,
        write_status: Callable[[GroupKey], Awaitable[None]],
    ) -> None:
        """One group's reconcile raised: counted every time; once per distinct error its
        traceback logged, a Warning Event and its PodGroup's `Reconciled` condition
        (it is retried every pass; each would otherwise repeat forever)."""
        self.metrics.gang_faults.labels(where="reconcile").inc()
        said = f"{type(err).__name__}: {clip(str(err), 512)}"
        message = clip(f"gang {key}: reconcile failed ({said}); retried each pass")
        news = self._faults.get(key) != message
        if news:
            self._faults[key] = message
            log.exception("reconcile %s failed (%s); retrying each pass, logged once", key, said)
            self.writer.queue_event(key, RECONCILE_FAILED_EVENT, message, "Warning")
        # Every pass until it is written: the status write skips an unchanged body.
        try:
            await write_status(key)
        except KubeError as write_err:
            if not namespace_terminating(write_err):
                self.metrics.api_write_errors.labels(kind=WRITE_RECONCILE).inc()
            if news:
                log.warning("status of %s: %s; retrying", key, api_error_summary(write_err))
        except Exception:  # noqa: BLE001 -- contained like the reconcile itself
            if news:
                log.exception("status of %s showing its reconcile failure not written", key)
