"""The test run itself: SIGPIPE stays ignored from one test to the next (tests/conftest.py).

The two tests run in this order, on one worker (a file stays on one worker): the
first does what `gang-extender status` does when run through `extender.cli.main`
in-process; the second writes to a socket whose peer has closed, which with
SIGPIPE at its default kills the worker with no output instead of raising.
"""

from __future__ import annotations

import signal
import socket

import pytest

from extender import cli


def test_a_printing_command_run_in_process_sets_sigpipe_to_its_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cli, "_status", lambda args: 0)  # no cluster: only the CLI's setup
    assert cli.main(["status", "--kubeconfig", "/dev/null"]) == 0
    assert signal.getsignal(signal.SIGPIPE) == signal.SIG_DFL


def test_the_next_test_finds_sigpipe_ignored_and_a_closed_peer_raises() -> None:
    assert signal.getsignal(signal.SIGPIPE) == signal.SIG_IGN
    ours, theirs = socket.socketpair()
    theirs.close()
    with ours, pytest.raises(BrokenPipeError):
        for _ in range(16):
            ours.sendall(b"x" * 65536)
