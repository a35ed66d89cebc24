"""Every shell block of the docs says how it is tested (tests/doc_blocks.py, docs/testing.md)."""

from __future__ import annotations

import pytest

from tests.doc_blocks import DOCS, MODES, REPO, Block, blocks, commands, script, unmarked


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_bash_block_has_a_marker_with_a_known_mode(doc) -> None:
    assert unmarked(doc) == [], f"{doc.name}: bash blocks without <!-- doc-test: ... -->"
    for block in blocks(doc):
        assert block.mode in MODES, block.name
        if block.mode == "skip":
            assert block.why, f"{block.name}: a skipped block says why"


def test_the_example_blocks_are_those_test_examples_runs() -> None:
    examples = [b for doc in DOCS for b in blocks(doc) if b.mode == "example"]
    assert sorted(str(b.doc.parent.name) for b in examples) == ["deepspeed", "horovod", "mpijob"]


def test_most_blocks_a_user_copies_are_run() -> None:
    every = [b for doc in DOCS for b in blocks(doc)]
    run = [b for b in every if b.mode != "skip"]
    assert len(run) >= 20, [b.name for b in run]


def block(text: str, mode: str) -> Block:
    return Block(REPO / "README.md", 1, mode, "", text)


def test_continuations_and_heredocs_are_one_command() -> None:
    text = (
        "kubectl -n a create rolebinding x \\\n  --clusterrole=y\ncat > k <<'END'\nx: 1\nEND\nls\n"
    )
    assert commands(text) == [
        "kubectl -n a create rolebinding x --clusterrole=y",
        "cat > k <<'END'\nx: 1\nEND",
        "ls",
    ]


def test_a_real_cluster_block_dry_runs_its_changes_and_runs_its_namespace_for_real() -> None:
    text = (
        "kubectl create namespace mpi\n"
        "kubectl label namespace mpi gang-extender.io/inject=enabled\n"
        "kubectl apply -n mpi -f examples/mpijob/mpijob.yaml     # after putting your image\n"
        "kubectl logs -n mpi -f job/pi-launcher\n"
        "gang-extender status -n mpi\n"
    )
    run, left = script(block(text, "real-cluster"), {"mpi": "mpi-1a2b3"})
    lines = run.splitlines()
    assert "kubectl create namespace mpi-1a2b3" in lines
    assert "kubectl label namespace mpi-1a2b3 gang-extender.io/inject=enabled" in lines
    assert "kubectl apply -n mpi-1a2b3 -f examples/mpijob/mpijob.yaml --dry-run=server" in lines
    assert "gang-extender status -n mpi-1a2b3" in lines
    assert [entry.split("  (")[0] for entry in left] == [
        "kubectl logs -n mpi-1a2b3 -f job/pi-launcher"
    ]


def test_an_install_block_runs_as_written_but_for_namespaces_dev_and_pip() -> None:
    text = (
        "gang-extender dev up --cluster-only\n"
        "kubectl apply -k deploy/\n"
        "pip install .                 # the command\n"
        "helm install g c -n gang-system --create-namespace --set 'namespaceBindings={my-team}'\n"
        "kubectl get crd podgroups.scheduling.gang-extender.io\n"
    )
    run, left = script(block(text, "install"), {"my-team": "my-team-x"})
    assert run.splitlines()[-3:] == [
        "kubectl apply -k deploy/",
        "helm install g c -n gang-system --create-namespace --set 'namespaceBindings={my-team-x}'",
        "retry kubectl get crd podgroups.scheduling.gang-extender.io",
    ]
    assert len(left) == 2
