"""A stock OpenSSH sshd accepts the group's key from the ssh mount the webhook gives a pod.

Each test wires a pod through the webhook's own patch (`render_pod_patch`), takes the
`gang-ssh` volume and volumeMount it got, and lays them out as the kubelet does, in a
private mount namespace (tests/system/kubelet_ssh_volume.py says exactly what of the
kubelet is reproduced: the 1777 tmpfs of the volume, the atomic writer's timestamped
directory, `..data` and file modes, fsGroup, the subPath bind mount). There the
distribution's sshd runs with its own config (StrictModes yes, the default) on a
loopback port, and the real ssh client logs in by the names the group's ssh config
matches, with the group's key; another group's key is refused.

Before the fix the Secret volume's root, the kubelet's 1777 tmpfs, was mounted at
/root/.ssh and sshd refused every login ("bad ownership or modes for directory
/root/.ssh"): `test_the_volume_root_at_the_ssh_path_is_refused` keeps that layout as
the control that shows the reproduction is faithful.

Needs root (mount namespaces, bind mounts, sshd), util-linux (`unshare`, `mount`,
`setpriv`) and OpenSSH (Debian: openssh-server, openssh-client); without them every
test is skipped saying what is missing. .ci/run installs OpenSSH; the tests install
nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from extender.domain.objects.membership import SSH_PATH_ANNOTATION
from extender.injection.admission import read_membership, render_pod_patch
from extender.injection.patch import apply_patch
from extender.injection.ssh import SSHKeyPair, generate_key_pair, render_secret_data, ssh_path_of
from tests.builders import make_pod

REPO = Path(__file__).resolve().parents[2]
NAMESPACE = "team"
GROUP = "mpijob"
SSH_VOLUME = "gang-ssh"
NAMES = [f"{GROUP}-worker-1.{GROUP}", f"{GROUP}-master-0.{GROUP}"]
MPI_USER = {"name": "mpi", "uid": 4242}
NAMESPACE_SECONDS = 60

pytestmark = pytest.mark.system


def missing_requirements() -> str | None:
    """Why these tests cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root: mount namespaces, bind mounts and sshd"
    tools = {
        "unshare": "util-linux",
        "mount": "mount",
        "setpriv": "util-linux",
        "ssh": "openssh-client",
        "ssh-keygen": "openssh-client",
    }
    absent = [f"{tool} ({package})" for tool, package in tools.items() if not shutil.which(tool)]
    if not Path("/usr/sbin/sshd").exists():
        absent.append("/usr/sbin/sshd (openssh-server)")
    if absent:
        return f"missing {', '.join(absent)}; .ci/run installs OpenSSH (apt-get install -y openssh-server openssh-client)"
    probe = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "true"], capture_output=True, text=True
    )
    if probe.returncode != 0:
        return f"cannot make a mount namespace here: {probe.stderr.strip()}"
    return None


MISSING = missing_requirements()
if MISSING is not None:
    pytestmark = [pytest.mark.system, pytest.mark.skip(reason=MISSING)]


@dataclass(frozen=True)
class Logins:
    sshd_options: dict[str, str]
    ssh_path: dict[str, dict[str, Any]]
    logins: dict[str, dict[str, Any]]
    sshd_log: str

    def ok(self, name: str, user: str) -> None:
        done = self.logins[name]
        assert (done["rc"], done["stdout"]) == (0, f"{user}\n"), (
            f"login {name!r}: {done['stderr']}\nsshd: {self.sshd_log}"
        )
        assert "not accessible" not in done["stderr"]

    def refused(self, name: str) -> None:
        done = self.logins[name]
        assert done["rc"] == 255 and "Permission denied (publickey" in done["stderr"], done
        assert "not accessible" not in done["stderr"]


@pytest.fixture(scope="module")
def group_keys() -> SSHKeyPair:
    return generate_key_pair(comment=f"gang-extender@{NAMESPACE}/{GROUP}")


@pytest.fixture(scope="module")
def other_keys() -> SSHKeyPair:
    return generate_key_pair(comment=f"gang-extender@{NAMESPACE}/other")


@pytest.fixture
def port() -> Iterator[int]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free = int(probe.getsockname()[1])
    yield free


def wired_pod(*, ssh_path: str | None = None, fs_group: int | None = None) -> dict[str, Any]:
    """A worker of GROUP as the webhook patches it."""
    builder = make_pod(f"{GROUP}-worker", NAMESPACE).group(GROUP)
    if ssh_path is not None:
        builder = builder.annotation(SSH_PATH_ANNOTATION, ssh_path)
    pod = builder.obj()
    if fs_group is not None:
        pod["spec"]["securityContext"] = {"fsGroup": fs_group}
    membership = read_membership(pod=pod, namespace=NAMESPACE, group=GROUP, podgroup=None)
    patched: dict[str, Any] = apply_patch(pod, render_pod_patch(pod, membership, 1))
    return patched


def ssh_volume_and_mount(pod: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == SSH_VOLUME)
    mounts = pod["spec"]["containers"][0]["volumeMounts"]
    return volume, next(m for m in mounts if m["name"] == SSH_VOLUME)


def log_in(
    work: Path,
    *,
    pod: dict[str, Any],
    volume: dict[str, Any],
    mount: dict[str, Any],
    keys: SSHKeyPair,
    other: SSHKeyPair,
    port: int,
    user: dict[str, Any] | None = None,
) -> Logins:
    """Lay out the volume and mount in a mount namespace, start sshd, try the logins."""
    meta = pod["metadata"]
    secret = render_secret_data(keys, GROUP, port=port, ssh_path=ssh_path_of(meta))
    # Outside the ssh path, in the user's home in the namespace: readable by the user
    # (if ssh cannot stat an -i file it quietly falls back to ~/.ssh/id_rsa).
    home = "/root" if user is None else f"/home/{user['name']}"
    key_files = {f"{home}/group_id_rsa": keys.private_openssh}
    key_files[f"{home}/other_id_rsa"] = other.private_openssh
    explicit = ["ssh", "-F", "none", "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes"]
    explicit += ["-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null"]
    explicit += ["-p", str(port)]
    scenario = {
        "work": str(work),
        "volume": volume,
        "mount": mount,
        "secret": secret,
        "fs_group": (pod["spec"].get("securityContext") or {}).get("fsGroup"),
        "user": user,
        "port": port,
        "hosts": NAMES,
        "logins": {
            # By the names the group's ssh config matches: its key, its port.
            "short name": ["ssh", "-o", "BatchMode=yes", f"{GROUP}-worker-1", "id", "-un"],
            "fqdn": ["ssh", "-o", "BatchMode=yes", NAMES[1], "id", "-un"],
            # The same command with the group's key, then another group's.
            "group key": [*explicit, "-i", f"{home}/group_id_rsa", "127.0.0.1", "id", "-un"],
            "other group's key": [
                *explicit,
                "-i",
                f"{home}/other_id_rsa",
                "127.0.0.1",
                "id",
                "-un",
            ],
        },
        "key_files": key_files,
    }
    (work / "scenario.json").write_text(json.dumps(scenario))
    done = subprocess.run(
        ["unshare", "-m", "--propagation", "private", sys.executable, "-m"]
        + ["tests.system.kubelet_ssh_volume", str(work / "scenario.json")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=NAMESPACE_SECONDS,
    )
    assert done.returncode == 0, done.stderr
    return Logins(**json.loads(done.stdout))


@pytest.fixture
def work(tmp_path: Path) -> Path:
    return tmp_path


def test_a_member_logs_in_to_a_stock_sshd_with_the_groups_key_only(
    work: Path, group_keys: SSHKeyPair, other_keys: SSHKeyPair, port: int
) -> None:
    pod = wired_pod()
    volume, mount = ssh_volume_and_mount(pod)
    seen = log_in(
        work, pod=pod, volume=volume, mount=mount, keys=group_keys, other=other_keys, port=port
    )
    assert seen.sshd_options["strictmodes"] == "yes"
    for name in ("short name", "fqdn", "group key"):
        seen.ok(name, "root")
    seen.refused("other group's key")
    directory = seen.ssh_path["/root/.ssh"]
    assert (directory["mode"], directory["uid"]) == (0o755, 0)
    for name in ("id_rsa", "authorized_keys", "config"):
        assert seen.ssh_path[f"/root/.ssh/{name}"]["mode"] == 0o600


def test_a_custom_ssh_path_of_a_non_root_user_with_an_fs_group(
    work: Path, group_keys: SSHKeyPair, other_keys: SSHKeyPair, port: int
) -> None:
    # The user's files are root's, 0600: the fsGroup makes them group-readable (0640).
    pod = wired_pod(ssh_path="/home/mpi/.ssh", fs_group=MPI_USER["uid"])
    volume, mount = ssh_volume_and_mount(pod)
    assert mount["mountPath"] == "/home/mpi/.ssh"
    seen = log_in(
        work,
        pod=pod,
        volume=volume,
        mount=mount,
        keys=group_keys,
        other=other_keys,
        port=port,
        user=MPI_USER,
    )
    for name in ("short name", "fqdn", "group key"):
        seen.ok(name, "mpi")
    seen.refused("other group's key")
    directory = seen.ssh_path["/home/mpi/.ssh"]
    assert (directory["mode"], directory["uid"], directory["gid"]) == (0o2755, 0, 4242)
    assert seen.ssh_path["/home/mpi/.ssh/authorized_keys"]["mode"] == 0o640


def test_without_an_fs_group_a_non_root_user_cannot_read_the_keys(
    work: Path, group_keys: SSHKeyPair, other_keys: SSHKeyPair, port: int
) -> None:
    # What docs/webhook.md says: a non-root user needs the pod's fsGroup.
    pod = wired_pod(ssh_path="/home/mpi/.ssh")
    volume, mount = ssh_volume_and_mount(pod)
    seen = log_in(
        work,
        pod=pod,
        volume=volume,
        mount=mount,
        keys=group_keys,
        other=other_keys,
        port=port,
        user=MPI_USER,
    )
    assert seen.logins["short name"]["rc"] == 255
    assert "authorized keys '/home/mpi/.ssh/authorized_keys': Permission denied" in seen.sshd_log


def test_the_volume_root_at_the_ssh_path_is_refused(
    work: Path, group_keys: SSHKeyPair, other_keys: SSHKeyPair, port: int
) -> None:
    """The control: the mount before the fix (the whole volume at /root/.ssh)."""
    pod = wired_pod()
    volume = {
        "name": SSH_VOLUME,
        "secret": {"secretName": f"{GROUP}-ssh", "defaultMode": 0o600},
    }
    mount = {"name": SSH_VOLUME, "mountPath": "/root/.ssh", "readOnly": True}
    seen = log_in(
        work, pod=pod, volume=volume, mount=mount, keys=group_keys, other=other_keys, port=port
    )
    assert seen.ssh_path["/root/.ssh"]["mode"] == 0o1777
    assert seen.logins["short name"]["rc"] == 255
    assert "bad ownership or modes for directory /root/.ssh" in seen.sshd_log
