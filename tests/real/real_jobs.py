"""Gang members that run for real: the job image, sshd, kubectl exec, logs."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from extender.devcluster.cluster import LocalCluster
from extender.devcluster.node_commands import JOB_IMAGE
from extender.domain.objects.membership import GROUP_LABEL
from extender.kube.rawapi import RawApi, path_of
from tests.e2e.gang_fixtures import create, gang_pod, list_pods, podgroup, wait_until

#: Generous bounds for a loaded 2-core machine: pods start in seconds, not minutes.
START_SECONDS = 180
#: The image's own sshd, unmodified: the keys must be mounted so its StrictModes accepts them.
SSHD = "mkdir -p /run/sshd; exec /usr/sbin/sshd -D -e"


def member(
    name: str,
    group: str,
    task: str,
    *,
    command: str = SSHD,
    gpus: int = 0,
    cpu: str = "100m",
    ready_on_sshd: bool = True,
    annotations: dict[str, str] | None = None,
    restart_policy: str = "Always",
) -> dict[str, Any]:
    """A member Pod in the job image running ``command`` (default: the image's sshd)."""
    pod = gang_pod(
        name, group, task=task, gpus=gpus, cpu=cpu, memory="256Mi", annotations=annotations
    )
    container = pod["spec"]["containers"][0]
    container.update(
        image=JOB_IMAGE, imagePullPolicy="IfNotPresent", command=["/bin/sh", "-c", command]
    )
    if ready_on_sshd:
        container["readinessProbe"] = {"tcpSocket": {"port": 22}, "periodSeconds": 1}
    pod["spec"]["restartPolicy"] = restart_policy
    pod["spec"]["terminationGracePeriodSeconds"] = 1
    return pod


def launch(
    raw: RawApi, namespace: str, group: str, members: list[dict[str, Any]], **spec: Any
) -> None:
    """The group's PodGroup (minMember: every member), then the members."""
    create(raw, namespace, podgroup(group, len(members), **spec))
    for pod in members:
        create(raw, namespace, pod)


def _ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def ready_members(raw: RawApi, namespace: str, group: str, count: int) -> list[dict[str, Any]]:
    """Wait until ``count`` members of ``group`` run and are Ready; them, by name."""
    pods: list[dict[str, Any]] = wait_until(
        lambda: (
            pods
            if len(pods := list_pods(raw, namespace, f"{GROUP_LABEL}={group}")) == count
            and all(_ready(p) for p in pods)
            else None
        ),
        timeout=START_SECONDS,
        what=f"{count} members of {group} Running and Ready on the real nodes",
    )
    return sorted(pods, key=lambda p: p["metadata"]["name"])


def host_of(pod: dict[str, Any]) -> str:
    """The name other members reach it by: `<hostname>.<subdomain>` (the hostfile's)."""
    return f"{pod['spec']['hostname']}.{pod['spec']['subdomain']}"


@dataclass(frozen=True)
class Exec:
    code: int
    out: str
    err: str


def sh(cluster: LocalCluster, namespace: str, pod: str, script: str, timeout: float = 120) -> Exec:
    """``kubectl exec <pod> -- /bin/sh -c script`` through the API server and the kubelet."""
    result = subprocess.run(
        [
            str(cluster.bin_dir / "kubectl"),
            f"--kubeconfig={cluster.kubeconfig}",
            "exec",
            "-n",
            namespace,
            pod,
            "--",
            "/bin/sh",
            "-c",
            script,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return Exec(result.returncode, result.stdout, result.stderr)


def logs(cluster: LocalCluster, namespace: str, pod: str, *, previous: bool = False) -> str:
    return cluster.kubectl(
        "logs", "-n", namespace, pod, *(["--previous"] if previous else []), check=False
    )


def configmap_data(raw: RawApi, namespace: str, group: str) -> dict[str, str]:
    cm = raw.call(
        "GET", path_of("api", "v1", "namespaces", namespace, "configmaps", f"{group}-svc")
    )
    return dict(cm.get("data") or {})


def apply_example(
    cluster: LocalCluster, namespace: str, docs: list[dict[str, Any]], manifest: Path
) -> None:
    """``kubectl apply`` an example's objects, as a user applies the file."""
    manifest.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    cluster.kubectl("apply", "-n", namespace, "-f", str(manifest))


def finished(raw: RawApi, namespace: str, selector: str) -> dict[str, Any]:
    """Wait until the one pod ``selector`` picks has Succeeded or Failed; that pod."""
    pod: dict[str, Any] = wait_until(
        lambda: next(
            (
                p
                for p in list_pods(raw, namespace, selector)
                if p["status"].get("phase") in ("Succeeded", "Failed")
            ),
            None,
        ),
        timeout=START_SECONDS,
        what=f"the pod {selector} to finish",
    )
    return pod


def rank_lines(text: str) -> list[str]:
    """The allreduce's lines, `rank <r> of <n> on <host>: allreduce(rank + 1) = <sum>`, sorted."""
    return sorted(line for line in text.splitlines() if line.startswith("rank "))


def rank_host(line: str) -> str:
    return line.split(" on ", 1)[1].split(":", 1)[0]
