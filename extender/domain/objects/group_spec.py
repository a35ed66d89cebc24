"""What a gang asks for (`GroupSpec`), read from its PodGroup of any source or its
pods' annotations, with the rules a spec must meet.

Pure parsing, no I/O. Part of the core's plain data (domain/objects/model.py, which
re-exports these names for its importers).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from extender.domain.objects import membership
from extender.domain.objects.limits import MAX_GROUP_SIZE, MAX_SECONDS, MAX_TASKS, listing, quoted
from extender.domain.objects.membership import GroupKey
from extender.domain.objects.policy import GroupTopology, topology_from_spec

# PodGroup status.phase of a group held after AbortJob (domain/lifecycle/lifecycle.py).
HELD_PHASE = "Aborted"


def _whole_number(value: object) -> bool:
    """An int of the JSON, not a bool (in Python `True` is an int too)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: object) -> bool:
    """An int or a float of the JSON, not a bool."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def _size_rule(value: object) -> str:
    """What a group size that is not a whole number from 1 to MAX_GROUP_SIZE must be."""
    if _whole_number(value) and value > MAX_GROUP_SIZE:  # type: ignore[operator]
        return f"is more than this service accepts: at most {MAX_GROUP_SIZE} members in a group"
    return "must be a whole number >= 1"


def _seconds_rule(value: object) -> str:
    """What a duration that is not `_seconds` must be."""
    if _number(value) and value > MAX_SECONDS:  # type: ignore[operator]
        return f"must be at most {MAX_SECONDS} seconds (a year)"
    return "must be > 0"


def _seconds(value: object) -> bool:
    """A duration a user may set: a number > 0 and at most MAX_SECONDS (compared as
    the number it is: a 400-digit int never goes through float(), which overflows)."""
    return _number(value) and 0 < value <= MAX_SECONDS  # type: ignore[operator]


@dataclass(frozen=True)
class GroupSpec:
    """What a group asks for, from its PodGroup or its pods' annotations."""

    key: GroupKey
    min_member: int
    source: str  # "PodGroup", "coscheduling PodGroup", UPSTREAM_PODGROUP_SOURCE or "annotation"
    schedule_timeout_seconds: float | None = None
    min_task_member: Mapping[str, int] | None = None
    error: str | None = None
    # A PodGroup gang-extender created from the members' min-available annotation
    # (annotated CREATED_FROM_ANNOTATION): it follows its members; a user's never does.
    managed: bool = False
    # spec.topology: None leaves it to the members' Kueue annotations, then the policy.
    topology: GroupTopology | None = None
    # spec.starvationSeconds: None leaves it to the members' annotation, then Settings.
    starvation_seconds: float | None = None
    # spec.preemptible: False opts the gang out of being preempted (domain/preemption/preemption.py).
    preemptible: bool = True
    # Disruption mode All: members are preempted and evicted together (ours, every
    # source's but an upstream PodGroup's, whose spec.disruptionMode defaults to Single).
    disrupted_whole: bool = True

    @classmethod
    def from_podgroup(cls, obj: Mapping[str, Any], *, source: str) -> GroupSpec:
        meta, spec = obj["metadata"], obj.get("spec") or {}
        key = GroupKey(meta.get("namespace") or "default", meta["name"])
        error = None
        min_member = spec.get("minMember", 1)
        if not _whole_number(min_member) or min_member < 1:
            error = f"{source} spec.minMember={quoted(min_member)} must be a whole number >= 1"
            min_member = 1
        elif min_member > MAX_GROUP_SIZE:
            error = (
                f"{source} spec.minMember={quoted(min_member)} is more than this service "
                f"accepts: at most {MAX_GROUP_SIZE} members in a group"
            )
            min_member = 1
        timeout = spec.get("scheduleTimeoutSeconds")
        if timeout is not None and not _seconds(timeout):
            error = error or (
                f"{source} spec.scheduleTimeoutSeconds={quoted(timeout)} {_seconds_rule(timeout)}"
            )
            timeout = None
        starvation = spec.get("starvationSeconds")
        if starvation is not None and not _seconds(starvation):
            error = error or (
                f"{source} spec.starvationSeconds={quoted(starvation)} {_seconds_rule(starvation)}"
            )
            starvation = None
        tasks, tasks_error = read_task_minimums(
            spec.get("minTaskMember"), where=f"{source} spec.minTaskMember"
        )
        if tasks is not None and error is None:
            tasks_error = task_minimums_exceed(
                min_member,
                tasks,
                tasks_from=f"{source} spec.minTaskMember",
                size_from="spec.minMember",
            )
        topology, topology_error = topology_from_spec(
            spec.get("topology"), where=f"{source} spec.topology"
        )
        error = error or topology_error
        preemptible = spec.get("preemptible", True)
        if not isinstance(preemptible, bool):
            error = (
                error or f"{source} spec.preemptible={quoted(preemptible)} must be true or false"
            )
            preemptible = True
        # A group its lifecycle policy aborted (domain/lifecycle/lifecycle.py) is held until its
        # user changes or deletes the PodGroup: its members are refused, saying so.
        phase = (obj.get("status") or {}).get("phase")
        if phase == HELD_PHASE and error is None:
            error = (
                f"{source} {key.name} is {HELD_PHASE} by its lifecycle policy; change or "
                "delete the PodGroup to run the gang again"
            )
        return cls(
            key=key,
            min_member=min_member,
            source=source,
            schedule_timeout_seconds=float(timeout) if timeout is not None else None,
            min_task_member=tasks,
            error=error or tasks_error,
            managed=membership.CREATED_FROM_ANNOTATION in (meta.get("annotations") or {}),
            topology=topology,
            starvation_seconds=float(starvation) if starvation is not None else None,
            preemptible=preemptible,
        )

    def with_members_task_layout(self, layout: Mapping[str, int], *, size_from: str) -> GroupSpec:
        """This spec with the members' gang-extender.io/tasks layout as its task minimums.

        Only a spec without minTaskMember of its own takes it (a PodGroup's wins), and a
        layout asking for more members than `size_from` says the group has makes the
        spec an error rather than a plan that can never satisfy both.
        """
        if self.min_task_member is not None or self.error is not None:
            return self
        exceed = task_minimums_exceed(
            self.min_member,
            layout,
            tasks_from=f"annotation {membership.TASKS_ANNOTATION}",
            size_from=size_from,
        )
        return replace(self, min_task_member=dict(layout), error=exceed)


def read_task_minimums(raw: Any, *, where: str) -> tuple[dict[str, int] | None, str | None]:
    """`minTaskMember` as task -> count (None when absent or empty), and what is wrong with it.

    The CRD refuses counts below 1, but a PodGroup of another schema (or one stored
    before the CRD said so) can carry anything: a count that is not a whole number
    >= 1 makes the group's spec an error instead of a plan built on it.
    """
    if raw is None or raw == {}:
        return None, None
    if not isinstance(raw, Mapping):
        return None, f"{where} must map task names to counts, got {quoted(raw)}"
    if len(raw) > MAX_TASKS:
        return None, f"{where} names {len(raw)} tasks; at most {MAX_TASKS} tasks are accepted"
    counts: dict[str, int] = {}
    for task, count in raw.items():
        if not isinstance(task, str) or not membership.is_dns_label(task):
            return None, (
                f"{where}: task {quoted(task)} must be a lower-case DNS label of at most "
                f"{membership.MAX_DNS_LABEL} characters"
            )
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            return None, f"{where}[{task}]={quoted(count)} must be a whole number >= 1"
        if count > MAX_GROUP_SIZE:
            return None, (
                f"{where}[{task}]={count} is more than this service accepts: at most "
                f"{MAX_GROUP_SIZE} members in a group"
            )
        counts[task] = count
    return counts, None


def task_minimums_exceed(
    min_member: int, minimums: Mapping[str, int], *, tasks_from: str, size_from: str
) -> str | None:
    """Why task minimums that add up to more than minMember cannot stand, else None.

    Every task minimum counts toward minMember, so such a group would be planned
    bigger than its declared size; it is refused and the message says which to raise.
    """
    total = sum(minimums.values())
    if total <= min_member:
        return None
    listed = listing((f"{task}={count}" for task, count in minimums.items()), sep=",")
    return (
        f"{tasks_from} ({listed}) asks for {total} members, more than {size_from}="
        f"{min_member}; raise {size_from} to {total} or lower the task counts"
    )


# GroupSpec.source of a Kubernetes scheduling.k8s.io PodGroup (the Workload API's runtime
# group, KEP-4671/KEP-5832: v1beta1 in 1.37, v1alpha3 in 1.37, v1alpha2 in 1.36).
UPSTREAM_PODGROUP_SOURCE = "upstream PodGroup"


def upstream_podgroup_spec(obj: Mapping[str, Any]) -> GroupSpec:
    """A scheduling.k8s.io PodGroup as a group: `spec.schedulingPolicy.gang.minCount` is
    its size; `spec.schedulingPolicy.basic` (no gang) is size 1: no member waits for others.

    `spec.disruptionMode` is read: `all` keeps members preempted together as every
    gang-extender group is; `single`, or none (the API server's default), lets
    preemption take one member at a time (domain/preemption/preemption.py).

    Anything else (no policy, a minCount that is not a whole number >= 1, a parent
    CompositePodGroup, which gang-extender does not place) is an error the group
    shows until it is fixed. Its other fields (priority,
    schedulingConstraints, resourceClaims) are not read.
    """
    meta, spec = obj["metadata"], obj.get("spec") or {}
    key = GroupKey(meta.get("namespace") or "default", meta["name"])
    where = f"{UPSTREAM_PODGROUP_SOURCE} {meta['name']}"
    policy = spec.get("schedulingPolicy")
    policy = policy if isinstance(policy, Mapping) else {}
    gang = policy.get("gang")
    error = None
    min_member = 1
    if isinstance(gang, Mapping):
        count = gang.get("minCount")
        if isinstance(count, int) and not isinstance(count, bool) and 1 <= count <= MAX_GROUP_SIZE:
            min_member = count
        else:
            error = (
                f"{where} spec.schedulingPolicy.gang.minCount={quoted(count)} {_size_rule(count)}"
            )
    elif not isinstance(policy.get("basic"), Mapping):
        error = f"{where} sets neither spec.schedulingPolicy.gang nor spec.schedulingPolicy.basic"
    parent = spec.get("parentCompositePodGroupName")
    if parent is not None:
        # A gang of gangs: placing this group alone could run part of the composite.
        error = error or (
            f"{where} is a child of CompositePodGroup {quoted(parent)} "
            f"(spec.parentCompositePodGroupName): gang-extender places each PodGroup as a "
            f"gang of its own and not a composite's minGroupCount groups together, so it "
            f"holds the group; run it with Kubernetes' gang scheduling (gang-extender in "
            f"wiring-only mode) or create the PodGroup without a parent"
        )
    mode = spec.get("disruptionMode")
    disrupted_whole = isinstance(mode, Mapping) and isinstance(mode.get("all"), Mapping)
    if mode is not None and not (
        isinstance(mode, Mapping) and (disrupted_whole or isinstance(mode.get("single"), Mapping))
    ):
        error = error or (
            f"{where} spec.disruptionMode={quoted(mode)} must be {{single: {{}}}} or {{all: {{}}}}"
        )
        disrupted_whole = True  # unreadable: the safer of the two until it is fixed
    return GroupSpec(
        key=key,
        min_member=min_member,
        source=UPSTREAM_PODGROUP_SOURCE,
        error=error,
        disrupted_whole=disrupted_whole,
    )


# GroupSpec.source of a group named by a pod's spec.workloadRef (Kubernetes 1.35's
# Workload API: scheduling.k8s.io/v1alpha1 Workload, one entry per pod group).
UPSTREAM_WORKLOAD_SOURCE = "upstream Workload"


def upstream_workload_spec(obj: Mapping[str, Any], ref: membership.WorkloadRef) -> GroupSpec:
    """The gang a pod's `spec.workloadRef` names, sized by its scheduling.k8s.io/v1alpha1
    Workload: the `spec.podGroups[]` entry named `ref.pod_group` gives
    `policy.gang.minCount`, or size 1 for `policy.basic`. Each replica key is a gang of
    its own (`WorkloadRef.group`) with the entry's size, as Kubernetes applies it.

    A ref to an entry the Workload does not have, or an entry with neither policy,
    is an error the group shows until it is fixed. `controllerRef` is not read.
    """
    meta, spec = obj["metadata"], obj.get("spec") or {}
    key = GroupKey(meta.get("namespace") or "default", ref.group)
    where = f"{UPSTREAM_WORKLOAD_SOURCE} {meta['name']}"
    entries = spec.get("podGroups")
    entries = [e for e in entries if isinstance(e, Mapping)] if isinstance(entries, list) else []
    entry = next((e for e in entries if e.get("name") == ref.pod_group), None)
    if entry is None:
        names = listing(quoted(e.get("name")) for e in entries) or "none"
        missing = (
            f"pods name pod group {quoted(ref.pod_group)} of {where} in spec.workloadRef.podGroup, "
            f"but its spec.podGroups has no entry of that name (it has {names}); "
            f"fix the pods' spec.workloadRef or recreate the Workload with that entry"
        )
        return GroupSpec(key=key, min_member=1, source=UPSTREAM_WORKLOAD_SOURCE, error=missing)
    policy = entry.get("policy")
    policy = policy if isinstance(policy, Mapping) else {}
    gang = policy.get("gang")
    field = f"spec.podGroups[{ref.pod_group}].policy"
    error: str | None = None
    min_member = 1
    if isinstance(gang, Mapping):
        count = gang.get("minCount")
        if isinstance(count, int) and not isinstance(count, bool) and 1 <= count <= MAX_GROUP_SIZE:
            min_member = count
        else:
            error = f"{where} {field}.gang.minCount={quoted(count)} {_size_rule(count)}"
    elif not isinstance(policy.get("basic"), Mapping):
        error = f"{where} sets neither {field}.gang nor {field}.basic"
    return GroupSpec(key=key, min_member=min_member, source=UPSTREAM_WORKLOAD_SOURCE, error=error)
