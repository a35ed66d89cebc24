"""A real Kubernetes control plane on 127.0.0.1, for end-to-end tests and the demo.

    bin_dir = ensure_binaries()
    with LocalCluster(tmp_path / "cluster", bin_dir) as cluster:
        api = cluster.api_client()
        add_gpu_nodes(api, 4)            # from extender.devcluster.nodes
        ...

It runs etcd, kube-apiserver, kube-controller-manager, the default kube-scheduler
and kwok (which plays the kubelet for fake nodes), each as a child process in its
own process group with its output in ``<workdir>/logs/<component>.log``. Nothing
listens on anything but 127.0.0.1 and every port is picked free at start.
Each ``start()`` begins with an empty etcd.
"""

from __future__ import annotations

import atexit
import base64
import http.client
import os
import re
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml
from kubernetes import client as k8s

from extender.devcluster import pki
from extender.devcluster.process import GroupWatchdog, ManagedProcess

__all__ = [
    "ClusterError",
    "LocalCluster",
    "ManagedProcess",
    "binary_version",
    "ensure_binaries",
    "free_port",
    "free_ports",
    "new_namespace",
]

BUILD_SCRIPT = Path(__file__).resolve().parents[2] / "hack" / "build-control-plane.sh"
REQUIRED_BINARIES = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
    "kwok",
)
BIN_DIR_ENV = "GANG_E2E_BIN_DIR"
# The Kubernetes release to build and run (e.g. v1.35.4); unset means the build
# script's default. Every release has its wrapper module in hack/k8s-build/v1.<minor>/.
VERSION_ENV = "K8S_VERSION"
_VERSION = re.compile(r"\bv1\.\d+\.\d+\b")
SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"
POD_CIDR = "10.244.0.1/16"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc"
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_NODE_ANNOTATION_VALUE = "fake"

_START_ATTEMPTS = 3
_PORT_IN_USE = re.compile(r"address already in use", re.IGNORECASE)


class ClusterError(RuntimeError):
    """The control plane could not be built, started or used."""


# --------------------------------------------------------------------------- binaries


def _missing_binaries(bin_dir: Path) -> list[str]:
    return [b for b in REQUIRED_BINARIES if not os.access(bin_dir / b, os.X_OK)]


def binary_version(bin_dir: Path) -> str:
    """The Kubernetes release the binaries in ``bin_dir`` were built at (``v1.37.2``)."""
    try:
        out = subprocess.run(
            [str(bin_dir / "kube-apiserver"), "--version"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise ClusterError(f"cannot run {bin_dir / 'kube-apiserver'} --version: {exc}") from exc
    found = _VERSION.search(out)
    if found is None:
        raise ClusterError(f"{bin_dir / 'kube-apiserver'} --version printed no version: {out!r}")
    return found.group(0)


def ensure_binaries(*, force: bool = False, version: str | None = None) -> Path:
    """Return the directory holding the control-plane binaries, building them if needed.

    ``version`` (default ``$K8S_VERSION``, else the build script's default
    release) picks the Kubernetes release; each one has its own cache directory.
    ``$GANG_E2E_BIN_DIR``, when set, names a prebuilt directory and skips the
    build; if a version was asked for too, the binaries must be that version.
    Otherwise runs ``hack/build-control-plane.sh`` (a no-op when the cache
    is current; 12-40 minutes the first time) and returns the bin dir it prints
    last. Build progress (one line per step) goes to our stderr.
    """
    version = version or os.environ.get(VERSION_ENV) or None
    override = os.environ.get(BIN_DIR_ENV)
    if override and not force:
        bin_dir = Path(override).expanduser().resolve()
        missing = _missing_binaries(bin_dir)
        if missing:
            raise ClusterError(f"${BIN_DIR_ENV}={override} lacks: {', '.join(missing)}")
        if version is not None and (found := binary_version(bin_dir)) != version:
            raise ClusterError(
                f"${BIN_DIR_ENV}={override} holds Kubernetes {found}, not the {version} asked for"
            )
        return bin_dir

    env = dict(os.environ)
    if force:
        env["FORCE"] = "1"
    stderr_tail: deque[str] = deque(maxlen=40)
    try:
        proc = subprocess.Popen(
            ["bash", str(BUILD_SCRIPT), *([version] if version else [])],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
    except OSError as exc:
        raise ClusterError(f"cannot run {BUILD_SCRIPT}: {exc}") from exc

    def pump_stderr() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            stderr_tail.append(line)
            sys.stderr.write(line)

    pump = threading.Thread(target=pump_stderr, name="build-control-plane-stderr", daemon=True)
    pump.start()
    assert proc.stdout is not None
    stdout = proc.stdout.read()
    code = proc.wait()
    pump.join(10)
    if code != 0:
        raise ClusterError(
            f"{BUILD_SCRIPT} failed with exit code {code}; last stderr lines:\n"
            + "".join(stderr_tail)
        )
    lines = [ln.strip() for ln in stdout.splitlines() if ln.strip()]
    if not lines:
        raise ClusterError(f"{BUILD_SCRIPT} printed no bin dir; stderr:\n" + "".join(stderr_tail))
    bin_dir = Path(lines[-1])
    missing = _missing_binaries(bin_dir)
    if missing:
        raise ClusterError(f"{BUILD_SCRIPT} succeeded but {bin_dir} lacks: {', '.join(missing)}")
    return bin_dir


# --------------------------------------------------------------------------- helpers


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports on 127.0.0.1 that were free a moment ago."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sockets.append(s)
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()


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


def _http_get(
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


def _tail_file(path: Path, lines: int) -> list[str]:
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


class _ComponentExited(ClusterError):
    def __init__(self, proc: ManagedProcess) -> None:
        self.proc = proc
        tail = "\n".join(_tail_file(proc.log_path, 15)) if proc.log_path.exists() else ""
        self.port_conflict = bool(_PORT_IN_USE.search(tail))
        super().__init__(
            f"{proc.name} exited with code {proc.returncode} during start-up; "
            f"last lines of {proc.log_path}:\n{tail}"
        )


# --------------------------------------------------------------------------- cluster


class LocalCluster:
    """etcd + kube-apiserver + kube-controller-manager + kube-scheduler + kwok on loopback."""

    #: start order; stop() goes in reverse
    COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")

    def __init__(
        self,
        workdir: Path,
        bin_dir: Path | None = None,
        *,
        feature_gates: Mapping[str, Mapping[str, bool]] | None = None,
        runtime_config: Sequence[str] = (),
        kubelet_access: bool = False,
    ) -> None:
        """`feature_gates` per component name (e.g. {"kube-apiserver": {"GenericWorkload":
        True}}) and kube-apiserver's `--runtime-config` entries (e.g.
        "scheduling.k8s.io/v1beta1=true"): for tests of features that are off by default.
        `kubelet_access`: kube-apiserver gets a client certificate for kubelets and
        reaches them by InternalIP, so `kubectl logs/exec` work on real nodes
        (extender.devcluster.realnode).
        """
        self.workdir = Path(workdir).resolve()
        self.feature_gates = {name: dict(gates) for name, gates in (feature_gates or {}).items()}
        unknown = set(self.feature_gates) - set(self.COMPONENTS)
        if unknown:
            raise ClusterError(f"feature gates for unknown components: {sorted(unknown)}")
        self.runtime_config = tuple(runtime_config)
        self.kubelet_access = kubelet_access
        self.bin_dir = Path(bin_dir).resolve() if bin_dir is not None else ensure_binaries()
        missing = _missing_binaries(self.bin_dir)
        if missing:
            raise ClusterError(f"{self.bin_dir} lacks: {', '.join(missing)}")
        self.pki_dir = self.workdir / "pki"
        self.log_dir = self.workdir / "logs"
        self.kubeconfig = self.workdir / "kubeconfig"
        self.ca_cert = self.pki_dir / "ca.crt"
        #: seconds from the start of start() until each component was ready, plus "total"
        self.timings: dict[str, float] = {}
        self._ports: dict[str, int] = {}
        self._pki: pki.ClusterPKI | None = None
        self._all: list[ManagedProcess] = []  # every process ever started, for pids()
        self._live: dict[str, ManagedProcess] = {}  # latest process per name
        self._lock = threading.RLock()
        self._started = False
        self._atexit_registered = False
        self._watchdog: GroupWatchdog | None = None

    # ------------------------------------------------------------------ properties

    @property
    def server(self) -> str:
        if "kube-apiserver" not in self._ports:
            raise ClusterError("the cluster has not been started")
        return f"https://127.0.0.1:{self._ports['kube-apiserver']}"

    @property
    def ports(self) -> dict[str, int]:
        """Listening port per component (etcd, etcd-peer, kube-apiserver, ..., kwok)."""
        return dict(self._ports)

    @property
    def processes(self) -> dict[str, ManagedProcess]:
        """The latest process started under each name (components and extras)."""
        with self._lock:
            return dict(self._live)

    def process(self, name: str) -> ManagedProcess:
        with self._lock:
            try:
                return self._live[name]
            except KeyError:
                raise ClusterError(f"no process named {name!r}") from None

    @property
    def running(self) -> bool:
        return self._started

    # ------------------------------------------------------------------ context manager

    def __enter__(self) -> LocalCluster:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # ------------------------------------------------------------------ clients

    def api_client(self) -> k8s.ApiClient:
        """A new ApiClient authenticated as the admin (system:masters)."""
        if self._pki is None:
            raise ClusterError("the cluster has not been started")
        conf = k8s.Configuration()
        conf.host = self.server
        conf.ssl_ca_cert = str(self.ca_cert)
        conf.cert_file = str(self._pki.admin.cert)
        conf.key_file = str(self._pki.admin.key)
        conf.verify_ssl = True
        return k8s.ApiClient(conf)

    def client_kubeconfig(
        self, name: str, common_name: str, organizations: Sequence[str] = ()
    ) -> Path:
        """Issue a client cert for another identity and write ``<workdir>/kubeconfigs/<name>``."""
        if self._pki is None:
            raise ClusterError("the cluster has not been started")
        pair = pki.issue_cert(
            self._pki.ca,
            self.pki_dir,
            f"client-{name}",
            common_name=common_name,
            organizations=organizations,
            client=True,
        )
        return write_kubeconfig(
            self.workdir / "kubeconfigs" / name, self.server, self.ca_cert, pair, user=common_name
        )

    def kubectl(self, *args: str, check: bool = True, timeout: float = 60) -> str:
        """Run the bundled kubectl against this cluster and return stdout."""
        result = subprocess.run(
            [str(self.bin_dir / "kubectl"), f"--kubeconfig={self.kubeconfig}", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=self._child_env(),
        )
        if check and result.returncode != 0:
            raise ClusterError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
        return result.stdout

    # ------------------------------------------------------------------ processes

    def _child_env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        env = dict(os.environ)
        env.pop("KUBECONFIG", None)
        no_proxy = [p for p in env.get("NO_PROXY", env.get("no_proxy", "")).split(",") if p]
        for host in ("127.0.0.1", "localhost"):
            if host not in no_proxy:
                no_proxy.append(host)
        env["NO_PROXY"] = env["no_proxy"] = ",".join(no_proxy)
        if extra:
            env.update(extra)
        return env

    def start_process(
        self, name: str, argv: list[str], env: dict[str, str] | None = None
    ) -> ManagedProcess:
        """Start an extra process tracked like the components (stop() ends it too).

        Output goes to ``log_dir/<name>.log`` (appended). ``env`` is added on top of
        this process's environment. Starting a name whose process is still alive is
        an error; a dead one is replaced.
        """
        with self._lock:
            current = self._live.get(name)
            if current is not None and current.alive():
                raise ClusterError(
                    f"a process named {name!r} is already running (pid {current.pid})"
                )
            if self._watchdog is None:
                # Ends our process groups should this Python process die without stop().
                self._watchdog = GroupWatchdog(label=str(self.workdir))
            proc = ManagedProcess(
                name,
                argv,
                self.log_dir / f"{name}.log",
                env=self._child_env(env),
                cwd=self.workdir,
                on_gone=self._watchdog.unregister,
            )
            self._watchdog.register(proc.pid)
            self._all.append(proc)
            self._live[name] = proc
            if not self._atexit_registered:
                atexit.register(self.stop)
                self._atexit_registered = True
            return proc

    def pids(self) -> list[int]:
        """Every pid this cluster ever started (components and extras)."""
        with self._lock:
            return [p.pid for p in self._all]

    def tail_logs(self, lines: int = 40) -> str:
        """The last ``lines`` lines of every log in log_dir, one section per log."""
        if not self.log_dir.is_dir():
            return f"(no logs in {self.log_dir})"
        order = {name: i for i, name in enumerate(self.COMPONENTS)}
        logs = sorted(
            self.log_dir.glob("*.log"),
            key=lambda p: (order.get(p.stem, len(order)), p.stem),
        )
        parts = []
        for log in logs:
            parts.append(f"===== {log.name} (last {lines} lines) =====")
            try:
                parts.extend(_tail_file(log, lines))
            except OSError as exc:
                parts.append(f"(cannot read: {exc})")
        return "\n".join(parts)

    # ------------------------------------------------------------------ start / stop

    def start(self, timeout: float = 120) -> None:
        """Start every component and wait until the cluster is usable.

        Usable means: apiserver /readyz ok, the "default" ServiceAccount exists in
        "default" (controller-manager works), kube-scheduler and kwok healthy.
        On failure everything started is stopped and ClusterError raised with the
        log tails. A port taken between picking and binding is retried.
        """
        with self._lock:
            if self._started:
                raise ClusterError("the cluster is already running")
            deadline = time.monotonic() + timeout
            for attempt in range(1, _START_ATTEMPTS + 1):
                try:
                    self._start_once(deadline)
                    self._started = True
                    return
                except _ComponentExited as exc:
                    logs = self.tail_logs()
                    self.stop()
                    if exc.port_conflict and attempt < _START_ATTEMPTS:
                        continue
                    raise ClusterError(f"control plane failed to start: {exc}\n{logs}") from exc
                except BaseException as exc:
                    logs = self.tail_logs()
                    self.stop()
                    if isinstance(exc, ClusterError):
                        raise ClusterError(f"control plane failed to start: {exc}\n{logs}") from exc
                    raise

    def _start_once(self, deadline: float) -> None:
        t0 = time.monotonic()
        self.timings = {}
        self.log_dir.mkdir(parents=True, exist_ok=True)
        if self._pki is None:
            self._pki = pki.generate_cluster_pki(self.pki_dir)
        self._pki_serving()
        etcd_dir = self.workdir / "etcd"
        shutil.rmtree(etcd_dir, ignore_errors=True)
        names = [
            "etcd",
            "etcd-peer",
            "kube-apiserver",
            "kube-controller-manager",
            "kube-scheduler",
            "kwok",
        ]
        self._ports = dict(zip(names, free_ports(len(names)), strict=True))
        self._write_kubeconfigs()
        self.timings["pki"] = time.monotonic() - t0

        def ready(name: str, since: float) -> None:
            self.timings[name] = time.monotonic() - since

        # etcd
        t = time.monotonic()
        etcd = self._launch("etcd", self._etcd_argv(etcd_dir))
        self._wait("etcd /health", deadline, [etcd], self._etcd_healthy)
        ready("etcd", t)

        # kube-apiserver
        t = time.monotonic()
        apiserver = self._launch("kube-apiserver", self._apiserver_argv())
        self._wait("kube-apiserver /readyz", deadline, [etcd, apiserver], self._apiserver_ready)
        ready("kube-apiserver", t)

        # the rest start together
        t = time.monotonic()
        kcm = self._launch("kube-controller-manager", self._controller_manager_argv())
        scheduler = self._launch("kube-scheduler", self._scheduler_argv())
        # A private HOME keeps kwok away from the user's ~/.kwok/kwok.yaml.
        kwok_home = self.workdir / "kwok-home"
        kwok_home.mkdir(exist_ok=True)
        kwok = self._launch("kwok", self._kwok_argv(), env={"HOME": str(kwok_home)})
        everyone = [etcd, apiserver, kcm, scheduler, kwok]
        pending: dict[str, Callable[[], bool]] = {
            "kube-scheduler": lambda: self._healthz("kube-scheduler"),
            "kwok": lambda: _http_get(self._ports["kwok"], "/healthz")[0] == 200,
            "kube-controller-manager": lambda: self._healthz("kube-controller-manager"),
            "default ServiceAccount": self._default_service_account_exists,
        }

        def all_ready() -> bool:
            for what, check in list(pending.items()):
                try:
                    ok = check()
                except (OSError, http.client.HTTPException, k8s.ApiException):
                    ok = False
                if ok:
                    ready(what, t)
                    del pending[what]
            return not pending

        self._wait(
            "kube-controller-manager, kube-scheduler, kwok and the default ServiceAccount",
            deadline,
            everyone,
            all_ready,
            describe_pending=lambda: ", ".join(pending),
        )
        self.timings["total"] = time.monotonic() - t0

    def _launch(
        self, name: str, argv: Sequence[str], env: dict[str, str] | None = None
    ) -> ManagedProcess:
        return self.start_process(name, list(argv), env)

    def _wait(
        self,
        what: str,
        deadline: float,
        watch: Iterable[ManagedProcess],
        check: Callable[[], bool],
        describe_pending: Callable[[], str] | None = None,
    ) -> None:
        watch = list(watch)
        last_error: BaseException | None = None
        while True:
            for proc in watch:
                if not proc.alive():
                    raise _ComponentExited(proc)
            try:
                if check():
                    return
            except (OSError, http.client.HTTPException, k8s.ApiException) as exc:
                last_error = exc
            if time.monotonic() > deadline:
                detail = f" (still waiting for: {describe_pending()})" if describe_pending else ""
                err = f"; last error: {last_error}" if last_error else ""
                raise ClusterError(f"timed out waiting for {what}{detail}{err}")
            time.sleep(0.1)

    def stop(self, grace: float = 10) -> None:
        """Stop every process this cluster started: SIGTERM each process group, wait
        up to ``grace`` seconds in total, SIGKILL what is left. Idempotent."""
        with self._lock:
            procs = list(reversed(self._all))
            for proc in procs:
                proc.terminate()
            deadline = time.monotonic() + grace
            for proc in procs:
                proc.finish(deadline)
            if self._watchdog is not None:
                self._watchdog.close()
                self._watchdog = None
            self._started = False
            if self._atexit_registered:
                atexit.unregister(self.stop)
                self._atexit_registered = False

    # ------------------------------------------------------------------ readiness checks

    def _etcd_healthy(self) -> bool:
        status, body = _http_get(self._ports["etcd"], "/health")
        return status == 200 and '"true"' in body

    def _client_ssl(self) -> ssl.SSLContext:
        assert self._pki is not None
        ctx = ssl.create_default_context(cafile=str(self.ca_cert))
        ctx.load_cert_chain(str(self._pki.admin.cert), str(self._pki.admin.key))
        return ctx

    def _apiserver_ready(self) -> bool:
        status, body = _http_get(self._ports["kube-apiserver"], "/readyz", self._client_ssl())
        return status == 200 and body.strip() == "ok"

    def _healthz(self, component: str) -> bool:
        status, body = _http_get(self._ports[component], "/healthz", self._client_ssl())
        return status == 200 and body.strip() == "ok"

    def component_metrics(self, component: str) -> str:
        """The Prometheus text of a component's /metrics (kube-scheduler's pending pods)."""
        status, body = _http_get(self._ports[component], "/metrics", self._client_ssl(), 10)
        if status != 200:
            raise ClusterError(f"{component} /metrics answered {status}: {body[:200]}")
        return body

    def _default_service_account_exists(self) -> bool:
        with self.api_client() as api:
            try:
                k8s.CoreV1Api(api).read_namespaced_service_account(
                    "default", "default", _request_timeout=5
                )
                return True
            except k8s.ApiException as exc:
                if exc.status == 404:
                    return False
                raise

    # ------------------------------------------------------------------ configuration

    def _pki_serving(self) -> None:
        """Serving certs for the controller-manager and scheduler health ports."""
        assert self._pki is not None
        # Always issued afresh: a workdir reused by a new LocalCluster has a new CA,
        # and a serving cert left from the old one would fail verification.
        for name in ("kube-controller-manager", "kube-scheduler"):
            pki.issue_cert(
                self._pki.ca,
                self.pki_dir,
                f"{name}-serving",
                common_name=name,
                sans=["127.0.0.1", "localhost"],
                server=True,
            )
        if self.kubelet_access:
            pki.issue_cert(
                self._pki.ca,
                self.pki_dir,
                "apiserver-kubelet-client",
                common_name="kube-apiserver-kubelet-client",
                organizations=["system:masters"],
                client=True,
            )

    def _component_kubeconfig(self, name: str) -> Path:
        return self.workdir / "kubeconfigs" / name

    def _write_kubeconfigs(self) -> None:
        assert self._pki is not None
        write_kubeconfig(self.kubeconfig, self.server, self.ca_cert, self._pki.admin)
        write_kubeconfig(
            self._component_kubeconfig("kube-controller-manager"),
            self.server,
            self.ca_cert,
            self._pki.controller_manager,
            user="system:kube-controller-manager",
        )
        write_kubeconfig(
            self._component_kubeconfig("kube-scheduler"),
            self.server,
            self.ca_cert,
            self._pki.scheduler,
            user="system:kube-scheduler",
        )

    def _bin(self, name: str) -> str:
        return str(self.bin_dir / name)

    def _etcd_argv(self, data_dir: Path) -> list[str]:
        client = f"http://127.0.0.1:{self._ports['etcd']}"
        peer = f"http://127.0.0.1:{self._ports['etcd-peer']}"
        return [
            self._bin("etcd"),
            "--name=default",
            f"--data-dir={data_dir}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=default={peer}",
            "--initial-cluster-state=new",
            "--unsafe-no-fsync",
            "--log-level=warn",
        ]

    def _apiserver_argv(self) -> list[str]:
        p = self._pki
        assert p is not None
        return [
            self._bin("kube-apiserver"),
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self._ports['kube-apiserver']}",
            f"--etcd-servers=http://127.0.0.1:{self._ports['etcd']}",
            f"--cert-dir={self.workdir / 'apiserver-certs'}",
            f"--tls-cert-file={p.apiserver.cert}",
            f"--tls-private-key-file={p.apiserver.key}",
            f"--client-ca-file={p.ca.cert}",
            f"--service-account-key-file={p.sa_public_key}",
            f"--service-account-signing-key-file={p.sa_private_key}",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            f"--api-audiences={SERVICE_ACCOUNT_ISSUER}",
            "--authorization-mode=Node,RBAC",
            f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
            # Endpoint validation rejects loopback addresses for the "kubernetes" service.
            "--endpoint-reconciler-type=none",
            "--allow-privileged=true",
            "--profiling=false",
            *self._kubelet_access_flags(),
            *self._gate_flags("kube-apiserver"),
            *([f"--runtime-config={','.join(self.runtime_config)}"] if self.runtime_config else []),
        ]

    def _kubelet_access_flags(self) -> list[str]:
        if not self.kubelet_access:
            return []
        # A real node's name does not resolve here: reach its kubelet by InternalIP.
        return [
            "--kubelet-preferred-address-types=InternalIP,Hostname",
            f"--kubelet-client-certificate={self.pki_dir / 'apiserver-kubelet-client.crt'}",
            f"--kubelet-client-key={self.pki_dir / 'apiserver-kubelet-client.key'}",
        ]

    def _gate_flags(self, component: str) -> list[str]:
        gates = self.feature_gates.get(component)
        if not gates:
            return []
        listed = ",".join(f"{name}={str(on).lower()}" for name, on in sorted(gates.items()))
        return [f"--feature-gates={listed}"]

    def restart_scheduler(
        self, *, feature_gates: Mapping[str, bool] | None = None, timeout: float = 60
    ) -> None:
        """Restart the default kube-scheduler, with `feature_gates` replacing its gates."""
        with self._lock:
            self.feature_gates["kube-scheduler"] = dict(feature_gates or {})
            old = self._live.get("kube-scheduler")
            if old is not None:
                old.terminate()
                old.finish(time.monotonic() + 10)
            proc = self._launch("kube-scheduler", self._scheduler_argv())
            self._wait(
                "kube-scheduler /healthz",
                time.monotonic() + timeout,
                [proc],
                lambda: self._healthz("kube-scheduler"),
            )

    def _controller_manager_argv(self) -> list[str]:
        p = self._pki
        assert p is not None
        kubeconfig = self._component_kubeconfig("kube-controller-manager")
        return [
            self._bin("kube-controller-manager"),
            f"--kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={self._ports['kube-controller-manager']}",
            f"--tls-cert-file={self.pki_dir / 'kube-controller-manager-serving.crt'}",
            f"--tls-private-key-file={self.pki_dir / 'kube-controller-manager-serving.key'}",
            f"--client-ca-file={p.ca.cert}",
            f"--service-account-private-key-file={p.sa_private_key}",
            f"--root-ca-file={p.ca.cert}",
            f"--cluster-signing-cert-file={p.ca.cert}",
            f"--cluster-signing-key-file={p.ca.key}",
            "--use-service-account-credentials=true",
            "--leader-elect=false",
            # The default 20 qps makes controller start-up and pod churn visibly slower.
            "--kube-api-qps=200",
            "--kube-api-burst=400",
            "--controllers=*",
            f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
            "--profiling=false",
            *self._gate_flags("kube-controller-manager"),
        ]

    def _scheduler_argv(self) -> list[str]:
        p = self._pki
        assert p is not None
        kubeconfig = self._component_kubeconfig("kube-scheduler")
        return [
            self._bin("kube-scheduler"),
            f"--kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={self._ports['kube-scheduler']}",
            f"--tls-cert-file={self.pki_dir / 'kube-scheduler-serving.crt'}",
            f"--tls-private-key-file={self.pki_dir / 'kube-scheduler-serving.key'}",
            f"--client-ca-file={p.ca.cert}",
            "--leader-elect=false",
            "--profiling=false",
            "--v=2",
            *self._gate_flags("kube-scheduler"),
        ]

    def _kwok_argv(self) -> list[str]:
        return [
            self._bin("kwok"),
            f"--kubeconfig={self.kubeconfig}",
            "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}={KWOK_NODE_ANNOTATION_VALUE}",
            f"--server-address=127.0.0.1:{self._ports['kwok']}",
            "--node-ip=127.0.0.1",
            f"--cidr={POD_CIDR}",
        ]
