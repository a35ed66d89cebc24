"""Every marked shell block of the docs, run as tests/doc_blocks.py says (docs/testing.md).

`run` and `real-cluster` blocks run on the session's cluster with the gang stack
(what `gang-extender dev up` starts) and 3 fake 4-GPU nodes; `install` blocks
(kustomize, Helm) on control planes of their own that have no gang-extender
(`dev up --cluster-only`): one for deploy/ and its overlays, one for the chart.
Each block runs through bash with `set -euo pipefail` in a scratch copy of the
repository's deploy/, charts/, examples/ and policies/, so a block that writes
files (a kustomization of your own) writes there; only namespaces are renamed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

from extender.devcluster.cluster import LocalCluster
from tests.doc_blocks import DOCS, REPO, Block, blocks, namespaces_of, script, unique_namespaces
from tests.e2e.test_chart import helm  # noqa: F401 (the fixture: helm built from its module)

RUN = [b for doc in DOCS for b in blocks(doc) if b.mode in ("run", "real-cluster", "install")]
COPIED = ("deploy", "charts", "examples", "policies")
# The Helm install blocks ask for the helm fixture by name (request.getfixturevalue):
# marked so that the module runs after the builds make test starts beside the first tier.
pytestmark = pytest.mark.after_builds


@pytest.fixture(scope="module")
def install_clusters(
    bin_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, LocalCluster]]:
    """Control planes without gang-extender, started when a block first needs one."""
    started: dict[str, LocalCluster] = {}

    class Lazy(dict[str, LocalCluster]):
        def __missing__(self, kind: str) -> LocalCluster:
            local = LocalCluster(tmp_path_factory.mktemp(f"docs-{kind}"), bin_dir)
            local.start()
            started[kind] = local
            self[kind] = local
            return local

    yield Lazy()
    for local in started.values():
        local.stop()


def scratch(tmp_path: Path) -> Path:
    work = tmp_path / "checkout"
    work.mkdir()
    for name in COPIED:
        shutil.copytree(REPO / name, work / name, symlinks=True)
    return work


def run_block(
    block: Block,
    cluster: LocalCluster,
    work: Path,
    extra_path: list[str],
    renamed: dict[str, str],
) -> subprocess.CompletedProcess[str]:
    text, left = script(block, renamed)
    created = {n for n in renamed if f"create namespace {n}" in block.text}
    env = {
        **os.environ,
        "KUBECONFIG": str(cluster.kubeconfig),
        "HOME": str(work.parent),
        # `dev up`'s PATH: kubectl, and the gang-extender of this interpreter's venv.
        "PATH": os.pathsep.join(
            [str(cluster.bin_dir), *extra_path, str(Path(sys.executable).parent), "/usr/bin:/bin"]
        ),
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    # Namespaces a block names but an earlier one (or the reader) made: made here, and
    # opted in to job wiring as every walk-through of the docs does first.
    kubectl = str(cluster.bin_dir / "kubectl")
    for name in sorted(set(renamed) - created):
        for args in (
            ["create", "namespace", renamed[name]],
            ["label", "namespace", renamed[name], "gang-extender.io/inject=enabled"],
        ):
            subprocess.run([kubectl, *args], env=env, capture_output=True, check=True, timeout=60)
    done = subprocess.run(
        ["bash", "-c", text], cwd=work, env=env, capture_output=True, text=True, timeout=300
    )
    print(f"{block.name} ({block.mode}) ran:\n{text}\nleft out: {left}\n{done.stdout}{done.stderr}")
    return done


@pytest.mark.parametrize("block", RUN, ids=lambda b: b.name)
def test_the_block_runs_as_written(
    block: Block, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    work = scratch(tmp_path)
    extra: list[str] = []
    if block.mode == "install":
        uses_helm = "helm " in block.text
        cluster = request.getfixturevalue("install_clusters")["helm" if uses_helm else "kustomize"]
        if uses_helm:
            extra.append(str(request.getfixturevalue("helm").parent))
            if "helm install" in block.text:  # each install block starts from no release
                subprocess.run(
                    ["helm", "uninstall", "gang-extender", "-n", "gang-system", "--wait"],
                    env={
                        **os.environ,
                        "KUBECONFIG": str(cluster.kubeconfig),
                        "HOME": str(tmp_path),
                        "PATH": os.pathsep.join([*extra, "/usr/bin:/bin"]),
                    },
                    capture_output=True,
                    timeout=120,
                )
    else:
        cluster = request.getfixturevalue("cluster")
        request.getfixturevalue("gang_stack")
        request.getfixturevalue("gpu_nodes")(3, gpus=4)
    renamed = unique_namespaces(namespaces_of(block.text))
    try:
        done = run_block(block, cluster, work, extra, renamed)
    finally:
        if block.mode != "install":
            forget_namespaces(cluster, renamed.values())
    assert done.returncode == 0, (
        f"{block.name} ({block.mode}) failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    )


def forget_namespaces(cluster: LocalCluster, names: Iterable[str]) -> None:
    """Delete a block's namespaces from the session's cluster, and wait until they are gone.

    The jobs the docs apply stay held once the block's nodes are deleted; left in the
    cluster every later test shares, such a gang waits, starves and reserves (fences)
    the nodes of later tests (a required-zone gang then never bound).
    """
    kubectl = str(cluster.bin_dir / "kubectl")
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}
    names = list(names)
    for name in names:
        subprocess.run(
            [kubectl, "delete", "namespace", name, "--ignore-not-found", "--wait=false"],
            env=env,
            capture_output=True,
            timeout=60,
            check=True,
        )
    for name in names:
        subprocess.run(
            [kubectl, "wait", "--for=delete", f"namespace/{name}", "--timeout=120s"],
            env=env,
            capture_output=True,
            timeout=150,
        )
