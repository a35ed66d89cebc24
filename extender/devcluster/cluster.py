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
import http.client
import os
import re
import shutil
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType

from kubernetes import client as k8s

from extender.devcluster import pki
from extender.devcluster.binaries import (
    BIN_DIR_ENV,
    BUILD_SCRIPT,
    REQUIRED_BINARIES,
    VERSION_ENV,
    binary_version,
    ensure_binaries,
    missing_binaries,
)
from extender.devcluster.control_plane_commands import ControlPlaneCommands
from extender.devcluster.loopback import (
    ClusterError,
    free_port,
    free_ports,
    http_get,
    new_namespace,
    tail_file,
    tail_logs,
    wait_for,
    write_kubeconfig,
)
from extender.devcluster.process import GroupWatchdog, ManagedProcess

__all__ = [
    "BIN_DIR_ENV",
    "BUILD_SCRIPT",
    "REQUIRED_BINARIES",
    "VERSION_ENV",
    "ClusterError",
    "LocalCluster",
    "ManagedProcess",
    "binary_version",
    "ensure_binaries",
    "free_port",
    "free_ports",
    "new_namespace",
    "write_kubeconfig",
]

_START_ATTEMPTS = 3
_PORT_IN_USE = re.compile(r"address already in use", re.IGNORECASE)


class _ComponentExited(ClusterError):
    def __init__(self, proc: ManagedProcess) -> None:
        self.proc = proc
        tail = "\n".join(tail_file(proc.log_path, 15)) if proc.log_path.exists() else ""
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
        missing = missing_binaries(self.bin_dir)
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
        return tail_logs(self.log_dir, self.COMPONENTS, lines)

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
        self.commands.write_files()
        self.timings["pki"] = time.monotonic() - t0

        def ready(name: str, since: float) -> None:
            self.timings[name] = time.monotonic() - since

        # etcd
        t = time.monotonic()
        etcd = self._launch("etcd", self.commands.etcd(etcd_dir))
        self._wait("etcd /health", deadline, [etcd], self._etcd_healthy)
        ready("etcd", t)

        # kube-apiserver
        t = time.monotonic()
        apiserver = self._launch("kube-apiserver", self.commands.apiserver())
        self._wait("kube-apiserver /readyz", deadline, [etcd, apiserver], self._apiserver_ready)
        ready("kube-apiserver", t)

        # the rest start together
        t = time.monotonic()
        kcm = self._launch("kube-controller-manager", self.commands.controller_manager())
        scheduler = self._launch("kube-scheduler", self.commands.scheduler())
        # A private HOME keeps kwok away from the user's ~/.kwok/kwok.yaml.
        kwok_home = self.workdir / "kwok-home"
        kwok_home.mkdir(exist_ok=True)
        kwok = self._launch("kwok", self.commands.kwok(), env={"HOME": str(kwok_home)})
        everyone = [etcd, apiserver, kcm, scheduler, kwok]
        pending: dict[str, Callable[[], bool]] = {
            "kube-scheduler": lambda: self._healthz("kube-scheduler"),
            "kwok": lambda: http_get(self._ports["kwok"], "/healthz")[0] == 200,
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
        wait_for(
            what, deadline, watch, check, exited=_ComponentExited, describe_pending=describe_pending
        )

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
        status, body = http_get(self._ports["etcd"], "/health")
        return status == 200 and '"true"' in body

    def _client_ssl(self) -> ssl.SSLContext:
        assert self._pki is not None
        ctx = ssl.create_default_context(cafile=str(self.ca_cert))
        ctx.load_cert_chain(str(self._pki.admin.cert), str(self._pki.admin.key))
        return ctx

    def _apiserver_ready(self) -> bool:
        status, body = http_get(self._ports["kube-apiserver"], "/readyz", self._client_ssl())
        return status == 200 and body.strip() == "ok"

    def _healthz(self, component: str) -> bool:
        status, body = http_get(self._ports[component], "/healthz", self._client_ssl())
        return status == 200 and body.strip() == "ok"

    def component_metrics(self, component: str) -> str:
        """The Prometheus text of a component's /metrics (kube-scheduler's pending pods)."""
        status, body = http_get(self._ports[component], "/metrics", self._client_ssl(), 10)
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
            proc = self._launch("kube-scheduler", self.commands.scheduler())
            self._wait(
                "kube-scheduler /healthz",
                time.monotonic() + timeout,
                [proc],
                lambda: self._healthz("kube-scheduler"),
            )

    @property
    def commands(self) -> ControlPlaneCommands:
        """Each component's command line, from this start's ports and PKI."""
        return ControlPlaneCommands(
            bin_dir=self.bin_dir,
            workdir=self.workdir,
            ports=dict(self._ports),
            pki=self._pki,
            feature_gates=self.feature_gates,
            runtime_config=self.runtime_config,
            kubelet_access=self.kubelet_access,
        )
