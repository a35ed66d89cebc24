"""Session-wide test hooks: a pytest-xdist worker that gets SIGTERM says so before dying.

A worker killed by a signal dies without a word (xdist prints only "node down: Not
properly terminated"). Seen five times, in different modules, with no OOM,
segfault or timeout behind it (docs/testing.md): the cause is not found. A worker
that gets SIGTERM now appends to `.dev/test/worker-signals.log` (and stderr) which
worker, when, the test it was running and the process list, then dies of the signal
as before. SIGKILL cannot be caught: a death with no entry there was one.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
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
        text = (
            f"== {time.strftime('%Y-%m-%d %H:%M:%S')} pytest-xdist worker {worker} "
            f"(pid {os.getpid()}) got {signal.Signals(signum).name} while running "
            f"{_running['test']}; the processes then:\n{processes}"
        )
        stderr = sys.__stderr__  # pytest captures sys.stderr
        if stderr is not None:
            stderr.write(text)
        try:
            log.parent.mkdir(parents=True, exist_ok=True)
            with log.open("a") as out:
                out.write(text)
        except OSError as err:
            if stderr is not None:
                stderr.write(f"(not written to {log}: {err})\n")
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    signal.signal(signal.SIGTERM, report_and_die)


def pytest_runtest_logstart(nodeid: str, location: tuple[str, int | None, str]) -> None:
    _running["test"] = nodeid
