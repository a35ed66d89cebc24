"""`kubectl gang status` through the real kubectl: the kubectl-gang plugin on PATH.

kubectl runs `kubectl-gang` (pyproject [project.scripts]) with the words after
`gang`; the table is the one `gang-extender status` prints. The plugin is the
venv's when the venv was installed with it; otherwise the test writes the same
console script pip would write for that entry point.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from kubernetes import client as k8s

from extender.devcluster.cluster import LocalCluster
from tests.e2e.gang_fixtures import parse_status_table

REPO = Path(__file__).resolve().parents[2]
CRD = REPO / "deploy" / "crds" / "podgroups.scheduling.gang-extender.io.yaml"


def plugin_dir(tmp_path: Path) -> Path:
    """The directory holding kubectl-gang: the venv's bin, or one written like pip's."""
    venv_bin = Path(sys.executable).parent
    if (venv_bin / "kubectl-gang").exists():
        return venv_bin
    entry = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"][
        "kubectl-gang"
    ]
    module, _, function = entry.partition(":")
    script = tmp_path / "kubectl-gang"
    script.write_text(
        f"#!{sys.executable}\nimport sys\nfrom {module} import {function}\nsys.exit({function}())\n"
    )
    script.chmod(0o755)
    return tmp_path


def kubectl(cluster: LocalCluster, path: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PATH": os.pathsep.join([path, str(cluster.bin_dir), os.environ.get("PATH", "")]),
        "KUBECONFIG": str(cluster.kubeconfig),
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.run(
        ["kubectl", *args], capture_output=True, text=True, timeout=120, env=env, check=False
    )


def test_kubectl_gang_status_lists_the_namespace_groups(
    cluster: LocalCluster, api: k8s.ApiClient, namespace: str, tmp_path: Path
) -> None:
    directory = str(plugin_dir(tmp_path))
    applied = kubectl(cluster, directory, "apply", "-f", str(CRD))
    assert applied.returncode == 0, applied.stderr
    kubectl(
        cluster,
        directory,
        "wait",
        "--for=condition=Established",
        "crd/podgroups.scheduling.gang-extender.io",
    )
    k8s.CustomObjectsApi(api).create_namespaced_custom_object(
        "scheduling.gang-extender.io",
        "v1alpha1",
        namespace,
        "podgroups",
        {
            "apiVersion": "scheduling.gang-extender.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": "trainer"},
            "spec": {"minMember": 3},
        },
    )

    listed = kubectl(cluster, directory, "plugin", "list")
    assert f"{directory}/kubectl-gang" in listed.stdout, listed.stdout + listed.stderr

    groups = k8s.CustomObjectsApi(api)

    def podgroup_version() -> str:
        obj = groups.get_namespaced_custom_object(
            "scheduling.gang-extender.io", "v1alpha1", namespace, "podgroups", "trainer"
        )
        return str(obj["metadata"]["resourceVersion"])

    # Both commands print the PodGroup's status, which a running service may write
    # between the two reads: compare the two tables read from one version of it.
    for _ in range(5):
        version = podgroup_version()
        result = kubectl(cluster, directory, "gang", "status", "-n", namespace)
        assert result.returncode == 0, result.stderr
        direct = subprocess.run(
            [
                sys.executable,
                "-m",
                "extender",
                "status",
                "-n",
                namespace,
                f"--kubeconfig={cluster.kubeconfig}",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        if podgroup_version() == version:
            break
    else:
        pytest.fail("the PodGroup kept changing between the two status reads")
    rows = parse_status_table(result.stdout)
    assert rows["trainer"]["NAMESPACE"] == namespace
    assert rows["trainer"]["PLACED/MIN"].endswith("/3")
    assert rows["trainer"]["SOURCE"] == "gang-extender"
    # The same table as `gang-extender status` (the same code, by another name).
    assert direct.stdout == result.stdout

    usage = kubectl(cluster, directory, "gang", "no-such-command")
    assert usage.returncode == 2 and "usage: kubectl gang" in usage.stderr


@pytest.mark.parametrize("words", [["version"], ["--version"]])
def test_kubectl_gang_version(cluster: LocalCluster, tmp_path: Path, words: list[str]) -> None:
    result = kubectl(cluster, str(plugin_dir(tmp_path)), "gang", *words)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("gang-extender ")
