"""Readiness as kubelet probes it: ready.hostfile, discover_hosts.sh, depends-on, PodsNotReady."""

from __future__ import annotations

from typing import Any

from extender.devcluster.cluster import LocalCluster
from extender.domain.objects.membership import GROUP_LABEL
from extender.kube.rawapi import RawApi
from tests.e2e.gang_fixtures import events, list_pods, wait_until
from tests.real.real_jobs import START_SECONDS, host_of, launch, member, sh

#: Ready while /tmp/ready exists: the test decides when a member is Ready.
READY_ON_FILE = {"exec": {"command": ["test", "-f", "/tmp/ready"]}, "periodSeconds": 1}
IDLE = "exec sleep infinity"


def _with_probe(pod: dict[str, Any], probe: dict[str, Any]) -> dict[str, Any]:
    pod["spec"]["containers"][0]["readinessProbe"] = probe
    return pod


def _running(raw: RawApi, namespace: str, group: str, count: int) -> list[dict[str, Any]]:
    pods: list[dict[str, Any]] = wait_until(
        lambda: (
            pods
            if len(pods := list_pods(raw, namespace, f"{GROUP_LABEL}={group}")) == count
            and all(p["status"].get("phase") == "Running" for p in pods)
            else None
        ),
        timeout=START_SECONDS,
        what=f"{count} members of {group} Running",
    )
    return sorted(pods, key=lambda p: p["metadata"]["name"])


def test_ready_hostfile_and_discover_hosts_follow_kubelets_readiness_probes(
    cluster: LocalCluster, raw: RawApi, namespace: str
) -> None:
    launch(
        raw,
        namespace,
        "elastic",
        [
            _with_probe(member(f"elastic-{i}", "elastic", "worker", command=IDLE), READY_ON_FILE)
            for i in range(2)
        ],
    )
    first, second = _running(raw, namespace, "elastic", 2)

    def discovered() -> set[str]:
        seen = sh(cluster, namespace, "elastic-0", "/etc/volcano/discover_hosts.sh")
        assert seen.code == 0, seen.err
        return {line.split(":")[0] for line in seen.out.split()}

    def ready_file() -> set[str]:
        seen = sh(cluster, namespace, "elastic-1", "cat /etc/volcano/ready.hostfile")
        return {line.split()[0] for line in seen.out.splitlines() if line.strip()}

    assert discovered() == set() and ready_file() == set()
    assert sh(cluster, namespace, "elastic-1", "touch /tmp/ready").code == 0
    want = {host_of(second)}
    wait_until(lambda: discovered() == want, what=f"discover_hosts.sh printing {want}")
    wait_until(lambda: ready_file() == want, what=f"ready.hostfile listing {want}")
    assert sh(cluster, namespace, "elastic-0", "touch /tmp/ready").code == 0
    both = {host_of(first), host_of(second)}
    wait_until(lambda: discovered() == both, what=f"discover_hosts.sh printing {both}")
    assert sh(cluster, namespace, "elastic-1", "rm /tmp/ready").code == 0
    wait_until(
        lambda: discovered() == {host_of(first)},
        what="discover_hosts.sh dropping the member whose probe fails again",
    )


def test_a_dependent_master_starts_only_once_its_workers_are_ready(
    cluster: LocalCluster, raw: RawApi, namespace: str
) -> None:
    launch(
        raw,
        namespace,
        "waits",
        [
            member(
                "waits-master",
                "waits",
                "master",
                command="date +%s > /tmp/started; exec sleep infinity",
                ready_on_sshd=False,
                annotations={"gang-extender.io/depends-on": "worker"},
            ),
            *(
                _with_probe(member(f"waits-w{i}", "waits", "worker", command=IDLE), READY_ON_FILE)
                for i in range(2)
            ),
        ],
    )

    def master() -> dict[str, Any]:
        return next(
            p
            for p in list_pods(raw, namespace, f"{GROUP_LABEL}=waits")
            if p["metadata"]["name"] == "waits-master"
        )

    wait_until(
        lambda: any(
            (s.get("state") or {}).get("running")
            for s in master()["status"].get("initContainerStatuses") or []
        ),
        timeout=START_SECONDS,
        what="the master's wait-for-tasks init container running",
    )
    for i in range(2):
        wait_until(
            lambda i=i: sh(cluster, namespace, f"waits-w{i}", "true").code == 0,
            timeout=START_SECONDS,
            what=f"waits-w{i} running",
        )
    assert master()["status"].get("phase") == "Pending", "the master started before its workers"
    assert sh(cluster, namespace, "waits-w0", "touch /tmp/ready").code == 0
    # One worker Ready of two: still waiting.
    wait_until(
        lambda: any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in next(
                p for p in list_pods(raw, namespace) if p["metadata"]["name"] == "waits-w0"
            )["status"].get("conditions")
            or []
        ),
        what="waits-w0 Ready",
    )
    assert master()["status"].get("phase") == "Pending"
    assert sh(cluster, namespace, "waits-w1", "touch /tmp/ready").code == 0
    wait_until(
        lambda: master()["status"].get("phase") == "Running",
        timeout=START_SECONDS,
        what="the master's main container started after both workers became Ready",
    )


def test_members_that_never_become_ready_restart_the_gang_as_pods_not_ready(
    raw: RawApi, namespace: str
) -> None:
    never = {"exec": {"command": ["false"]}, "periodSeconds": 1}
    launch(
        raw,
        namespace,
        "stalled",
        [
            _with_probe(member(f"stalled-{i}", "stalled", "worker", command=IDLE), never)
            for i in range(2)
        ],
        policies=[{"event": "PodsNotReady", "action": "RestartJob"}],
        podsReadyTimeoutSeconds=10,
        maxRetry=1,
    )
    _running(raw, namespace, "stalled", 2)
    found = wait_until(
        lambda: [
            e for e in events(raw, namespace, "GangRestarted") if "PodsNotReady" in e["message"]
        ],
        timeout=START_SECONDS,
        what="a GangRestarted Event for PodsNotReady",
    )
    assert "stalled" in found[0]["message"]
