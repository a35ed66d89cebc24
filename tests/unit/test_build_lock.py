"""hack/lib/lock.sh: a second run of a build waits for the first to finish, saying so.

`make test` (hack/test-all.sh) starts Kueue's and helm's builds beside the first tier, and the tests that
use them run the same build scripts: this lock is what makes them wait for the build
under way instead of starting another.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

LOCK_SH = Path(__file__).resolve().parents[2] / "hack" / "lib" / "lock.sh"


def locker(lock: Path, then: str) -> subprocess.Popen[str]:
    script = f'source "{LOCK_SH}"; build_lock "{lock}"; {then}'
    return subprocess.Popen(
        ["bash", "-c", script],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_second_build_waits_for_the_first_then_goes_on(tmp_path: Path) -> None:
    lock = tmp_path / "piece.lock"
    # The first holds the lock until its stdin closes.
    first = locker(lock, "echo held; cat >/dev/null; echo released")
    second = None
    try:
        assert first.stdout is not None and first.stdout.readline() == "held\n"
        second = locker(lock, "echo got it")
        assert second.stderr is not None
        assert second.stderr.readline().startswith(
            f"waiting for another build of the same piece to finish (lock: {lock})"
        )
        assert second.poll() is None  # still waiting: the first holds the lock
        first.communicate(input="", timeout=30)
        out, err = second.communicate(timeout=30)
        assert second.returncode == 0
        assert out == "got it\n"
        assert "waited" in err
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()


def test_a_build_with_nobody_else_takes_the_lock_without_waiting(tmp_path: Path) -> None:
    done = locker(tmp_path / "deeper" / "piece.lock", "echo got it")
    out, err = done.communicate(timeout=30)
    assert (done.returncode, out, err) == (0, "got it\n", "")
