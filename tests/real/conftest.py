"""The real tier: gang jobs on real local nodes (containerd, kubelet, CNI, CoreDNS).

One LocalCluster per session with the gang-extender stack and 2 real nodes
(2 fake GPUs each, counted by kubelet through its device plugin API, and 2 DRA
devices each, of DeviceClass gpu.example.com, from a DRA kubelet plugin), no KWOK
nodes: every pod runs for real, in the image hack/build-node.sh builds
(sshd, Open MPI, mpi4py). Each test gets its own injected namespace.

Where the machine cannot run containers (not root, no cgroups) every test
skips, saying which. Set GANG_NODE_DIR to use prebuilt node pieces.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

from extender.devcluster.cluster import LocalCluster, ensure_binaries
from extender.devcluster.realnode import RealNodes, cannot_run_containers
from tests.e2e import cluster_fixtures, gang_fixtures

# The e2e tier's fixtures, on this tier's session cluster: fixtures named here are served.
api, core = cluster_fixtures.api, cluster_fixtures.core
gang_stack, raw = gang_fixtures.gang_stack, gang_fixtures.raw
injected_namespace = gang_fixtures.injected_namespace
REAL_DIR = Path(__file__).parent
REAL_NODE_COUNT = 2
GPUS_PER_NODE = 2
_SESSION = pytest.StashKey[tuple[LocalCluster, RealNodes]]()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = cannot_run_containers()
    for item in items:
        if REAL_DIR in Path(item.path).parents:
            item.add_marker(pytest.mark.real)
            if reason:
                item.add_marker(
                    pytest.mark.skip(reason=f"this machine cannot run containers: {reason}")
                )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    session = item.config.stash.get(_SESSION, None)
    if report.failed and session is not None:
        report.sections.append(("cluster and node logs", session[0].tail_logs()))
    return report


@pytest.fixture(scope="session")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config
) -> Iterator[LocalCluster]:
    local = LocalCluster(tmp_path_factory.mktemp("real"), ensure_binaries(), kubelet_access=True)
    local.start()
    nodes = RealNodes(local, REAL_NODE_COUNT, gpus=GPUS_PER_NODE, gpus_by="both")
    try:
        nodes.start()
        pytestconfig.stash[_SESSION] = (local, nodes)
        yield local
    finally:
        if _SESSION in pytestconfig.stash:
            del pytestconfig.stash[_SESSION]
        nodes.stop()
        local.stop()


@pytest.fixture(scope="session")
def real_nodes(cluster: LocalCluster, pytestconfig: pytest.Config) -> RealNodes:
    return pytestconfig.stash[_SESSION][1]


@pytest.fixture(scope="session")
def real_node_names(real_nodes: RealNodes) -> list[str]:
    return real_nodes.names


@pytest.fixture
def namespace(injected_namespace: str) -> str:
    """Every real test's namespace is labelled for injection (and deleted afterwards)."""
    return injected_namespace
