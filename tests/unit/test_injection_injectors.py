"""Each injector alone: what its concern wants on a member pod (identity, svc, ssh, env).

The assembled patch is pinned by tests/unit/test_injection_admission.py and the
admission golden files; these say what each concern contributes to it.
"""

from __future__ import annotations

from typing import Any

from extender.domain.objects.membership import (
    GROUP_LABEL,
    JOB_COMPLETION_INDEX_ANNOTATION,
    SSH_PATH_ANNOTATION,
    TASK_INDEX_ANNOTATION,
)
from extender.injection.admission import pod_group, read_membership
from extender.injection.env import member_env
from extender.injection.injectors import (
    INJECTORS,
    Injection,
    fence_toleration,
    group_volumes,
    identity,
    ssh_keys,
    svc_files,
    task_wait,
    vc_env,
)
from extender.injection.member import PodMembership
from tests.builders import make_pod, make_podgroup


def membership_of(pod: dict[str, Any], podgroup: dict[str, Any] | None = None) -> PodMembership:
    group = pod_group(pod)
    assert group is not None
    return read_membership(pod=pod, namespace="ns", group=group, podgroup=podgroup)


def worker(**annotations: str) -> dict[str, Any]:
    pod = make_pod("p").group("hvd").task("worker")
    for key, value in annotations.items():
        pod = pod.annotation(key, value)
    return pod.obj()


def test_the_registry_runs_identity_then_svc_then_ssh_then_env_then_the_wait_then_the_toleration() -> (
    None
):
    assert (identity, svc_files, ssh_keys, vc_env, task_wait, fence_toleration) == INJECTORS


def test_every_member_tolerates_every_reservation_fence() -> None:
    pod = worker()
    assert fence_toleration(pod, membership_of(pod), 0) == Injection(
        tolerations=(
            {"key": "gang-extender.io/reserved", "operator": "Exists", "effect": "NoSchedule"},
        )
    )


class TestIdentity:
    def test_labels_the_group_records_the_index_and_names_the_host(self) -> None:
        pod = worker()
        assert identity(pod, membership_of(pod), 2) == Injection(
            labels={GROUP_LABEL: "hvd"},
            annotations={TASK_INDEX_ANNOTATION: "2"},
            spec={"hostname": "hvd-worker-2", "subdomain": "hvd"},
        )

    def test_keeps_a_hostname_and_subdomain_the_user_chose(self) -> None:
        pod = worker()
        pod["spec"].update(hostname="mine", subdomain="theirs")
        assert identity(pod, membership_of(pod), 0).spec == {}

    def test_replaces_a_statefulsets_hostname_and_subdomain(self) -> None:
        pod = worker()
        pod["metadata"]["ownerReferences"] = [
            {"kind": "StatefulSet", "name": "set", "controller": True}
        ]
        pod["spec"].update(hostname="p", subdomain="set-svc")
        assert identity(pod, membership_of(pod), 1).spec == {
            "hostname": "hvd-worker-1",
            "subdomain": "hvd",
        }

    def test_replaces_an_indexed_jobs_hostname_but_keeps_its_subdomain(self) -> None:
        pod = worker(**{JOB_COMPLETION_INDEX_ANNOTATION: "3"})
        pod["metadata"]["ownerReferences"] = [
            {"kind": "Job", "name": "job", "controller": True, "apiVersion": "batch/v1"}
        ]
        pod["spec"].update(hostname="job-3", subdomain="job-svc")
        assert identity(pod, membership_of(pod), 3).spec == {"hostname": "hvd-worker-3"}

    def test_wants_no_volume_and_no_env(self) -> None:
        pod = worker()
        want = identity(pod, membership_of(pod), 0)
        assert (want.volume, list(want.env)) == (None, [])


class TestSvcFiles:
    def test_mounts_the_groups_configmap_at_etc_volcano(self) -> None:
        pod = worker()
        want = svc_files(pod, membership_of(pod), 0)
        assert want.volume is not None
        assert want.volume.volume == {
            "name": "gang-svc",
            "configMap": {"name": "hvd-svc", "defaultMode": 0o755},
        }
        assert want.volume.mount_path == "/etc/volcano"
        assert (want.labels, want.annotations, want.spec, list(want.env)) == ({}, {}, {}, [])

    def test_a_volume_pointing_at_the_configmap_counts_as_its_own(self) -> None:
        pod = worker()
        volume = svc_files(pod, membership_of(pod), 0).volume
        assert volume is not None
        assert volume.used_by({"name": "gang-svc", "configMap": {"name": "hvd-svc", "x": 1}})
        assert not volume.used_by({"name": "gang-svc", "configMap": {"name": "other"}})
        assert not volume.used_by(None)


class TestSshKeys:
    def test_mounts_the_groups_secret_owner_only_as_the_ssh_directory_at_root_ssh(self) -> None:
        pod = worker()
        want = ssh_keys(pod, membership_of(pod), 0)
        assert want.volume is not None
        assert want.volume.volume == {
            "name": "gang-ssh",
            "secret": {
                "secretName": "hvd-ssh",
                "defaultMode": 0o600,
                "items": [
                    {"key": "id_rsa", "path": ".ssh/id_rsa"},
                    {"key": "id_rsa.pub", "path": ".ssh/id_rsa.pub"},
                    {"key": "authorized_keys", "path": ".ssh/authorized_keys"},
                    {"key": "config", "path": ".ssh/config"},
                ],
            },
        }
        # The directory the kubelet makes inside the volume (0755), not the volume's
        # root (its tmpfs, 1777, which sshd's StrictModes refuses).
        assert want.volume.mount() == {
            "name": "gang-ssh",
            "mountPath": "/root/.ssh",
            "subPath": ".ssh",
            "readOnly": True,
        }

    def test_the_ssh_path_annotation_moves_the_mount(self) -> None:
        pod = worker(**{SSH_PATH_ANNOTATION: "/home/mpi/.ssh"})
        volume = ssh_keys(pod, membership_of(pod), 0).volume
        assert volume is not None and volume.mount_path == "/home/mpi/.ssh"
        assert volume.mount()["subPath"] == ".ssh"
        assert SSH_PATH_ANNOTATION in volume.mount_fix


class TestVcEnv:
    def test_is_the_members_env_for_every_task_of_the_layout(self) -> None:
        pod = worker()
        podgroup = make_podgroup("hvd", 4, namespace="ns", minTaskMember={"master": 1, "worker": 3})
        want = vc_env(pod, membership_of(pod, podgroup), 2)
        assert list(want.env) == member_env(
            group="hvd", task="worker", index=2, tasks=["master", "worker"]
        )
        assert want.volume is None

    def test_without_a_layout_only_the_own_task(self) -> None:
        pod = worker()
        names = [item["name"] for item in vc_env(pod, membership_of(pod), 0).env]
        assert names[:3] == ["VC_TASK_INDEX", "VK_TASK_INDEX", "VC_TASK_NAME"]
        assert "VC_WORKER_HOSTS" in names and "VC_MASTER_HOSTS" not in names


def test_the_group_volumes_are_the_svc_then_the_ssh_volume() -> None:
    pod = worker()
    assert [volume.name for volume in group_volumes(pod, membership_of(pod), 0)] == [
        "gang-svc",
        "gang-ssh",
    ]
