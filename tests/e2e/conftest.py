"""Fixtures for end-to-end tests against a real local control plane.

One LocalCluster (etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
kwok) is started per test session and shared; every test gets its own namespace.
Set GANG_E2E_BIN_DIR to use prebuilt binaries instead of hack/build-control-plane.sh.
When an e2e test fails, the tail of every component log is attached to its report,
and of every log of a control plane of its own (a LocalCluster fixture it uses).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from extender.devcluster.cluster import LocalCluster, ensure_binaries, new_namespace
from extender.devcluster.nodes import add_gpu_nodes, wait_for_nodes_ready
from tests.e2e import cluster_fixtures

# The product under test (service + gang scheduler) and helpers for its scenarios.
from tests.e2e.gang_fixtures import delete_namespace, gang_stack, injected_namespace, raw  # noqa: F401
from tests.e2e.kueue_fixtures import gpu_queue, queued_namespace  # noqa: F401 (fixtures)
from tests.e2e.module_order import (
    LATE_BUILD_FIXTURES,
    LATE_BUILD_MARK,
    late_build_timeout,
    late_modules_last,
)

# The session cluster's clients (shared with tests/real): fixtures named here are served.
api, apps, core = cluster_fixtures.api, cluster_fixtures.apps, cluster_fixtures.core
E2E_DIR = Path(__file__).parent
_SESSION_CLUSTER = pytest.StashKey[LocalCluster]()
# Lines of each log of a test's own control plane attached when it fails: its service
# replicas' hand-over is in them, further back than the session's 40.
OWN_CLUSTER_LOG_LINES = 120


def _in_e2e(item: pytest.Item) -> bool:
    return E2E_DIR in Path(item.path).parents


def _needs_a_late_build(item: pytest.Item) -> bool:
    fixtures = set(getattr(item, "fixturenames", ()))
    return (
        bool(fixtures & LATE_BUILD_FIXTURES) or item.get_closest_marker(LATE_BUILD_MARK) is not None
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _in_e2e(item):
            item.add_marker(pytest.mark.e2e)
    # The modules using Kueue or helm last among the e2e modules: make test builds those
    # beside the first tier (see tests/e2e/module_order.py).
    items[:] = late_modules_last(
        items, in_scope=_in_e2e, module_of=lambda item: item.path, is_late=_needs_a_late_build
    )
    # Their fixtures may wait for that build: a limit that covers the wait.
    for item in items:
        if _in_e2e(item) and _needs_a_late_build(item):
            own = item.get_closest_marker("timeout")
            seconds = float(own.args[0]) if own is not None and own.args else None
            item.add_marker(pytest.mark.timeout(late_build_timeout(seconds)))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if not report.failed:
        return report
    cluster = item.config.stash.get(_SESSION_CLUSTER, None)
    if cluster is not None:
        report.sections.append(("control-plane logs", cluster.tail_logs()))
    # A module's own control plane (test_ha.py's, with the service replicas and the
    # gang kube-scheduler logging into it): the session's logs do not say why it failed.
    own = [
        value
        for value in getattr(item, "funcargs", {}).values()
        if isinstance(value, LocalCluster) and value is not cluster
    ]
    for index, local in enumerate(own):
        title = "the test's own control-plane logs" + (f" ({index + 1})" if len(own) > 1 else "")
        report.sections.append((title, local.tail_logs(OWN_CLUSTER_LOG_LINES)))
    return report


@pytest.fixture(scope="session")
def bin_dir() -> Path:
    """The control-plane binaries ($GANG_E2E_BIN_DIR, or built/cached by the script)."""
    return ensure_binaries()


@pytest.fixture(scope="session")
def cluster(
    bin_dir: Path, tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config
) -> Iterator[LocalCluster]:
    """The session's control plane. Its workdir (logs, kubeconfig) stays in pytest's tmp dir."""
    local = LocalCluster(tmp_path_factory.mktemp("cluster"), bin_dir)
    local.start()
    pytestconfig.stash[_SESSION_CLUSTER] = local
    try:
        yield local
    finally:
        del pytestconfig.stash[_SESSION_CLUSTER]
        local.stop()


def _dns_label(text: str, limit: int = 40) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:limit].strip("-") or "t"


@pytest.fixture
def namespace(
    api: k8s.ApiClient, core: k8s.CoreV1Api, request: pytest.FixtureRequest
) -> Iterator[str]:
    """A fresh namespace named after the test, deleted (without waiting) afterwards."""
    name = new_namespace(api, _dns_label(request.node.name, 30))
    yield name
    delete_namespace(core, name)


POOL_LABEL = "e2e.gang-extender.io/pool"


@dataclass(frozen=True)
class GpuPool:
    """Fake GPU nodes made for one test; ``node_selector`` keeps pods on them."""

    name: str
    nodes: list[str]

    @property
    def node_selector(self) -> dict[str, str]:
        return {POOL_LABEL: self.name}


@pytest.fixture
def gpu_nodes(api: k8s.ApiClient, core: k8s.CoreV1Api) -> Iterator[Callable[..., GpuPool]]:
    """Factory: ``gpu_nodes(count, **add_gpu_nodes_kwargs) -> GpuPool`` of Ready nodes.

    Each call makes its own pool, labelled ``e2e.gang-extender.io/pool: <pool>``, so a
    test's pods can be kept off nodes other tests created. Deleted after the test.
    """
    created: list[str] = []

    def make(count: int, **kwargs: Any) -> GpuPool:
        pool = f"pool-{uuid.uuid4().hex[:6]}"
        labels = {POOL_LABEL: pool, **kwargs.pop("labels", {})}
        names = add_gpu_nodes(api, count, labels=labels, name_prefix=f"gpu-{pool}", **kwargs)
        created.extend(names)
        wait_for_nodes_ready(api, names)
        return GpuPool(pool, names)

    yield make
    for name in created:
        try:
            core.delete_node(name)
        except k8s.ApiException as exc:
            if exc.status != 404:
                raise
