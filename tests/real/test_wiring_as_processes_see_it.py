"""What a member's processes read: /etc/volcano, the VC_* env, the names in DNS."""

from __future__ import annotations

from extender.devcluster.cluster import LocalCluster
from extender.kube.rawapi import RawApi
from tests.real.real_jobs import configmap_data, host_of, launch, member, ready_members, sh


def test_hostfile_host_lists_and_env_are_what_the_processes_read(
    cluster: LocalCluster, raw: RawApi, namespace: str
) -> None:
    launch(
        raw,
        namespace,
        "wired",
        [
            member("wired-master", "wired", "master"),
            member("wired-worker-0", "wired", "worker", gpus=1),
            member("wired-worker-1", "wired", "worker", gpus=1),
        ],
        minTaskMember={"master": 1, "worker": 2},
    )
    pods = ready_members(raw, namespace, "wired", 3)
    data = configmap_data(raw, namespace, "wired")
    hosts = sorted(host_of(p) for p in pods)
    assert sorted(line.split()[0] for line in data["hostfile"].splitlines()) == hosts
    for pod in pods:
        name = pod["metadata"]["name"]
        seen = sh(
            cluster,
            namespace,
            name,
            "cat /etc/volcano/hostfile; echo ==; cat /etc/volcano/worker.host; echo; echo ==; "
            "cat /etc/volcano/master.host; echo; echo ==; env | grep -E '^(VC|GANG)_' | sort",
        )
        assert seen.code == 0, seen.err
        hostfile, worker_host, master_host, env_text = seen.out.split("==\n")
        assert hostfile == data["hostfile"]
        assert worker_host.strip() == data["worker.host"]
        assert master_host.strip() == data["master.host"]
        env = dict(line.split("=", 1) for line in env_text.splitlines())
        assert env["VC_WORKER_HOSTS"] == data["VC_WORKER_HOSTS"]
        assert env["VC_MASTER_HOSTS"] == data["VC_MASTER_HOSTS"]
        assert env["VC_WORKER_NUM"] == "2"
        assert env["VC_TASK_NAME"] == pod["metadata"]["labels"]["gang-extender.io/task"]
        assert env["GANG_NUM_SLOTS"] == "3"


def test_every_member_name_resolves_to_that_members_pod_ip(
    cluster: LocalCluster, raw: RawApi, namespace: str
) -> None:
    launch(
        raw,
        namespace,
        "named",
        [
            member("named-0", "named", "worker", gpus=1),
            member("named-1", "named", "worker", gpus=1),
        ],
    )
    pods = ready_members(raw, namespace, "named", 2)
    for pod in pods:
        for other in pods:
            # The short name through the search path, and the full one, from CoreDNS.
            for name in (host_of(other), f"{host_of(other)}.{namespace}.svc.cluster.local"):
                answer = sh(cluster, namespace, pod["metadata"]["name"], f"getent hosts {name}")
                assert answer.code == 0, f"{name} does not resolve: {answer.err}"
                assert answer.out.split()[0] == other["status"]["podIP"]
