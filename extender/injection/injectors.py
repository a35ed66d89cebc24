"""What the webhook adds to a member pod: one injector per concern, registered in `INJECTORS`.

Like Volcano's job plugins, each concern is a pure function of the pod, its
membership and its task index, returning what it wants on the pod (an `Injection`),
not patch ops:

- `identity`: the group label, the task-index annotation, hostname and subdomain;
- `svc_files`: ConfigMap `<group>-svc` as volume gang-svc, mounted at /etc/volcano;
- `ssh_keys`: Secret `<group>-ssh` as volume gang-ssh, its files under `.ssh/` in the
  volume, that directory (subPath) mounted at the pod's ssh path;
- `vc_env`: the VC_* (and GANG_*) variables, prepended to every container's env;
- `task_wait`: for a pod that declares `gang-extender.io/depends-on`, the last init
  container `wait-for-tasks` (extender.injection.depends);
- `fence_toleration`: the toleration of the reservation fence taint
  (extender.domain.cluster.fences), so a starving gang can still be placed on the nodes it
  fenced against every other scheduler.

`extender.injection.admission.render_pod_patch` runs them in `INJECTORS` order and
assembles their wants into one JSON patch, checking that the pod's own volumes and
mounts are not in the way; the order fixes the order of the patch's operations.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from extender.domain.cluster.fences import MEMBER_TOLERATION
from extender.domain.objects.membership import (
    GROUP_LABEL,
    JOB_COMPLETION_INDEX_ANNOTATION,
    SSH_PATH_ANNOTATION,
    TASK_INDEX_ANNOTATION,
)
from extender.injection import names
from extender.injection.depends import wait_container
from extender.injection.env import EnvVar, member_env
from extender.injection.member import PodMembership
from extender.injection.ssh import volume_items


@dataclass(frozen=True)
class GroupVolume:
    """A volume the webhook adds for the group, where it is mounted, and how to tell
    a volume that already points at it."""

    volume: dict[str, Any]  # as added to the pod
    source: str  # "configMap" or "secret"
    field: str  # the source's field that names the object
    target: str  # the group's object
    mount_path: str  # where every container mounts it (read-only)
    mount_fix: str  # what to do when a container's own mount is at mount_path
    sub_path: str | None = None  # the directory of the volume mounted, None for its root

    @property
    def name(self) -> str:
        return str(self.volume["name"])

    def mount(self) -> dict[str, Any]:
        """The volumeMount every container gets."""
        mount: dict[str, Any] = {"name": self.name, "mountPath": self.mount_path}
        if self.sub_path is not None:
            mount["subPath"] = self.sub_path
        mount["readOnly"] = True
        return mount

    def used_by(self, present: Mapping[str, Any] | None) -> bool:
        # Compared by source, not equality: API defaulting adds fields on reinvocation.
        return present is not None and (present.get(self.source) or {}).get(self.field) == (
            self.target
        )


@dataclass(frozen=True)
class Injection:
    """What one concern wants on the pod; empty fields want nothing."""

    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    # Members of the pod's spec to set (hostname, subdomain), in order.
    spec: Mapping[str, str] = field(default_factory=dict)
    volume: GroupVolume | None = None
    # Prepended, in order, to every container's and init container's env (names the
    # container already has are left alone).
    env: Sequence[EnvVar] = ()
    # Appended to spec.initContainers, then given the group's mounts and env like
    # every container.
    init_containers: Sequence[Mapping[str, Any]] = ()
    # Appended to spec.tolerations unless an equal one is there.
    tolerations: Sequence[Mapping[str, str]] = ()


Injector = Callable[[Mapping[str, Any], PodMembership, int], Injection]


def identity(pod: Mapping[str, Any], membership: PodMembership, index: int) -> Injection:
    """Group label, task-index annotation, hostname and subdomain.

    The headless Service selects on the label; pods that joined through the
    scheduler-plugins label or the Volcano annotation get it too (same value). The
    index is recorded on the pod so it is visible, survives reinvocation, and is what
    the allocator counts as taken. hostname/subdomain are ours unless the user set
    them (a controller's identity is replaced).
    """
    spec = pod.get("spec") or {}
    workload = _workload_identity(pod)
    wanted: dict[str, str] = {}
    if not spec.get("hostname") or workload is not None:
        wanted["hostname"] = names.hostname(membership.group, membership.task, index)
    if not spec.get("subdomain") or workload == "StatefulSet":
        wanted["subdomain"] = names.service_name(membership.group)
    return Injection(
        labels={GROUP_LABEL: membership.group},
        annotations={TASK_INDEX_ANNOTATION: str(index)},
        spec=wanted,
    )


def svc_files(pod: Mapping[str, Any], membership: PodMembership, index: int) -> Injection:
    """ConfigMap `<group>-svc` (host lists, hostfiles, scripts) as files under /etc/volcano.

    Mode 0755: discover_hosts.sh and wait_for_tasks.sh are run as commands."""
    configmap = names.svc_configmap_name(membership.group)
    return Injection(
        volume=GroupVolume(
            volume={
                "name": names.SVC_VOLUME,
                "configMap": {"name": configmap, "defaultMode": names.SVC_VOLUME_MODE},
            },
            source="configMap",
            field="name",
            target=configmap,
            mount_path=names.VOLCANO_MOUNT_PATH,
            mount_fix="remove or move that mount",
        )
    )


def ssh_keys(pod: Mapping[str, Any], membership: PodMembership, index: int) -> Injection:
    """Secret `<group>-ssh` (key pair, authorized_keys, config) at the pod's ssh path.

    Volcano's layout: the Secret's keys are items under `.ssh/` in the volume and that
    directory is mounted (`subPath: .ssh`), not the volume's root. The root is the
    kubelet's tmpfs, mode 1777, and stock sshd (StrictModes yes) refuses an
    authorized_keys in a group- or world-writable directory; `.ssh` is made by the
    kubelet inside the volume, 0755 and root's. A subPath mount is a snapshot taken
    when the container starts, which is why nothing in the Secret depends on the
    group's members (`extender.injection.ssh.render_secret_data`). The same for a
    custom ssh path (annotation gang-extender.io/ssh-path).
    """
    secret = names.ssh_secret_name(membership.group)
    return Injection(
        volume=GroupVolume(
            volume={
                "name": names.SSH_VOLUME,
                "secret": {
                    "secretName": secret,
                    "defaultMode": names.SSH_DEFAULT_MODE,
                    "items": volume_items(),
                },
            },
            source="secret",
            field="secretName",
            target=secret,
            mount_path=membership.ssh_path,
            mount_fix=(
                f"remove that mount or set annotation {SSH_PATH_ANNOTATION} to another directory"
            ),
            sub_path=names.SSH_VOLUME_DIR,
        )
    )


def vc_env(pod: Mapping[str, Any], membership: PodMembership, index: int) -> Injection:
    """The member's env (extender.injection.env); prepended so the user's own env can
    refer to it as $(VC_TASK_INDEX)."""
    return Injection(
        env=member_env(
            group=membership.group,
            task=membership.task,
            index=index,
            tasks=membership.env_tasks(),
        )
    )


def task_wait(pod: Mapping[str, Any], membership: PodMembership, index: int) -> Injection:
    """The `wait-for-tasks` init container, for a pod declaring the tasks it waits for."""
    if membership.dependency is None:
        return Injection()
    return Injection(init_containers=(wait_container(pod, membership.dependency),))


def fence_toleration(pod: Mapping[str, Any], membership: PodMembership, index: int) -> Injection:
    """Tolerate every reservation fence: which gang may use a fenced node is this
    scheduler's reservation, checked at filter and bind; the taint keeps out the pods
    that never ask it."""
    return Injection(tolerations=(MEMBER_TOLERATION,))


# The one registry: every concern the webhook injects, in the order it is assembled.
INJECTORS: tuple[Injector, ...] = (
    identity,
    svc_files,
    ssh_keys,
    vc_env,
    task_wait,
    fence_toleration,
)


def injections(pod: Mapping[str, Any], membership: PodMembership, index: int) -> list[Injection]:
    """What every registered injector wants on `pod` as member `index`, in order."""
    return [inject(pod, membership, index) for inject in INJECTORS]


def group_volumes(
    pod: Mapping[str, Any], membership: PodMembership, index: int
) -> list[GroupVolume]:
    """The group volumes the injectors add, in order (for the patch and the reinvocation check)."""
    return [each.volume for each in injections(pod, membership, index) if each.volume is not None]


def _workload_identity(pod: Mapping[str, Any]) -> str | None:
    """Which controller ("StatefulSet", "Job") gave spec.hostname as its identity, else None.

    A StatefulSet always sets hostname `<set>-<i>` and subdomain `<serviceName>`, an
    Indexed Job hostname `<job>-<i>`. They are not the user's choice, and keeping them
    would leave the group's host lists naming hosts that do not resolve.
    """
    meta = pod.get("metadata") or {}
    hostname = (pod.get("spec") or {}).get("hostname")
    completion = (meta.get("annotations") or {}).get(JOB_COMPLETION_INDEX_ANNOTATION)
    for owner in meta.get("ownerReferences") or []:
        if not owner.get("controller"):
            continue
        kind = owner.get("kind")
        if kind == "StatefulSet" and hostname == meta.get("name"):
            return "StatefulSet"
        if (
            kind == "Job"
            and completion is not None
            and hostname == f"{owner.get('name')}-{completion}"
        ):
            return "Job"
    return None
