"""A user's MPI job logs in over SSH: every member into every other, with its group's key."""

from __future__ import annotations

import itertools

from extender.devcluster.cluster import LocalCluster
from extender.kube.rawapi import RawApi
from tests.real.real_jobs import host_of, launch, member, ready_members, sh

SSH = "ssh -o BatchMode=yes -o ConnectTimeout=10"


def test_every_member_logs_into_every_other_with_the_groups_key(
    cluster: LocalCluster, raw: RawApi, namespace: str
) -> None:
    # 800m each: no 2-CPU node holds all three, so logins cross nodes too.
    launch(
        raw,
        namespace,
        "ring",
        [
            member("ring-master", "ring", "master", cpu="800m"),
            member("ring-worker-a", "ring", "worker", gpus=1, cpu="800m"),
            member("ring-worker-b", "ring", "worker", gpus=1, cpu="800m"),
        ],
    )
    pods = ready_members(raw, namespace, "ring", 3)
    assert len({p["spec"]["nodeName"] for p in pods}) == 2, "the gang spans both real nodes"
    for source, target in itertools.permutations(pods, 2):
        login = sh(
            cluster, namespace, source["metadata"]["name"], f"{SSH} {host_of(target)} hostname"
        )
        assert login.code == 0, (
            f"{source['metadata']['name']} -> {host_of(target)}: {login.err.strip()}"
        )
        assert login.out.strip() == target["spec"]["hostname"]


def test_a_member_of_another_group_is_refused(
    cluster: LocalCluster, raw: RawApi, namespace: str
) -> None:
    launch(
        raw,
        namespace,
        "owner",
        [member("owner-0", "owner", "worker"), member("owner-1", "owner", "worker")],
    )
    launch(raw, namespace, "stranger", [member("stranger-0", "stranger", "worker")])
    owners = ready_members(raw, namespace, "owner", 2)
    ready_members(raw, namespace, "stranger", 1)
    login = sh(cluster, namespace, "stranger-0", f"{SSH} {host_of(owners[0])} hostname")
    assert login.code == 255, f"another group's key logged in: {login.out!r}"
    assert "Permission denied (publickey" in login.err
