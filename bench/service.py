"""The gang-extender service as the bench drives it: (re)start with timings, HTTPS verbs."""

from __future__ import annotations

import http.client
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from bench.env import BenchEnv
from bench.schedmetrics import serving_flags
from extender.devcluster.cluster import LocalCluster
from extender.devcluster.loopback import free_port
from extender.devcluster.process import ManagedProcess
from extender.devcluster.stack import GangStack

REPO = Path(__file__).resolve().parents[1]

#: How long a (re)started service may take to become ready before the bench gives up.
READY_TIMEOUT_SECONDS = 120.0
READY_POLL_SECONDS = 0.02
#: The old service is SIGKILLed after this: only the new one is measured.
STOP_GRACE_SECONDS = 3.0


# Both schedulers log each attempt and refusal (bench/timeline.py reads the gang
# kube-scheduler's log); the same level for both, so logging costs them alike.
SCHEDULER_VERBOSITY = 3


class BenchStack(GangStack):
    """The product as GangStack runs it; with `service_src`, the service is imported
    from that source tree (before/after runs of every workload on one machine)."""

    def __init__(
        self,
        cluster: LocalCluster,
        service_src: Path | None = None,
        service_env: dict[str, str] | None = None,
    ) -> None:
        path = [str(service_src)] if service_src is not None else []
        super().__init__(
            cluster,
            # `service_env` (--service-env): settings for every start of the service.
            env={**(service_env or {}), "PYTHONPATH": os.pathsep.join([*path, str(REPO)])},
            scheduler_verbosity=SCHEDULER_VERBOSITY,
        )
        #: the gang kube-scheduler's /metrics (its attempt latency, bench/schedmetrics.py)
        self.scheduler_metrics_port = free_port()

    def scheduler_serving_args(self) -> list[str]:
        return serving_flags(self.scheduler_metrics_port)


@dataclass
class StartTimes:
    healthz_s: float  # process start -> /healthz 200 (imports, TLS, listeners up)
    ready_s: float  # process start -> /readyz 200 (caches listed and synced)


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as err:
        return int(err.code)
    except OSError:
        return 0


def restart_service(env: BenchEnv, name: str, *, service_src: Path | None = None) -> StartTimes:
    """Stop the running service and start a new one on the same ports; time it to ready.

    `service_src` runs the service from another source tree (PYTHONPATH first), for
    before/after comparisons of the same bench on the same control plane.
    """
    stack = env.stack
    if stack.service is not None and stack.service.alive():
        stack.service.stop(grace=STOP_GRACE_SECONDS)
    child_env = {"PYTHONUNBUFFERED": "1", **stack.env}
    if service_src is not None:
        child_env["PYTHONPATH"] = os.pathsep.join(
            [str(service_src), child_env.get("PYTHONPATH", "")]
        ).rstrip(os.pathsep)
    started = time.monotonic()
    proc: ManagedProcess = env.cluster.start_process(name, stack.service_argv(), env=child_env)
    stack.service = proc
    healthz: float | None = None
    deadline = started + READY_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if not proc.alive():
            raise RuntimeError(
                f"service {name} exited during start-up:\n{env.cluster.tail_logs(30)}"
            )
        code = _status(f"{stack.metrics_url}/readyz")
        now = time.monotonic()
        if code and healthz is None:
            healthz = now - started
        if code == 200:
            return StartTimes(healthz_s=healthz or now - started, ready_s=now - started)
        time.sleep(READY_POLL_SECONDS)
    raise RuntimeError(f"service {name} not ready after {READY_TIMEOUT_SECONDS:.0f}s")


class ExtenderClient:
    """One keep-alive HTTPS connection to the extender, as kube-scheduler keeps one."""

    def __init__(self, env: BenchEnv, timeout: float = 60.0) -> None:
        self.port = env.stack.extender_port
        self.context = env.stack.https_context()
        self.timeout = timeout
        self._conn: http.client.HTTPSConnection | None = None

    def post(self, verb: str, body: bytes) -> tuple[float, int, bytes]:
        """(seconds, status, body) of one POST /<verb>; the time covers send to last byte."""
        for attempt in (1, 2):
            if self._conn is None:
                self._conn = http.client.HTTPSConnection(
                    "127.0.0.1", self.port, context=self.context, timeout=self.timeout
                )
                self._conn.connect()
            try:
                started = time.perf_counter()
                self._conn.request(
                    "POST", f"/{verb}", body=body, headers={"Content-Type": "application/json"}
                )
                resp = self._conn.getresponse()
                data = resp.read()
                return time.perf_counter() - started, resp.status, data
            except (http.client.HTTPException, OSError):
                self._conn.close()
                self._conn = None
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def extender_args(pod: dict[str, Any], node_names: list[str]) -> bytes:
    """ExtenderArgs as kube-scheduler sends them with nodeCacheCapable: the pod and names."""
    return orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": node_names})


def binding_args(pod: dict[str, Any], node: str) -> bytes:
    meta = pod["metadata"]
    return orjson.dumps(
        {
            "PodName": meta["name"],
            "PodNamespace": meta["namespace"],
            "PodUID": meta["uid"],
            "Node": node,
        }
    )


class PySpy:
    """py-spy attached to the service for a fixed time (optional: only when installed)."""

    def __init__(self, pid: int, out: Path, seconds: float, rate: int = 250) -> None:
        exe = Path(os.environ.get("VIRTUAL_ENV", "")) / "bin" / "py-spy"
        candidates = [exe, Path(__file__).resolve().parents[1] / ".venv" / "bin" / "py-spy"]
        found = next((c for c in candidates if c.is_file()), None)
        self.proc: subprocess.Popen[bytes] | None = None
        self.out = out
        if found is None:
            return
        out.parent.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [
                str(found),
                "record",
                "--pid",
                str(pid),
                "--duration",
                str(int(seconds)),
                "--rate",
                str(rate),
                "--format",
                "raw",
                "--output",
                str(out),
                "--nonblocking",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    @property
    def available(self) -> bool:
        return self.proc is not None

    def stop(self, timeout: float = 30) -> bool:
        """End the recording now (py-spy writes what it has on SIGINT); True when written."""
        if self.proc is None:
            return False
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        return self.wait(timeout)

    def wait(self, timeout: float) -> bool:
        if self.proc is None:
            return False
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.terminate()
            self.proc.wait(10)
        return self.out.is_file()
