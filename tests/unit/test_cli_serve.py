"""`gang-extender serve` with bad input: one line on stderr saying what to fix, exit 2.

Every case stops before anything listens or talks to an API server.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from extender.cli import main

KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: not-a-real-token}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("GANG_") or name.startswith("KUBERNETES_SERVICE_"):
            monkeypatch.delenv(name)


@pytest.fixture
def kubeconfig(tmp_path: Path) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG)
    return path


def serve_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """Run `serve` expecting a usage error; its one stderr line."""
    assert main(["serve", *argv]) == 2
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ")
    assert "Traceback" not in err
    return lines[0]


def test_unknown_log_level(capsys: pytest.CaptureFixture[str]) -> None:
    line = serve_error(capsys, "--log-level", "LOUD")
    assert "--log-level='LOUD'" in line
    assert "DEBUG, INFO, WARNING" in line


def test_log_level_is_case_insensitive() -> None:
    from extender.config import Settings

    assert Settings(log_level="debug").log_level == "DEBUG"


def test_invalid_environment_variable(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GANG_EXTENDER_PORT", "eighty")
    monkeypatch.setenv("GANG_LEADER_ELECT", "maybe")
    line = serve_error(capsys)
    assert "GANG_EXTENDER_PORT='eighty'" in line
    assert "GANG_LEADER_ELECT='maybe'" in line


@pytest.mark.parametrize("threads", ["0", "257"])
def test_api_threads_out_of_range_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, threads: str
) -> None:
    monkeypatch.setenv("GANG_API_THREADS", threads)
    assert f"GANG_API_THREADS='{threads}'" in serve_error(capsys)


def test_list_variable_that_is_not_json(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GANG_TLS_HOSTS", "localhost,example.org")
    line = serve_error(capsys)
    assert "GANG_TLS_HOSTS" in line
    assert "JSON" in line


def test_port_out_of_range(capsys: pytest.CaptureFixture[str]) -> None:
    assert "--metrics-port=70000" in serve_error(capsys, "--metrics-port", "70000")


def test_missing_kubeconfig(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    line = serve_error(capsys, "--kubeconfig", str(missing))
    assert f"kubeconfig {missing} does not exist" in line
    assert "--kubeconfig" in line


def test_kubeconfig_that_is_a_directory(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert "does not exist or is not a file" in serve_error(capsys, "--kubeconfig", str(tmp_path))


def test_broken_kubeconfig_is_named_without_quoting_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text("users: [{name: u, user: {token: SECRET-TOKEN}}\n  : : :\n")
    line = serve_error(capsys, "--kubeconfig", str(path))
    assert f"kubeconfig {path} is not usable" in line
    assert "SECRET-TOKEN" not in line


def test_no_kubeconfig_outside_a_cluster(capsys: pytest.CaptureFixture[str]) -> None:
    line = serve_error(capsys)
    assert "no kubeconfig given and no in-cluster configuration" in line
    assert "--kubeconfig" in line


def test_unreadable_tls_cert(
    capsys: pytest.CaptureFixture[str], kubeconfig: Path, tmp_path: Path
) -> None:
    key = tmp_path / "tls.key"
    key.write_text("")
    line = serve_error(
        capsys, "--kubeconfig", str(kubeconfig), "--tls-cert", str(tmp_path), "--tls-key", str(key)
    )
    assert line.startswith("error: --tls-cert/--tls-key: cannot read ")
    assert str(tmp_path) in line


def test_tls_cert_that_is_not_pem(
    capsys: pytest.CaptureFixture[str], kubeconfig: Path, tmp_path: Path
) -> None:
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate")
    line = serve_error(
        capsys, "--kubeconfig", str(kubeconfig), "--tls-cert", str(junk), "--tls-key", str(junk)
    )
    assert f"{junk} is not a PEM certificate" in line


def test_tls_key_missing(
    capsys: pytest.CaptureFixture[str], kubeconfig: Path, tmp_path: Path
) -> None:
    junk = tmp_path / "tls.crt"
    junk.write_text("x")
    line = serve_error(
        capsys,
        "--kubeconfig",
        str(kubeconfig),
        "--tls-cert",
        str(junk),
        "--tls-key",
        str(tmp_path / "missing.key"),
    )
    assert "--tls-cert/--tls-key" in line


def test_tls_dir_that_cannot_be_made(
    capsys: pytest.CaptureFixture[str], kubeconfig: Path, tmp_path: Path
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    line = serve_error(capsys, "--kubeconfig", str(kubeconfig), "--tls-dir", str(blocker / "tls"))
    assert "--tls-dir" in line


def test_tls_cert_without_key(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    line = serve_error(capsys, "--tls-cert", str(tmp_path / "c.pem"))
    assert "--tls-cert and --tls-key go together" in line


def test_bad_policy_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("strategy: [not, a, strategy]\n")
    line = serve_error(capsys, "--policy", str(policy))
    assert f"policy file {policy}" in line


def test_missing_policy_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    line = serve_error(capsys, "--policy", str(tmp_path / "none.yaml"))
    assert "cannot read" in line


def test_serve_keeps_sigpipe_ignored_so_a_closed_connection_cannot_kill_the_service(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # With SIGPIPE at its default, the first write to a connection the peer closed
    # ends the process with no log line (exit -13). Only printing commands reset it.
    before = signal.getsignal(signal.SIGPIPE)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    try:
        assert main(["serve", "--log-level", "bogus"]) == 2
        assert signal.getsignal(signal.SIGPIPE) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGPIPE, before)


def test_the_api_client_keeps_a_connection_for_every_thread_that_may_call_at_once(
    tmp_path: Path,
) -> None:
    from extender.bootstrap import WATCH_CONNECTIONS, api_client_from
    from extender.config import Settings

    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: k, cluster: {server: 'https://127.0.0.1:6443'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
    )
    settings = Settings(kubeconfig=kubeconfig, api_threads=10, binder_workers=5)
    client = api_client_from(settings)
    assert client.configuration.connection_pool_maxsize == 10 + 5 + WATCH_CONNECTIONS


def test_the_service_makes_its_api_calls_on_as_many_threads_as_api_threads_says(
    tmp_path: Path,
) -> None:
    import asyncio
    import threading

    from extender.bootstrap import use_api_threads
    from extender.config import Settings

    # Three calls meet at a barrier of three: only three threads at once let them all
    # through; with fewer, the barrier times out and breaks.
    barrier = threading.Barrier(3, timeout=3)

    def meet() -> str:
        barrier.wait()
        return threading.current_thread().name

    async def three_calls_at_once() -> list[str]:
        use_api_threads(asyncio.get_running_loop(), Settings(api_threads=3))
        return list(await asyncio.gather(*(asyncio.to_thread(meet) for _ in range(3))))

    names = asyncio.run(three_calls_at_once())
    assert all(name.startswith("api") for name in names), names
    assert len(set(names)) == 3

    def too_few() -> None:
        async def one_thread() -> None:
            use_api_threads(asyncio.get_running_loop(), Settings(api_threads=2))
            await asyncio.gather(*(asyncio.to_thread(meet) for _ in range(3)))

        asyncio.run(one_thread())

    barrier.reset()
    with pytest.raises(threading.BrokenBarrierError):
        too_few()
