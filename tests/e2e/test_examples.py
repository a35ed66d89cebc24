"""Each examples/*/README.md "On the local cluster" block, run as written.

The block's commands run in order, through bash, against the session's cluster
with the gang stack (the `gang_stack` fixture is what `gang-extender dev up`
starts), with kubectl and gang-extender on PATH as `dev up`'s export lines put
them. Substituted: the `dev up` / `dev down` lines (the fixtures do that) and
the namespace, made unique per run. Every command must exit 0. Commands whose
answer comes once the gang is placed are repeated until it does (bounded):
`gang-extender status` until the group's row shows minMember/minMember placed,
`kubectl get pods` until every pod has a node, `kubectl get events` and
`kubectl get configmap` until they print something. Then what the README says
about the output is checked: the status line's comment names the group and
N/N, and every line the ConfigMap command prints is quoted in the README.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from extender.devcluster.cluster import LocalCluster
from tests.e2e.gang_fixtures import SETTLE_SECONDS, delete_namespace, parse_status_table

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted(p.parent for p in (REPO / "examples").glob("*/README.md"))
PLACED = ("Scheduled", "Running", "Succeeded")


def local_block(readme: str) -> list[str]:
    """The commands of the first bash block under the "On the local cluster" heading."""
    heading = re.search(r"^#+ On the local cluster.*$", readme, re.M)
    assert heading, "the README has an 'On the local cluster' section"
    block = re.search(r"```bash\n(.*?)```", readme[heading.end() :], re.S)
    assert block, "with a bash block"
    return [line for line in block.group(1).splitlines() if line.strip()]


def split_comment(line: str) -> tuple[str, str]:
    """(command, comment): the comment is what follows an unquoted `  #`."""
    match = re.search(r"\s+#\s(.*)$", line)
    if match and "'" not in line[match.start() :]:
        return line[: match.start()].strip(), match.group(1).strip()
    return line.strip(), ""


def podgroup_of(example: Path, lines: list[str]) -> tuple[str, int]:
    """(name, minMember) of the PodGroup, of either API group, in the files the block
    applies (`kubectl apply ... -f <file>`): a directory may hold several examples."""
    applied = [
        REPO / m.group(1) for line in lines if (m := re.search(r"kubectl apply .*-f (\S+)", line))
    ]
    for path in applied or sorted(example.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "PodGroup":
                return doc["metadata"]["name"], int(doc["spec"]["minMember"])
    raise AssertionError(f"no PodGroup in {example}")


def ready_when(command: str, comment: str, group: str, min_member: int) -> Callable[[str], bool]:
    """What the output of a command shows once the gang is placed (everything else: at once)."""
    if command.startswith("gang-extender status"):
        # The phases the README's comment names (the gang settles in one of them).
        phases = [p for p in PLACED if p in comment.split() or f"({p})" in comment] or PLACED

        def placed(out: str) -> bool:
            row = parse_status_table(out).get(group, {})
            if row.get("PHASE") == "Succeeded" and "Succeeded" in phases:
                # KWOK completes Job pods at once: a Job whose successPolicy is met
                # (examples/deepspeed) may remove the other members before a poll sees
                # 4/4. The README's GangScheduled Event line checks it was placed whole.
                return True
            return row.get("PLACED/MIN") == f"{min_member}/{min_member}" and row["PHASE"] in phases

        return placed
    if re.match(r"kubectl get pods\b", command):

        def all_on_nodes(out: str) -> bool:
            rows = [line.split() for line in out.splitlines()[1:]]
            header = out.splitlines()[0].split() if out.strip() else []
            if "NODE" not in header or not rows:
                return False
            node = header.index("NODE")
            on_nodes = all(len(r) > node and r[node] != "<none>" for r in rows)
            status = header.index("STATUS") if "STATUS" in header else None
            # As for `gang-extender status` above: KWOK completes Job pods at once, and a
            # Job whose successPolicy is met (examples/deepspeed) removes the members still
            # running, so fewer than minMember may be left. The README's GangScheduled
            # Event line checks the gang was placed whole.
            finished = status is not None and any(
                len(r) > status and r[status] == "Completed" for r in rows
            )
            return on_nodes and (len(rows) >= min_member or finished)

        return all_on_nodes
    if re.match(r"kubectl get (events|configmap)\b", command):
        return lambda out: bool(out.strip()) and "No resources found" not in out
    return lambda out: True


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_the_readme_local_cluster_block_runs_as_written(
    example: Path, cluster: LocalCluster, gang_stack, gpu_nodes, core
) -> None:
    gpu_nodes(3, gpus=4)  # what `gang-extender dev up` makes
    readme = (example / "README.md").read_text()
    lines = local_block(readme)
    group, min_member = podgroup_of(example, lines)
    created = [re.search(r"kubectl create namespace (\S+)", line) for line in lines]
    (original,) = [m.group(1) for m in created if m]
    namespace = f"{original}-{uuid.uuid4().hex[:6]}"
    env = {
        **os.environ,
        "KUBECONFIG": str(cluster.kubeconfig),
        # `dev up`'s PATH: kubectl, and the gang-extender of this interpreter's venv
        # (the repository first on PYTHONPATH, so it is this checkout's code).
        "PATH": os.pathsep.join(
            [str(cluster.bin_dir), str(Path(sys.executable).parent), "/usr/bin:/bin"]
        ),
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    ran: list[str] = []
    try:
        for line in lines:
            command, comment = split_comment(line)
            if not command or command.startswith("#"):
                continue
            if re.match(r"gang-extender dev (up|down)\b", command):
                continue  # the session cluster and gang_stack stand in for them
            command = re.sub(
                rf"(\bnamespace|-n) {re.escape(original)}\b", rf"\1 {namespace}", command
            )
            ready = ready_when(command, comment, group, min_member)
            deadline = time.monotonic() + SETTLE_SECONDS
            while True:
                done = subprocess.run(
                    ["bash", "-c", command],
                    cwd=REPO,
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=120,
                )
                # The group's ConfigMap is written by the controller's next pass after
                # the members are placed: a reader who asks at once may hear NotFound.
                pending = (
                    done.returncode != 0
                    and re.match(r"kubectl get configmap\b", command) is not None
                    and "NotFound" in done.stderr
                    and time.monotonic() <= deadline
                )
                assert pending or done.returncode == 0, (
                    f"{command!r} failed:\n{done.stdout}{done.stderr}"
                )
                if not pending and ready(done.stdout):
                    break
                if time.monotonic() > deadline:
                    pytest.fail(
                        f"{command!r} did not show the gang placed in {SETTLE_SECONDS}s:\n"
                        f"{done.stdout}{done.stderr}"
                    )
                time.sleep(0.5)
            ran.append(command)
            out = done.stdout
            if command.startswith("gang-extender status"):
                # The README's comment says which group and how many are placed.
                assert comment.split()[0] == group, comment
                assert f"{min_member}/{min_member}" in comment, comment
            if re.match(r"kubectl get configmap\b", command):
                for printed in out.strip().splitlines():
                    assert printed.strip() in readme, (
                        f"{command!r} printed {printed!r}, which the README does not show"
                    )
    finally:
        delete_namespace(core, namespace)
    assert any(c.startswith("kubectl apply") for c in ran), ran
    assert any(c.startswith("kubectl get configmap") for c in ran), ran


def test_the_block_reader_finds_commands_and_comments() -> None:
    assert split_comment("kubectl get pods -n x -o wide   # all bound") == (
        "kubectl get pods -n x -o wide",
        "all bound",
    )
    line = "kubectl get configmap a -n x -o jsonpath='{.data.hostfile}'"
    assert split_comment(line) == (line, "")
    readme = "## On the local cluster, by hand\n\n```bash\na  # x\n\nb\n```\n```bash\nc\n```\n"
    assert local_block(readme) == ["a  # x", "b"]
