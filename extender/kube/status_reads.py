"""The reads behind `gang-extender status`: one list per kind, and one-line errors.

Every request `status` makes goes through here (RawApi). A kind the API server
does not serve (404) is None; kinds a user may not read and `status` can do
without (Kubernetes' PodGroups and Workloads, nodes, the service's Lease: 403)
are None too. What cannot be read at all raises `StatusReadError` with one line
that says what to check: no kubeconfig, an unreadable one, an API server that
does not answer (naming it), a refused list.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from extender.kube.rawapi import KubeError, RawApi, load_api_client, path_of

# The versions of scheduling.k8s.io PodGroups `status` asks for, newest first.
UPSTREAM_PODGROUP_VERSIONS = ("v1beta1", "v1alpha3", "v1alpha2")
READ_TIMEOUT_SECONDS = 20.0


class StatusReadError(Exception):
    """One line for the user: what failed and what to check."""


def _cause(message: str) -> str:
    """The root of urllib3's wrapped error: "Connection refused", "timed out", ..."""
    errno = re.findall(r"\[Errno -?\d+\] ([^\"')]+)", message)
    if errno:
        return str(errno[-1]).strip()
    if "timed out" in message.lower():
        return "timed out"
    if "CERTIFICATE_VERIFY_FAILED" in message:
        return "its certificate is not trusted by this kubeconfig's CA"
    return message.removeprefix("API server unreachable: ")


def user_kubeconfig(explicit: str | None) -> str | None:
    """--kubeconfig, else $KUBECONFIG (its first existing file) or ~/.kube/config;
    None: in-cluster config, when running in a pod."""
    if explicit:
        return explicit
    candidates = [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    candidates.append(str(Path.home() / ".kube" / "config"))
    return next((p for p in candidates if Path(p).expanduser().is_file()), None)


def connect(explicit: str | None) -> tuple[RawApi, str]:
    """The client and a description of where it points (server and kubeconfig)."""
    from kubernetes.config.config_exception import ConfigException

    kubeconfig = user_kubeconfig(explicit)
    if kubeconfig is None and not os.environ.get("KUBERNETES_SERVICE_HOST"):
        looked = os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
        raise StatusReadError(
            f"no kubeconfig: none at {looked}; pass --kubeconfig or set KUBECONFIG "
            "(after `gang-extender dev up`, run the export lines it prints)"
        )
    if kubeconfig is not None and not Path(kubeconfig).expanduser().is_file():
        raise StatusReadError(f"kubeconfig {kubeconfig}: no such file")
    try:
        api = load_api_client(kubeconfig, pool_size=4, retries=0)
    except (ConfigException, OSError, ValueError, TypeError) as err:
        where = f"kubeconfig {kubeconfig}" if kubeconfig else "in-cluster config"
        raise StatusReadError(f"cannot use {where}: {err}") from None
    server = str(api.configuration.host)  # the kubeconfig's cluster server
    return RawApi(api), f"{server} (from {kubeconfig or 'in-cluster config'})"


class StatusReader:
    """Lists the objects `status` needs, in one namespace or all of them."""

    def __init__(self, raw: RawApi, where: str, namespace: str | None) -> None:
        self.raw = raw
        self.where = where
        self.scope = ["namespaces", namespace] if namespace else []

    def _get(self, path: str, **query: str) -> dict[str, Any]:
        try:
            return self.raw.call("GET", path, query=query or None, timeout=READ_TIMEOUT_SECONDS)
        except KubeError as err:
            if err.status == 0:
                raise StatusReadError(
                    f"cannot reach the API server at {self.where}: {_cause(err.message)}; "
                    "check that the cluster is running and that this kubeconfig points at it"
                ) from None
            raise

    def items(
        self, *prefix: str, resource: str, optional: bool = False, **query: str
    ) -> list[dict[str, Any]] | None:
        """The list, or None when not served (404) or, for an optional kind, not allowed (403)."""
        try:
            found = self._get(path_of(*prefix, *self.scope, resource), **query)
        except KubeError as err:
            if err.status == 404 or (optional and err.status == 403):
                return None
            raise StatusReadError(
                f"cannot list {resource} ({'/'.join(prefix)}): {err.status} {err.reason or err.phrase}: "
                f"{err.message}"
            ) from None
        return list(found.get("items", []))

    def upstream_podgroups(self) -> list[dict[str, Any]] | None:
        for version in UPSTREAM_PODGROUP_VERSIONS:
            found = self.items(
                "apis", "scheduling.k8s.io", version, resource="podgroups", optional=True
            )
            if found is not None:
                return found
        return None

    def nodes(self) -> list[dict[str, Any]] | None:
        try:
            found = self._get(path_of("api", "v1", "nodes"))
        except KubeError:
            return None  # a namespace user may not list nodes: the room is left out
        return list(found.get("items", []))

    def lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self._get(
                path_of(
                    "apis", "coordination.k8s.io", "v1", "namespaces", namespace, "leases", name
                )
            )
        except KubeError:
            return None  # none (no --leader-elect) or not readable: each group says so

    def read(self, lease: tuple[str, str], *, nodes: bool = True) -> dict[str, Any]:
        """Every list `StatusObjects` takes, by its field name (`nodes`: for the GPU room
        of `-o wide` and one group's detail; the plain table does without)."""
        events = [
            *(self.items("api", "v1", resource="events", fieldSelector="reason=GangWaiting") or []),
            *(
                self.items("api", "v1", resource="events", fieldSelector="reason=FailedScheduling")
                or []
            ),
        ]
        return {
            "ours": self.items(
                "apis", "scheduling.gang-extender.io", "v1alpha1", resource="podgroups"
            ),
            "foreign": [
                *(
                    self.items("apis", "scheduling.volcano.sh", "v1beta1", resource="podgroups")
                    or []
                ),
                *(
                    self.items("apis", "scheduling.x-k8s.io", "v1alpha1", resource="podgroups")
                    or []
                ),
            ],
            "upstream": self.upstream_podgroups(),
            "workloads": self.items(
                "apis", "scheduling.k8s.io", "v1alpha1", resource="workloads", optional=True
            ),
            "pods": self.items("api", "v1", resource="pods") or [],
            "events": events,
            "nodes": self.nodes() if nodes else None,
            "lease": self.lease(*lease),
            # Kueue's queued Jobs: their groups wait for Kueue's admission, not for us.
            "kueue_workloads": self.items(
                "apis", "kueue.x-k8s.io", "v1beta2", resource="workloads", optional=True
            ),
            "kueue_local_queues": self.items(
                "apis", "kueue.x-k8s.io", "v1beta2", resource="localqueues", optional=True
            ),
        }
