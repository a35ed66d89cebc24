"""Clients of the session cluster, shared by the e2e and real tiers' conftest.py.

Each tier's conftest.py defines its own session `cluster` fixture (the e2e tier's
with KWOK nodes, the real tier's with real nodes); these build on whichever it is.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client as k8s

from extender.devcluster.cluster import LocalCluster


@pytest.fixture(scope="session")
def api(cluster: LocalCluster) -> Iterator[k8s.ApiClient]:
    with cluster.api_client() as client:
        yield client


@pytest.fixture(scope="session")
def core(api: k8s.ApiClient) -> k8s.CoreV1Api:
    return k8s.CoreV1Api(api)


@pytest.fixture(scope="session")
def apps(api: k8s.ApiClient) -> k8s.AppsV1Api:
    return k8s.AppsV1Api(api)
