"""Leader election on a coordination.k8s.io/v1 Lease, as client-go's leaderelection does.

Only the leader is ready (so the Service sends the scheduler and the API server
to it) and only the leader writes status, Events and wiring. Updates use the
Lease's resourceVersion, so two replicas can never both win one term.

Validity is counted on the monotonic clock from *before* the renew call was sent:
the API server may have written the renewTime at any moment up to our reading of
the answer, so the lease others see can only end later than ours does, never
earlier (counting from the answer would let a slow PUT stretch our term past the
one the standby waits out). `on_change(leading)` is called on the event loop each
time leadership is gained or lost; `term` counts the gains.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

from extender.kube.rawapi import KubeError, RawApi, path_of
from extender.metrics import Metrics

log = logging.getLogger(__name__)


def _micro_time(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse_time(text: str | None) -> float:
    if not text:
        return 0.0
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


class LeaderElector:
    def __init__(
        self,
        raw: RawApi,
        *,
        namespace: str,
        name: str,
        lease_seconds: float,
        renew_seconds: float,
        metrics: Metrics,
        identity: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        on_change: Callable[[bool], None] | None = None,
    ) -> None:
        self.raw = raw
        self.namespace = namespace
        self.name = name
        self.lease_seconds = lease_seconds
        self.renew_seconds = renew_seconds
        self.metrics = metrics
        self.identity = identity or os.environ.get(
            "POD_NAME", f"{socket.gethostname()}-{uuid.uuid4().hex[:6]}"
        )
        self.clock = clock
        self.on_change = on_change
        self.term = 0  # leadership gains so far; a new term starts at each gain
        self._renewed_at: float | None = None  # clock() before the last successful renew
        self._leading = False  # what on_change was last told
        self._task: asyncio.Task[None] | None = None
        # Its own thread: in the default executor a renew would queue behind the API
        # writes and webhook reads (six threads on two cores) and the term could lapse.
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lease")
        # client-go's renewDeadline: a call answered later than this cannot keep the
        # term (validity counts from before it), so it is not waited for longer.
        self.request_timeout = max(1.0, lease_seconds - renew_seconds)

    @property
    def is_leader(self) -> bool:
        # Stop acting as leader once our own lease could have expired for others.
        if self._renewed_at is None:
            return False
        return self.clock() - self._renewed_at < self.lease_seconds

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._task = loop.create_task(self._run(), name="leader-election")

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def _run(self) -> None:
        while True:
            try:
                await self.round()
            except Exception:
                # on_change (plan recovery) raised: the next round must still come, or
                # this replica would stop renewing or never lead again, saying nothing.
                log.exception(
                    "lease %s/%s: a round failed; next in %.1fs",
                    self.namespace,
                    self.name,
                    self.renew_seconds / 2,
                )
            await asyncio.sleep(self.renew_seconds if self.is_leader else self.renew_seconds / 2)

    async def round(self) -> None:
        """One acquire-or-renew attempt; then tell `on_change` if leadership changed."""
        sent_at = self.clock()  # before the PUT: see the module docstring
        try:
            loop = asyncio.get_running_loop()
            won = await loop.run_in_executor(self._executor, self.try_acquire_or_renew)
        except KubeError as err:
            log.warning("lease %s/%s: %s", self.namespace, self.name, err)
            won = False
        if won:
            self._renewed_at = sent_at
        self.observe()

    def observe(self) -> bool:
        """Leading now? Calls `on_change` when that differs from what it was last told."""
        leading = self.is_leader
        if leading != self._leading:
            self._leading = leading
            if leading:
                self.term += 1
                log.info("became leader as %s (term %d)", self.identity, self.term)
            else:
                log.warning("lost the lease %s/%s", self.namespace, self.name)
            if self.on_change is not None:
                self.on_change(leading)
        self.metrics.is_leader.set(1 if leading else 0)
        return leading

    def _path(self, with_name: bool = True) -> str:
        parts = ["apis", "coordination.k8s.io", "v1", "namespaces", self.namespace, "leases"]
        return path_of(*parts, self.name) if with_name else path_of(*parts)

    def try_acquire_or_renew(self) -> bool:
        now = time.time()
        try:
            lease = self.raw.call("GET", self._path(), timeout=self.request_timeout)
        except KubeError as err:
            if err.status != 404:
                raise
            return self._create(now)
        spec: dict[str, Any] = lease.get("spec") or {}
        holder = spec.get("holderIdentity")
        renewed = _parse_time(spec.get("renewTime"))
        duration = float(spec.get("leaseDurationSeconds") or self.lease_seconds)
        if holder and holder != self.identity and now < renewed + duration:
            return False
        transitions = int(spec.get("leaseTransitions") or 0)
        if holder != self.identity:
            transitions += 1
            spec["acquireTime"] = _micro_time(now)
        spec.update(
            holderIdentity=self.identity,
            leaseDurationSeconds=int(self.lease_seconds),
            renewTime=_micro_time(now),
            leaseTransitions=transitions,
        )
        lease["spec"] = spec
        try:
            self.raw.call("PUT", self._path(), body=lease, timeout=self.request_timeout)
        except KubeError as err:
            if err.status == 409:  # someone else updated it first
                return False
            raise
        return True

    def _create(self, now: float) -> bool:
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": int(self.lease_seconds),
                "acquireTime": _micro_time(now),
                "renewTime": _micro_time(now),
                "leaseTransitions": 0,
            },
        }
        try:
            self.raw.call(
                "POST", self._path(with_name=False), body=body, timeout=self.request_timeout
            )
        except KubeError as err:
            if err.status == 409:
                return False
            raise
        return True
