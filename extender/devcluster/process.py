"""A subprocess that runs in its own process group with its output in a log file.

Every process of the local control plane is started through :class:`ManagedProcess`
so that stopping it is always the same: SIGTERM to the whole process group, a grace
period, then SIGKILL to the group, and the child reaped so no zombie remains.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

_PR_SET_PDEATHSIG = 1


def _die_with_parent_hook() -> Callable[[], None] | None:
    """A preexec_fn asking Linux to SIGTERM the child if this thread dies.

    PR_SET_PDEATHSIG fires when the *thread* that forked the child exits, so it is
    only armed for children started from the main thread (which lives as long as
    the interpreter). It is a safety net for a test run killed without cleanup.
    """
    if threading.current_thread() is not threading.main_thread():
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def hook() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os.kill(os.getpid(), signal.SIGTERM)

    return hook


@dataclass(frozen=True)
class ScriptRun:
    """What a build script did: its exit code, its stdout, its last stderr lines."""

    code: int
    stdout: str
    stderr_tail: str

    @property
    def last_line(self) -> str | None:
        """The last non-blank stdout line (the build scripts print their output dir last)."""
        lines = [ln.strip() for ln in self.stdout.splitlines() if ln.strip()]
        return lines[-1] if lines else None


def run_build_script(
    argv: Sequence[str], *, env: Mapping[str, str] | None = None, name: str = "build"
) -> ScriptRun:
    """Run a hack/build-*.sh script to its end, its progress lines on our stderr.

    Raises OSError when it cannot be started.
    """
    tail: deque[str] = deque(maxlen=40)
    proc = subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(env) if env is not None else None,
    )

    def pump_stderr() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            tail.append(line)
            sys.stderr.write(line)

    pump = threading.Thread(target=pump_stderr, name=f"{name}-stderr", daemon=True)
    pump.start()
    assert proc.stdout is not None
    stdout = proc.stdout.read()
    code = proc.wait()
    pump.join(10)
    return ScriptRun(code, stdout, "".join(tail))


class ManagedProcess:
    """One child process, alone in a new process group (its pgid is its pid).

    stdout and stderr are appended to ``log_path``. ``on_gone(pid)`` is called once,
    when the leader has been reaped and no process of its group is left.
    """

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_path: Path,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        on_gone: Callable[[int], None] | None = None,
    ) -> None:
        self.name = name
        self.argv = [str(a) for a in argv]
        self.log_path = Path(log_path)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._group_gone = False
        self._on_gone = on_gone
        with open(self.log_path, "ab", buffering=0) as log:
            log.write(
                f"==== {time.strftime('%H:%M:%S')} starting: {' '.join(self.argv)}\n".encode()
            )
            self._popen = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=dict(env) if env is not None else None,
                cwd=str(cwd) if cwd is not None else None,
                start_new_session=True,
                preexec_fn=_die_with_parent_hook(),
                close_fds=True,
            )
        self.pid: int = self._popen.pid

    def __repr__(self) -> str:
        state = "alive" if self.alive() else f"exited {self.returncode}"
        return f"ManagedProcess({self.name!r}, pid={self.pid}, {state})"

    @property
    def returncode(self) -> int | None:
        return self._popen.poll()

    def alive(self) -> bool:
        return self._popen.poll() is None

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the process to exit and return its exit code.

        Raises TimeoutError if it is still running after ``timeout`` seconds.
        """
        try:
            return self._popen.wait(timeout)
        except subprocess.TimeoutExpired:
            raise TimeoutError(
                f"{self.name} (pid {self.pid}) still running after {timeout}s"
            ) from None

    def _signal_group(self, sig: signal.Signals) -> bool:
        """Send ``sig`` to the process group; False once the group is empty."""
        if self._group_gone:
            return False
        try:
            os.killpg(self.pid, sig)
            return True
        except ProcessLookupError:
            # No process left in the group. If the leader is reaped too, the pgid
            # may be reused by an unrelated process later: never signal it again.
            if self._popen.poll() is not None:
                self._group_gone = True
                if self._on_gone is not None:
                    self._on_gone(self.pid)
            return False
        except PermissionError:
            return False

    def terminate(self) -> None:
        """SIGTERM the process group without waiting."""
        self._signal_group(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL the process group at once (for fault tests) and reap the leader."""
        self._signal_group(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._popen.wait(5)

    def stop(self, grace: float = 10) -> int | None:
        """SIGTERM the group, wait up to ``grace`` seconds, then SIGKILL it.

        Idempotent. Returns the exit code of the leader.
        """
        self.terminate()
        self.finish(time.monotonic() + grace)
        return self.returncode

    def finish(self, deadline: float) -> None:
        """After terminate(): wait until ``deadline`` (monotonic), then SIGKILL what is left."""
        while time.monotonic() < deadline:
            if self._popen.poll() is not None and not self._group_alive():
                break
            time.sleep(0.05)
        # SIGKILL anything that ignored SIGTERM (leader or stray group members).
        if self._signal_group(signal.SIGKILL):
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._popen.wait(5)
        self._popen.poll()
        self._signal_group(signal.SIGKILL)  # marks the group gone once empty

    def _group_alive(self) -> bool:
        if self._group_gone:
            return False
        try:
            os.killpg(self.pid, 0)
            return True
        except ProcessLookupError:
            return False
        except PermissionError:
            return True


# Runs in its own session, outside every group it guards. Reads "add <pgid>",
# "del <pgid>" and "quit" lines on stdin. EOF without "quit" means the parent died
# (however it died): SIGTERM every registered group, SIGKILL what is left after a
# grace period, exit.
_WATCHDOG_SOURCE = r"""
import os, signal, sys, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGHUP, signal.SIG_IGN)
groups = set()
for line in sys.stdin:
    cmd, _, arg = line.strip().partition(" ")
    if cmd == "add":
        groups.add(int(arg))
    elif cmd == "del":
        groups.discard(int(arg))
    elif cmd == "quit":
        sys.exit(0)

def signal_all(sig):
    alive = set()
    for pgid in groups:
        try:
            os.killpg(pgid, sig)
            alive.add(pgid)
        except (ProcessLookupError, PermissionError):
            pass
    return alive

groups = signal_all(signal.SIGTERM)
deadline = time.monotonic() + float(sys.argv[1])
while groups and time.monotonic() < deadline:
    time.sleep(0.1)
    groups = signal_all(0)
signal_all(signal.SIGKILL)
"""


class GroupWatchdog:
    """A helper process that ends registered process groups if this process dies.

    PR_SET_PDEATHSIG only reaches direct children, and atexit does not run on
    SIGKILL; the watchdog notices our death through EOF on its stdin and cleans up
    grandchildren too. ``label`` only shows up in ``ps`` (e.g. the cluster workdir).
    """

    def __init__(self, label: str = "", grace: float = 5.0) -> None:
        self._lock = threading.Lock()
        source = f"# gang-extender watchdog for {label}\n{_WATCHDOG_SOURCE}"
        self._popen = subprocess.Popen(
            [sys.executable, "-c", source, str(grace)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
            text=True,
        )
        self.pid = self._popen.pid

    def _send(self, line: str) -> None:
        with self._lock:
            stdin = self._popen.stdin
            if stdin is None or stdin.closed:
                return
            try:
                stdin.write(line + "\n")
                stdin.flush()
            except (BrokenPipeError, ValueError):
                pass

    def register(self, pgid: int) -> None:
        self._send(f"add {pgid}")

    def unregister(self, pgid: int) -> None:
        self._send(f"del {pgid}")

    def close(self, timeout: float = 5.0) -> None:
        """Dismiss the watchdog without it touching anything. Idempotent."""
        self._send("quit")
        with self._lock:
            if self._popen.stdin is not None and not self._popen.stdin.closed:
                with contextlib.suppress(BrokenPipeError):
                    self._popen.stdin.close()
        try:
            self._popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self._popen.kill()
            self._popen.wait()
