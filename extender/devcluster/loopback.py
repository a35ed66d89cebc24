"""Helpers for a control plane on 127.0.0.1: its error, free ports, kubeconfigs, probes.

Used by devcluster/cluster.py (`LocalCluster`) and the modules beside it; the
names are re-exported by cluster.py, where tests and the demo import them.
"""

from __future__ import annotations

import base64
import http.client
import os
import random
import re
import socket
import ssl
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s

from extender.devcluster import pki
from extender.devcluster.process import ManagedProcess


class ClusterError(RuntimeError):
    """The control plane could not be built, started or used."""


# Where outgoing connections take their source ports (Linux); a port picked below
# it is never taken by a client socket between our pick and the server's bind.
EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
# The lowest port picked: below it live well-known and registered services.
LOWEST_PICKED_PORT = 10000
# Random picks tried before falling back to the kernel's choice (bind to port 0).
PICK_ATTEMPTS = 200


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    return free_ports(1)[0]


def free_ports(
    count: int,
    *,
    ephemeral_range_file: Path = EPHEMERAL_RANGE_FILE,
    rng: random.Random | None = None,
) -> list[int]:
    """``count`` distinct TCP ports on 127.0.0.1 that were free a moment ago.

    Picked at random below the ephemeral range where the system says what it is:
    a port the kernel hands out for bind(0) is in that range, where any outgoing
    connection (parallel test workers open many) can take it before the server
    that was given it binds ("address already in use"). Elsewhere, the kernel's
    choice.
    """
    below = _ephemeral_start(ephemeral_range_file)
    pick = rng or random.SystemRandom()
    sockets: list[socket.socket] = []
    try:
        attempts = 0
        while len(sockets) < count:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            port = 0
            if below is not None and attempts < PICK_ATTEMPTS:
                attempts += 1
                port = pick.randrange(LOWEST_PICKED_PORT, below)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                s.close()
                if port == 0:
                    raise
                continue
            sockets.append(s)  # held until all are picked: the ports are distinct
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _ephemeral_start(path: Path) -> int | None:
    """The first port of the ephemeral range, if the system says and leaves room below."""
    try:
        first = int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return first if first > LOWEST_PICKED_PORT + 1000 else None


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def write_kubeconfig(
    path: Path, server: str, ca_cert: Path, client: pki.CertPair, user: str = "admin"
) -> Path:
    """A kubeconfig with the CA and the client cert/key embedded (portable, kubectl-ready)."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "local",
                "cluster": {"server": server, "certificate-authority-data": _b64(ca_cert)},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": _b64(client.cert),
                    "client-key-data": _b64(client.key),
                },
            }
        ],
        "contexts": [{"name": "local", "context": {"cluster": "local", "user": user}}],
        "current-context": "local",
        "preferences": {},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)
    return path


def http_get(
    port: int, path: str, context: ssl.SSLContext | None = None, timeout: float = 2.0
) -> tuple[int, str]:
    conn: http.client.HTTPConnection
    if context is None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    else:
        conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=timeout, context=context)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read().decode(errors="replace")
    finally:
        conn.close()


def tail_file(path: Path, lines: int) -> list[str]:
    """The last ``lines`` lines of a (possibly large) text file."""
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        block = 64 * 1024
        data = b""
        pos = size
        while pos > 0 and data.count(b"\n") <= lines:
            step = min(block, pos)
            pos -= step
            f.seek(pos)
            data = f.read(step) + data
    return data.decode(errors="replace").splitlines()[-lines:]


def tail_logs(log_dir: Path, first: Sequence[str], lines: int) -> str:
    """The last ``lines`` lines of every log in ``log_dir``, ``first`` ones first."""
    if not log_dir.is_dir():
        return f"(no logs in {log_dir})"
    order = {name: i for i, name in enumerate(first)}
    logs = sorted(log_dir.glob("*.log"), key=lambda p: (order.get(p.stem, len(order)), p.stem))
    parts = []
    for log in logs:
        parts.append(f"===== {log.name} (last {lines} lines) =====")
        try:
            parts.extend(tail_file(log, lines))
        except OSError as exc:
            parts.append(f"(cannot read: {exc})")
    return "\n".join(parts)


def new_namespace(
    api_client: k8s.ApiClient,
    prefix: str,
    labels: Mapping[str, str] | None = None,
    timeout: float = 30,
) -> str:
    """Create a uniquely named namespace and wait for its "default" ServiceAccount.

    The ServiceAccount admission plugin rejects pods until the serviceaccount
    controller has created "default", so callers can create pods right after.
    """
    core = k8s.CoreV1Api(api_client)
    stem = re.sub(r"[^a-z0-9-]+", "-", prefix.lower()).strip("-")[:50] or "ns"
    name = f"{stem}-{uuid.uuid4().hex[:8]}"
    # Raw dict bodies are accepted at runtime; the client's stubs only know models.
    body: Any = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": dict(labels or {})},
    }
    core.create_namespace(body)
    deadline = time.monotonic() + timeout
    while True:
        try:
            core.read_namespaced_service_account("default", name)
            return name
        except k8s.ApiException as exc:
            if exc.status != 404:
                raise
        if time.monotonic() > deadline:
            raise ClusterError(
                f"namespace {name}: ServiceAccount 'default' not created within {timeout}s "
                "(is kube-controller-manager running?)"
            )
        time.sleep(0.1)


def wait_for(
    what: str,
    deadline: float,
    watch: Iterable[ManagedProcess],
    check: Callable[[], bool],
    *,
    exited: Callable[[ManagedProcess], Exception],
    describe_pending: Callable[[], str] | None = None,
    poll_seconds: float = 0.1,
) -> None:
    """Poll `check` until true; `exited(proc)` is raised when a watched process dies first.

    A failed probe (no answer yet) is tried again and named in the timeout's message.
    """
    watch = list(watch)
    last_error: BaseException | None = None
    while True:
        for proc in watch:
            if not proc.alive():
                raise exited(proc)
        try:
            if check():
                return
        except (OSError, http.client.HTTPException, k8s.ApiException) as exc:
            last_error = exc
        if time.monotonic() > deadline:
            detail = f" (still waiting for: {describe_pending()})" if describe_pending else ""
            err = f"; last error: {last_error}" if last_error else ""
            raise ClusterError(f"timed out waiting for {what}{detail}{err}")
        time.sleep(poll_seconds)
