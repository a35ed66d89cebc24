"""How a pod names its group, task, index, group size and task layout (DESIGN section 2).

Pure functions over pod metadata dicts (the API server's JSON), shared by the
scheduler core, the webhook and the controller so they never disagree.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from extender.domain.objects.limits import MAX_GROUP_SIZE, MAX_TASKS, quoted

SCHEDULER_NAME = "gang-extender"
# What the API server puts in a pod's empty spec.schedulerName: kube-scheduler's
# default profile.
DEFAULT_SCHEDULER_NAME = "default-scheduler"

GROUP_LABEL = "gang-extender.io/group"
COSCHEDULING_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
VOLCANO_GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
# Volcano's own spelling of the same (VolcanoGroupNameAnnotationKey in volcano.sh/apis
# scheduling/v1beta1, beside KubeGroupNameAnnotationKey above); its job controller sets both.
VOLCANO_OWN_GROUP_ANNOTATION = "scheduling.volcano.sh/group-name"
# JobSet's labels on its pods (sigs.k8s.io/jobset api/jobset/v1alpha2): the replicated
# job and which of its Jobs (Kubeflow Trainer v2 runs every TrainJob as a JobSet).
JOBSET_REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
JOBSET_JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"
# Kubernetes' own reference (k8s.io/api core/v1 PodSpec.SchedulingGroup, 1.36 and later,
# behind the GenericWorkload gate): the name of a scheduling.k8s.io PodGroup.
UPSTREAM_GROUP_FIELD = "spec.schedulingGroup.podGroupName"
# Kubernetes 1.35's reference (k8s.io/api v0.35 core/v1 PodSpec.WorkloadRef, behind the
# GenericWorkload gate): a pod group inside a scheduling.k8s.io/v1alpha1 Workload.
WORKLOAD_REF_FIELD = "spec.workloadRef"
MIN_AVAILABLE_ANNOTATION = "gang-extender.io/min-available"
TASK_LABEL = "gang-extender.io/task"
# Volcano's task of a vcjob pod (TaskSpecKey in volcano.sh/apis batch/v1alpha1): the
# names a Volcano PodGroup's spec.minTaskMember counts by.
VOLCANO_TASK_ANNOTATION = "volcano.sh/task-spec"
# Volcano's index of a vcjob pod within its task (TaskIndex in volcano.sh/apis
# batch/v1alpha1): the same per-task numbering as ours.
VOLCANO_TASK_INDEX_ANNOTATION = "volcano.sh/task-index"
TASKS_ANNOTATION = "gang-extender.io/tasks"
TASK_INDEX_ANNOTATION = "gang-extender.io/task-index"
JOB_COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
STATEFULSET_POD_INDEX_LABEL = "apps.kubernetes.io/pod-index"
INJECT_NAMESPACE_LABEL = "gang-extender.io/inject"
SSH_PATH_ANNOTATION = "gang-extender.io/ssh-path"
SSH_PORT_ANNOTATION = "gang-extender.io/ssh-port"
PLANNED_NODE_ANNOTATION = "gang-extender.io/planned-node"
# The scheduling gate of gated admission (docs/design.md#gated-admission): a member
# carrying it is planned by the service without kube-scheduler asking, and the gate
# is lifted, with the planned node written, once its gang is planned whole.
ADMISSION_GATE = "gang-extender.io/admission"
# On a PodGroup gang-extender created from its members' min-available annotation.
CREATED_FROM_ANNOTATION = "gang-extender.io/created-from"

DEFAULT_TASK = "worker"

# RFC 1123 label: what a group or task must be to form a hostname.
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# RFC 1035 label (starts with a letter): what a Service name must be, and a group names one.
_DNS_1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
MAX_DNS_LABEL = 63


class MembershipError(ValueError):
    """Pod metadata that names a group, size or layout inconsistently; says what to fix."""


class IndexTooLarge(MembershipError):
    """A task index at or past MAX_GROUP_SIZE: refused wherever it is read, never skipped."""


class GroupKey(NamedTuple):
    """A group's namespace and name. A NamedTuple, not a dataclass: it keys most of
    the core's maps, and a tuple's hash and ordering run in C (the once-a-second look
    for starving gangs hashed and sorted it ~12,000 times a tick at 1,000 held gangs)."""

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


def _labels(meta: Mapping[str, Any]) -> Mapping[str, str]:
    return meta.get("labels") or {}


def _annotations(meta: Mapping[str, Any]) -> Mapping[str, str]:
    return meta.get("annotations") or {}


def upstream_group_name(spec: Mapping[str, Any] | None) -> str | None:
    """`spec.schedulingGroup.podGroupName` of a pod spec, None when unset or not a string."""
    ref = (spec or {}).get("schedulingGroup")
    name = ref.get("podGroupName") if isinstance(ref, Mapping) else None
    return name if isinstance(name, str) and name else None


@dataclass(frozen=True)
class WorkloadRef:
    """A pod's `spec.workloadRef` (Kubernetes 1.35): its Workload, pod group and replica."""

    workload: str
    pod_group: str
    replica_key: str = ""

    @property
    def group(self) -> str:
        """The gang's name: `<workload>-<podGroup>`, plus `-<replicaKey>` when set, since
        Kubernetes applies a pod group's policy to each replica on its own."""
        parts = [self.workload, self.pod_group] + ([self.replica_key] if self.replica_key else [])
        return "-".join(parts)


def workload_ref(spec: Mapping[str, Any] | None) -> WorkloadRef | None:
    """`spec.workloadRef` of a pod spec, None when unset.

    Raises when it is set but unusable: a name or podGroup missing, or a group name
    (`WorkloadRef.group`) that is not a DNS label of at most 63 characters: the
    group's headless Service and every member's subdomain are named after it.
    """
    ref = (spec or {}).get("workloadRef")
    if ref is None:
        return None
    if not isinstance(ref, Mapping):
        raise MembershipError(f"field {WORKLOAD_REF_FIELD}={quoted(ref)} is not an object")
    name, pod_group = ref.get("name"), ref.get("podGroup")
    replica_key = ref.get("podGroupReplicaKey") or ""
    if not isinstance(name, str) or not name or not isinstance(pod_group, str) or not pod_group:
        raise MembershipError(
            f"field {WORKLOAD_REF_FIELD} must set both name and podGroup, got {quoted(dict(ref))}"
        )
    if not isinstance(replica_key, str):
        raise MembershipError(
            f"field {WORKLOAD_REF_FIELD}.podGroupReplicaKey={quoted(replica_key)} is not a string"
        )
    found = WorkloadRef(name, pod_group, replica_key)
    group = found.group
    if len(group) > MAX_DNS_LABEL or not _DNS_1035_LABEL.match(group):
        joined = "-".join(["name", "podGroup"] + (["podGroupReplicaKey"] if replica_key else []))
        raise MembershipError(
            f"field {WORKLOAD_REF_FIELD} gives group name {quoted(group)} ({joined}), which is "
            f"not a lower-case DNS label that starts with a letter and has at most "
            f"{MAX_DNS_LABEL} characters ({len(group)}): it names the group's headless "
            f"Service and every member's subdomain; shorten the Workload or pod group name"
        )
    return found


def group_name(meta: Mapping[str, Any], spec: Mapping[str, Any] | None = None) -> str | None:
    """The group a pod belongs to, or None. Raises when two sources disagree.

    `spec` (the pod's) adds Kubernetes' own references (`spec.schedulingGroup`, 1.36 on;
    `spec.workloadRef`, 1.35); without it only metadata is read.
    """
    labels, annotations = _labels(meta), _annotations(meta)
    # Most pods set neither field: skip their readers (the same None they would give).
    upstream = upstream_group_name(spec) if spec and "schedulingGroup" in spec else None
    ref = workload_ref(spec) if spec and "workloadRef" in spec else None
    values = (
        labels.get(GROUP_LABEL),
        labels.get(COSCHEDULING_GROUP_LABEL),
        annotations.get(VOLCANO_GROUP_ANNOTATION),
        # Kubeflow Trainer's volcano podGroupPolicy sets Volcano's key as a label.
        labels.get(VOLCANO_GROUP_ANNOTATION),
        annotations.get(VOLCANO_OWN_GROUP_ANNOTATION),
        upstream,
        ref.group if ref else None,
    )
    if not any(values):
        return None
    distinct = {value for value in values if value}  # not empty: one value is set
    if len(distinct) > 1:
        claims = ", ".join(
            f"{where}={quoted(value)}"
            for where, value in zip(_GROUP_SOURCES, values, strict=True)
            if value
        )
        raise MembershipError(
            f"pod claims two groups ({claims}); set one group name in all of them"
        )
    return distinct.pop()


# Where group_name reads a group name, in its order (named only in the two-groups error).
_GROUP_SOURCES = (
    f"label {GROUP_LABEL}",
    f"label {COSCHEDULING_GROUP_LABEL}",
    f"annotation {VOLCANO_GROUP_ANNOTATION}",
    f"label {VOLCANO_GROUP_ANNOTATION}",
    f"annotation {VOLCANO_OWN_GROUP_ANNOTATION}",
    f"field {UPSTREAM_GROUP_FIELD}",
    f"field {WORKLOAD_REF_FIELD}",
)


def group_key(meta: Mapping[str, Any], spec: Mapping[str, Any] | None = None) -> GroupKey | None:
    name = group_name(meta, spec)
    if name is None:
        return None
    return GroupKey(meta.get("namespace") or "default", name)


def task_name(meta: Mapping[str, Any]) -> str:
    """Label gang-extender.io/task, else Volcano's volcano.sh/task-spec annotation, else
    JobSet's `<replicatedjob-name>-<job-index>`, else worker.

    A JobSet pod's task is one of its Jobs, so the task's index is the Job's completion
    index and the hostname `<group>-<task>-<index>` is the one JobSet gives it
    (`<jobset>-<replicatedjob>-<job-index>-<index>`, the group being named after the JobSet).
    """
    labels = _labels(meta)
    explicit = labels.get(TASK_LABEL) or _annotations(meta).get(VOLCANO_TASK_ANNOTATION)
    if explicit:
        return explicit
    replicated = labels.get(JOBSET_REPLICATED_JOB_LABEL)
    if replicated:
        job = labels.get(JOBSET_JOB_INDEX_LABEL)
        return f"{replicated}-{job}" if job else replicated
    return DEFAULT_TASK


def min_available(meta: Mapping[str, Any]) -> int | None:
    """`gang-extender.io/min-available` as an int, None when absent."""
    raw = _annotations(meta).get(MIN_AVAILABLE_ANNOTATION)
    if raw is None:
        return None
    if isinstance(raw, str) and raw.strip().isdigit() and len(raw.strip().lstrip("0")) > 9:
        value = MAX_GROUP_SIZE + 1  # past the limit: not parsed (int() refuses 4,300 digits)
    else:
        value = _annotation_int(raw)
    if value < 1:
        raise MembershipError(f"annotation {MIN_AVAILABLE_ANNOTATION}={quoted(raw)} must be >= 1")
    if value > MAX_GROUP_SIZE:
        raise MembershipError(
            f"annotation {MIN_AVAILABLE_ANNOTATION}={quoted(raw)} is more than this service "
            f"accepts: at most {MAX_GROUP_SIZE} members in a group"
        )
    return value


def _annotation_int(raw: object) -> int:
    """min-available's value as an int, else a MembershipError saying it is not one."""
    try:
        return int(raw)  # type: ignore[call-overload,no-any-return]
    except (TypeError, ValueError):  # a list or object where a string belongs, too
        raise MembershipError(
            f"annotation {MIN_AVAILABLE_ANNOTATION}={quoted(raw)} is not a whole number"
        ) from None


def parse_task_layout(text: str) -> dict[str, int]:
    """Parse "master=1,worker=3" into {"master": 1, "worker": 3}.

    At most MAX_TASKS tasks, each a DNS label of at most 63 characters, adding up to
    at most MAX_GROUP_SIZE members (extender/domain/objects/limits.py); the text is quoted
    short in every message.
    """
    said = f"annotation {TASKS_ANNOTATION}={quoted(text)}"
    if not isinstance(text, str):
        raise MembershipError(f"{said}: expected a string 'task=count,...'")
    parts = [part.strip() for part in text.split(",") if part.strip()]
    if len(parts) > MAX_TASKS:
        raise MembershipError(
            f"{said} names {len(parts)} tasks; at most {MAX_TASKS} tasks are accepted"
        )
    layout: dict[str, int] = {}
    for part in parts:
        task, sep, count = part.partition("=")
        task = task.strip()
        if not sep or not is_dns_label(task):
            raise MembershipError(
                f"{said}: expected 'task=count,...' with lower-case DNS-label task names, "
                f"got {quoted(part)}"
            )
        try:
            value = int(count)
        except (TypeError, ValueError):
            raise MembershipError(f"{said}: count {quoted(count)} is not a whole number") from None
        if value < 1:
            raise MembershipError(f"{said}: counts must be >= 1")
        if task in layout:
            raise MembershipError(f"{said}: task {task!r} twice")
        layout[task] = value
    if not layout:
        raise MembershipError(f"{said} names no task")
    total = sum(layout.values())
    if total > MAX_GROUP_SIZE:
        raise MembershipError(
            f"{said} asks for {total} members; at most {MAX_GROUP_SIZE} members in a group"
        )
    return layout


def task_layout(meta: Mapping[str, Any]) -> dict[str, int] | None:
    raw = _annotations(meta).get(TASKS_ANNOTATION)
    return parse_task_layout(raw) if raw is not None else None


def explicit_task_index(meta: Mapping[str, Any]) -> int | None:
    """The index a pod already carries (annotation, Indexed Job, StatefulSet), else None."""
    annotations, labels = _annotations(meta), _labels(meta)
    for where, raw in (
        (f"annotation {TASK_INDEX_ANNOTATION}", annotations.get(TASK_INDEX_ANNOTATION)),
        (
            f"annotation {JOB_COMPLETION_INDEX_ANNOTATION}",
            annotations.get(JOB_COMPLETION_INDEX_ANNOTATION),
        ),
        (
            f"annotation {VOLCANO_TASK_INDEX_ANNOTATION}",
            annotations.get(VOLCANO_TASK_INDEX_ANNOTATION),
        ),
        (f"label {STATEFULSET_POD_INDEX_LABEL}", labels.get(STATEFULSET_POD_INDEX_LABEL)),
    ):
        if raw is None:
            continue
        try:
            value = int(raw)
        except (TypeError, ValueError):
            raise MembershipError(f"{where}={quoted(raw)} is not a whole number") from None
        if value < 0:
            raise MembershipError(f"{where}={quoted(raw)} must be >= 0")
        if value >= MAX_GROUP_SIZE:
            raise IndexTooLarge(
                f"{where}={quoted(raw)} is past the largest index this service accepts: "
                f"indexes must be below {MAX_GROUP_SIZE}, the most members a group may have"
            )
        return value
    return None


def is_dns_label(text: str) -> bool:
    return len(text) <= 63 and bool(_DNS_LABEL.match(text))
