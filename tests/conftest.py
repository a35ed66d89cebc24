"""Session-wide test hooks: SIGPIPE restored after each test; a dying worker says why.

A worker killed by a signal dies without a word (xdist prints only "node down: Not
properly terminated"). Seen six times; the cause, found (docs/testing.md): a test
running `gang-extender status` through `extender.cli.main` in-process set SIGPIPE to
its default, and the worker's next write to a socket its peer had closed killed it.
Each test now leaves SIGPIPE as it found it (`_sigpipe_restored`). Kept for the next
unexplained death: a worker that gets SIGTERM appends to
`.dev/test/worker-signals.log` (and stderr) which worker, when, the test it was
running and the process list, then dies of the signal as before; a thread watches the
worker's channel to the controller (fds 3 and 4) and logs there should they be closed
under it, with every thread's stack.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import pytest

_running: dict[str, str] = {"test": "(between tests)"}


def pytest_configure(config: pytest.Config) -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    # signal.signal works in the main thread only; a worker run elsewhere goes unreported.
    if worker is None or threading.current_thread() is not threading.main_thread():
        return
    log = Path(config.rootpath) / ".dev" / "test" / "worker-signals.log"

    def report_and_die(signum: int, frame: FrameType | None) -> None:
        try:
            processes = subprocess.run(
                ["ps", "-eo", "pid,ppid,pgid,etimes,args"],
                capture_output=True,
                text=True,
                timeout=5,
            ).stdout
        except (OSError, subprocess.SubprocessError) as err:
            processes = f"(ps failed: {err})\n"
        text = _stamped(
            f"pytest-xdist worker {worker} (pid {os.getpid()}) got "
            f"{signal.Signals(signum).name} while running {_running['test']}; the "
            f"processes then:\n{processes}"
        )
        stderr = sys.__stderr__  # pytest captures sys.stderr
        if stderr is not None:
            stderr.write(text)
        unwritten = _append(log, text)
        if unwritten is not None and stderr is not None:
            stderr.write(f"(not written to {log}: {unwritten})\n")
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    signal.signal(signal.SIGTERM, report_and_die)
    _watch_channel(worker, log)


# execnet's worker dups its stdin and stdout first thing, so its channel to the
# controller is fds 3 and 4; a double close elsewhere that hit either would end the
# worker with no signal and no output, as the unexplained deaths did.
_CHANNEL_FDS = (3, 4)
_CHANNEL_POLL_SECONDS = 0.05
# Set when the session ends: execnet then closes the channel itself.
_channel_watch_over = threading.Event()


def _fd_identity(fd: int) -> tuple[int, int] | None:
    try:
        st = os.fstat(fd)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def _fd_target(fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError as err:
        return f"closed ({err.strerror})"


def _stamped(text: str) -> str:
    return f"== {time.strftime('%Y-%m-%d %H:%M:%S')} {text}"


def _append(log: Path, text: str) -> OSError | None:
    """Appends `text` to `log`; the error when it could not."""
    try:
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("a") as out:
            out.write(text)
    except OSError as err:
        return err
    return None


def _report(log: Path, text: str) -> None:
    _append(log, _stamped(text))  # a log line lost here has nowhere better to go


def _watch_channel(worker: str, log: Path) -> None:
    """A thread that notices, within 50 ms, the worker's channel fds closed or replaced,
    and logs which, what they are now, the test and every thread's stack."""
    watched = {fd: _fd_identity(fd) for fd in _CHANNEL_FDS if _fd_target(fd).startswith("pipe:")}
    if not watched:
        return
    real_close = os.close

    def close_but_not_the_channel(fd: int) -> None:
        # Python-level closes only (subprocess, os.fdopen'd files use os.close); a
        # C-level one (socket.close) is seen by the thread below, after the fact.
        if fd in watched and _fd_identity(fd) == watched[fd]:
            _report(
                log,
                f"pytest-xdist worker {worker} (pid {os.getpid()}): os.close({fd}) of its "
                f"channel refused (a double close elsewhere?), while running "
                f"{_running['test']}; the caller:\n{''.join(traceback.format_stack())}",
            )
            raise OSError(errno.EBADF, f"fd {fd} is pytest-xdist's channel, not yours")
        real_close(fd)

    os.close = close_but_not_the_channel

    def watch() -> None:
        while not _channel_watch_over.wait(_CHANNEL_POLL_SECONDS):
            changed = {fd: _fd_target(fd) for fd, was in watched.items() if _fd_identity(fd) != was}
            if not changed:
                continue
            stacks = "".join(
                f"-- thread {ident}:\n{''.join(traceback.format_stack(frame))}"
                for ident, frame in sys._current_frames().items()
            )
            _report(
                log,
                f"pytest-xdist worker {worker} (pid {os.getpid()}): its channel fds changed "
                f"under it, now {changed}, while running {_running['test']}; every "
                f"thread's stack:\n{stacks}",
            )
            return

    threading.Thread(target=watch, name="xdist-channel-watch", daemon=True).start()


@pytest.fixture(autouse=True)
def _sigpipe_restored() -> Iterator[None]:
    """Each test leaves SIGPIPE as it found it (ignored, as Python starts).

    A test that runs a printing command through `extender.cli.main` in-process
    (`gang-extender status`) sets SIGPIPE to its default, as the CLI should for a
    pipe into `head`. Left so, the worker's next write to a socket its peer had
    closed killed it with no output: every "worker crashed" of the test runs
    (test_trust.py's TLS client without a certificate, test_ha.py's proxy, ...),
    after test_workload_v135.py's status test had run on the same worker.
    """
    before = signal.getsignal(signal.SIGPIPE)
    yield
    if signal.getsignal(signal.SIGPIPE) != before:
        signal.signal(signal.SIGPIPE, before)


def pytest_unconfigure(config: pytest.Config) -> None:
    _channel_watch_over.set()


def pytest_runtest_logstart(nodeid: str, location: tuple[str, int | None, str]) -> None:
    _running["test"] = nodeid
