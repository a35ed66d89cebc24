"""`ready.hostfile` and the scripts beside it: which members count as Ready, the text,
and the scripts themselves, run with /bin/sh against files in a temporary directory
(they are the code members run; KWOK in e2e runs no containers)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from extender.domain.objects.membership import TASK_INDEX_ANNOTATION
from extender.injection.layout import GroupLayout, LayoutSource, TaskLayout
from extender.injection.ready import (
    ReadyHost,
    is_ready,
    ready_hosts,
    render_ready_data,
    render_ready_hostfile,
)
from extender.injection.scripts import (
    WAIT_GAVE_UP,
    discover_hosts_script,
    wait_for_tasks_script,
)
from tests.builders import make_pod

LAYOUT = GroupLayout(
    group="hvd",
    tasks=(TaskLayout("master", 1, 1), TaskLayout("worker", 2, 1)),
    source=LayoutSource.PODGROUP_MIN_TASK_MEMBER,
)


def member(
    task: str, index: int, *, ready: bool = True, gpus: int = 0, node: str | None = "n1"
) -> dict[str, Any]:
    builder = make_pod(f"hvd-{task}-{index}-abc").group("hvd").task(task)
    builder = builder.annotation(TASK_INDEX_ANNOTATION, str(index))
    if gpus:
        builder = builder.gpus(gpus)
    if node is not None:
        builder = builder.node(node)
    pod = builder.obj()
    pod["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "True"},
        {"type": "Ready", "status": "True" if ready else "False"},
    ]
    return pod


class TestIsReady:
    def test_placed_running_and_ready(self) -> None:
        assert is_ready(member("worker", 0))

    def test_a_ready_condition_false_is_not_ready(self) -> None:
        assert not is_ready(member("worker", 0, ready=False))

    def test_no_conditions_yet_is_not_ready(self) -> None:
        pod = member("worker", 0)
        del pod["status"]["conditions"]
        assert not is_ready(pod)

    def test_a_terminating_pod_leaves_at_once(self) -> None:
        pod = member("worker", 0)
        pod["metadata"]["deletionTimestamp"] = "2026-11-25T10:00:00Z"
        assert not is_ready(pod)

    def test_a_finished_pod_is_not_ready(self) -> None:
        pod = member("worker", 0)
        pod["status"]["phase"] = "Succeeded"
        assert not is_ready(pod)

    def test_an_unplaced_pod_is_not_ready(self) -> None:
        assert not is_ready(member("worker", 0, node=None))


class TestReadyHosts:
    def test_only_ready_members_in_layout_order_then_index(self) -> None:
        pods = [
            member("worker", 1, gpus=2),
            member("worker", 0, ready=False),
            member("master", 0),
        ]
        assert ready_hosts("hvd", LAYOUT, pods) == [
            ReadyHost("master", 0, "hvd-master-0.hvd", 1),
            ReadyHost("worker", 1, "hvd-worker-1.hvd", 2),
        ]

    def test_members_beyond_the_layout_join_when_ready(self) -> None:
        pods = [member("worker", index) for index in (3, 0, 2, 1)]
        assert [host.fqdn for host in ready_hosts("hvd", LAYOUT, pods)] == [
            f"hvd-worker-{index}.hvd" for index in range(4)
        ]

    def test_a_task_outside_the_layout_comes_after_it(self) -> None:
        pods = [member("ps", 0), member("worker", 0)]
        assert [host.task for host in ready_hosts("hvd", LAYOUT, pods)] == ["worker", "ps"]

    def test_a_pod_without_an_index_is_left_out(self) -> None:
        pod = member("worker", 0)
        del pod["metadata"]["annotations"][TASK_INDEX_ANNOTATION]
        assert ready_hosts("hvd", LAYOUT, [pod]) == []

    def test_two_ready_pods_with_one_index_give_one_line(self) -> None:
        first, second = member("worker", 0), member("worker", 0)
        second["metadata"]["name"] = "hvd-worker-0-zzz"
        assert len(ready_hosts("hvd", LAYOUT, [second, first])) == 1


class TestText:
    def test_one_line_per_host_in_hostfile_form(self) -> None:
        hosts = [ReadyHost("worker", 0, "hvd-worker-0.hvd", 1), ReadyHost("worker", 1, "h", 4)]
        assert render_ready_hostfile(hosts) == "hvd-worker-0.hvd slots=1\nh slots=4\n"

    def test_none_ready_is_an_empty_file(self) -> None:
        assert render_ready_hostfile([]) == ""

    def test_the_configmap_keys(self) -> None:
        data = render_ready_data("hvd", LAYOUT, [member("worker", 0, gpus=8)])
        assert data == {
            "ready.hostfile": "hvd-worker-0.hvd slots=8\n",
            "discover_hosts.sh": discover_hosts_script("hvd"),
            "wait_for_tasks.sh": wait_for_tasks_script("hvd"),
        }

    def test_an_unchanged_readiness_renders_the_same_text(self) -> None:
        pods = [member("worker", 0), member("worker", 1, ready=False)]
        again = [member("worker", 1, ready=False), member("worker", 0)]
        again[0]["metadata"]["resourceVersion"] = "99"  # another status update
        assert render_ready_data("hvd", LAYOUT, pods) == render_ready_data("hvd", LAYOUT, again)


def mounted(tmp_path: Path, ready: str, **files: str) -> Path:
    """A directory laid out as the ConfigMap volume at /etc/volcano."""
    (tmp_path / "discover_hosts.sh").write_text(discover_hosts_script("hvd"))
    (tmp_path / "wait_for_tasks.sh").write_text(wait_for_tasks_script("hvd"))
    (tmp_path / "ready.hostfile").write_text(ready)
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    return tmp_path


# Images differ in their /bin/sh (dash, bash, busybox ash): each one found here runs
# every script test.
SHELLS = [
    shell
    for shell in ("/bin/sh", shutil.which("bash"), shutil.which("busybox"))
    if shell is not None
]


@pytest.fixture(params=SHELLS)
def sh(request: pytest.FixtureRequest) -> list[str]:
    """The command that runs a script with one of the shells."""
    shell = str(request.param)
    return [shell, "sh"] if shell.endswith("busybox") else [shell]


def run(sh: list[str], script: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*sh, str(script), *args],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", **env},
        timeout=60,
        check=False,
    )


class TestDiscoverHostsScript:
    def test_prints_host_colon_slots_per_ready_member(self, tmp_path: Path, sh: list[str]) -> None:
        data = render_ready_data(
            "hvd", LAYOUT, [member("worker", 0, gpus=2), member("worker", 1), member("master", 0)]
        )
        folder = mounted(tmp_path, data["ready.hostfile"])
        done = run(sh, folder / "discover_hosts.sh")
        assert (done.returncode, done.stderr) == (0, "")
        assert done.stdout == "hvd-master-0.hvd:1\nhvd-worker-0.hvd:2\nhvd-worker-1.hvd:1\n"

    def test_nobody_ready_prints_nothing(self, tmp_path: Path, sh: list[str]) -> None:
        done = run(sh, mounted(tmp_path, "") / "discover_hosts.sh")
        assert (done.returncode, done.stdout) == (0, "")

    def test_a_last_line_without_newline_still_counts(self, tmp_path: Path, sh: list[str]) -> None:
        done = run(sh, mounted(tmp_path, "a.hvd slots=1\nb.hvd slots=3") / "discover_hosts.sh")
        assert done.stdout == "a.hvd:1\nb.hvd:3\n"

    def test_a_missing_hostfile_is_an_error_that_says_so(
        self, tmp_path: Path, sh: list[str]
    ) -> None:
        folder = mounted(tmp_path, "")
        (folder / "ready.hostfile").unlink()
        done = run(sh, folder / "discover_hosts.sh")
        assert done.returncode == 1
        assert "ready.hostfile is missing" in done.stderr

    def test_output_follows_the_file_when_the_configmap_is_refreshed(
        self, tmp_path: Path, sh: list[str]
    ) -> None:
        folder = mounted(tmp_path, "hvd-worker-0.hvd slots=1\n")
        assert run(sh, folder / "discover_hosts.sh").stdout == "hvd-worker-0.hvd:1\n"
        (folder / "ready.hostfile").write_text(
            "hvd-worker-0.hvd slots=1\nhvd-worker-1.hvd slots=1\n"
        )
        assert run(sh, folder / "discover_hosts.sh").stdout.splitlines() == [
            "hvd-worker-0.hvd:1",
            "hvd-worker-1.hvd:1",
        ]


TWO_WORKERS_READY = "hvd-master-0.hvd slots=1\nhvd-worker-0.hvd slots=1\nhvd-worker-1.hvd slots=1\n"


class TestWaitForTasksScript:
    def test_returns_at_once_when_every_member_of_the_task_is_ready(
        self, tmp_path: Path, sh: list[str]
    ) -> None:
        folder = mounted(tmp_path, TWO_WORKERS_READY, VC_WORKER_NUM="2")
        done = run(sh, folder / "wait_for_tasks.sh", "worker", GANG_WAIT_TIMEOUT_SECONDS="0")
        assert done.returncode == 0, done.stderr
        assert "group hvd: worker Ready" in done.stderr

    def test_times_out_with_a_message_naming_what_is_short(
        self, tmp_path: Path, sh: list[str]
    ) -> None:
        folder = mounted(tmp_path, TWO_WORKERS_READY, VC_WORKER_NUM="3")
        done = run(sh, folder / "wait_for_tasks.sh", "worker", GANG_WAIT_TIMEOUT_SECONDS="0")
        assert done.returncode == 1
        assert done.stderr.splitlines()[-1] == (
            f"{WAIT_GAVE_UP} 0s: group hvd has too few Ready members (task ready/needed):"
            f" worker 2/3"
        )

    def test_a_count_in_the_argument_wins_over_the_task_size(
        self, tmp_path: Path, sh: list[str]
    ) -> None:
        folder = mounted(tmp_path, TWO_WORKERS_READY, VC_WORKER_NUM="4")
        done = run(sh, folder / "wait_for_tasks.sh", "worker=2", GANG_WAIT_TIMEOUT_SECONDS="0")
        assert done.returncode == 0, done.stderr

    def test_every_task_named_must_be_ready(self, tmp_path: Path, sh: list[str]) -> None:
        folder = mounted(tmp_path, TWO_WORKERS_READY, VC_WORKER_NUM="2", VC_PS_SERVER_NUM="1")
        done = run(
            sh, folder / "wait_for_tasks.sh", "worker", "ps-server", GANG_WAIT_TIMEOUT_SECONDS="0"
        )
        assert done.returncode == 1
        assert done.stderr.splitlines()[-1].endswith(": ps-server 0/1")

    def test_hosts_of_another_task_or_group_do_not_count(
        self, tmp_path: Path, sh: list[str]
    ) -> None:
        ready = (
            "hvd-worker-x-0.hvd slots=1\n"  # task worker-x, not worker
            "other-worker-0.other slots=1\n"  # another group
            "hvd-worker-0.hvd slots=1\n"
        )
        folder = mounted(tmp_path, ready, VC_WORKER_NUM="2")
        done = run(sh, folder / "wait_for_tasks.sh", "worker", GANG_WAIT_TIMEOUT_SECONDS="0")
        assert done.returncode == 1
        assert done.stderr.splitlines()[-1].endswith(": worker 1/2")

    def test_an_unknown_task_size_waits_rather_than_passing(
        self, tmp_path: Path, sh: list[str]
    ) -> None:
        folder = mounted(tmp_path, TWO_WORKERS_READY)
        done = run(sh, folder / "wait_for_tasks.sh", "worker", GANG_WAIT_TIMEOUT_SECONDS="0")
        assert done.returncode == 1
        assert done.stderr.splitlines()[-1].endswith(": worker 2/?")

    def test_waits_until_the_refreshed_file_lists_enough(
        self, tmp_path: Path, sh: list[str]
    ) -> None:
        folder = mounted(tmp_path, "hvd-worker-0.hvd slots=1\n", VC_WORKER_NUM="2")
        waiting = subprocess.Popen(
            [*sh, str(folder / "wait_for_tasks.sh"), "worker"],
            stderr=subprocess.PIPE,
            text=True,
            env={
                "PATH": "/usr/bin:/bin",
                "GANG_WAIT_TIMEOUT_SECONDS": "120",
                "GANG_WAIT_INTERVAL_SECONDS": "1",
            },
        )
        try:
            assert waiting.stderr is not None
            first = waiting.stderr.readline()  # it has looked once and is waiting
            assert first.strip().endswith(": worker 1/2")
            assert waiting.poll() is None
            (folder / "ready.hostfile").write_text(TWO_WORKERS_READY)
            assert waiting.wait(timeout=60) == 0
        finally:
            if waiting.poll() is None:
                waiting.kill()
                waiting.wait()

    def test_a_bounded_wait_really_ends(self, tmp_path: Path, sh: list[str]) -> None:
        folder = mounted(tmp_path, "", VC_WORKER_NUM="1")
        # run(sh, ) would raise TimeoutExpired after 60 s if the wait did not end by itself.
        done = run(
            sh,
            folder / "wait_for_tasks.sh",
            "worker",
            GANG_WAIT_TIMEOUT_SECONDS="2",
            GANG_WAIT_INTERVAL_SECONDS="1",
        )
        assert done.returncode == 1
        assert WAIT_GAVE_UP + " 2s" in done.stderr

    @pytest.mark.parametrize(
        ("args", "env"),
        [
            ((), {}),
            (("worker",), {"GANG_WAIT_TIMEOUT_SECONDS": "soon"}),
            (("worker",), {"GANG_WAIT_TIMEOUT_SECONDS": "-1"}),
        ],
    )
    def test_bad_usage_exits_2_with_a_message(
        self, tmp_path: Path, sh: list[str], args: tuple[str, ...], env: dict[str, str]
    ) -> None:
        done = run(sh, mounted(tmp_path, "") / "wait_for_tasks.sh", *args, **env)
        assert done.returncode == 2
        assert done.stderr.startswith("wait-for-tasks: ")


MIXED = (
    "hvd-launcher-0.hvd slots=1\n"
    "hvd-worker-0.hvd slots=1\n"
    "hvd-worker-x-0.hvd slots=1\n"
    "hvd-worker-1.hvd slots=1\n"
)


class TestDiscoverHostsOfSomeTasks:
    def test_named_tasks_only(self, tmp_path: Path, sh: list[str]) -> None:
        done = run(sh, mounted(tmp_path, MIXED) / "discover_hosts.sh", "worker")
        assert done.stdout == "hvd-worker-0.hvd:1\nhvd-worker-1.hvd:1\n"

    def test_tasks_from_the_environment(self, tmp_path: Path, sh: list[str]) -> None:
        done = run(
            sh,
            mounted(tmp_path, MIXED) / "discover_hosts.sh",
            GANG_DISCOVER_TASKS="launcher,worker-x",
        )
        assert done.stdout == "hvd-launcher-0.hvd:1\nhvd-worker-x-0.hvd:1\n"

    def test_a_task_nobody_has_lists_nothing(self, tmp_path: Path, sh: list[str]) -> None:
        done = run(sh, mounted(tmp_path, MIXED) / "discover_hosts.sh", "ps")
        assert (done.returncode, done.stdout) == (0, "")


GAVE_UP_LINE = re.compile(
    r"^wait-for-tasks: gave up after \d+s: group [a-z0-9-]+ has too few Ready members "
    r"\(task ready/needed\):( [a-z0-9-]+ \d+/(\d+|\?))+$"
)


def test_the_give_up_message_docs_webhook_md_quotes_is_the_one_the_script_prints(
    tmp_path: Path,
) -> None:
    docs = (Path(__file__).resolve().parents[2] / "docs" / "webhook.md").read_text()
    quoted = [line for line in docs.splitlines() if line.startswith(WAIT_GAVE_UP)]
    assert quoted, "docs/webhook.md quotes the message a timed-out wait ends with"
    folder = mounted(tmp_path, TWO_WORKERS_READY, VC_WORKER_NUM="3")
    done = run(["/bin/sh"], folder / "wait_for_tasks.sh", "worker", GANG_WAIT_TIMEOUT_SECONDS="0")
    for line in [*quoted, done.stderr.splitlines()[-1]]:
        assert GAVE_UP_LINE.match(line), line
