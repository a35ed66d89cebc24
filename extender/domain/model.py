"""Plain data the scheduling core reasons about: nodes, pods, group specs.

Built from API JSON by the `from_*` constructors here (pure parsing, no I/O) so
the HTTP edge and the watch cache produce identical objects.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from extender.domain import membership
from extender.domain.membership import GroupKey, MembershipError
from extender.domain.quantity import QuantityError, pod_requests, resource_list

Resources = dict[str, int]

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
# PodGroup status.phase of a group held after AbortJob (domain/lifecycle.py).
HELD_PHASE = "Aborted"


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str


@dataclass(frozen=True)
class Toleration:
    key: str | None
    operator: str
    value: str | None
    effect: str | None

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if self.key is None:
            # An empty key with Exists tolerates everything.
            return self.operator == "Exists"
        if self.key != taint.key:
            return False
        return self.operator == "Exists" or (self.value or "") == taint.value


@dataclass
class NodeInfo:
    name: str
    allocatable: Resources
    labels: dict[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False

    @classmethod
    def from_api(cls, obj: Mapping[str, Any]) -> NodeInfo:
        meta, spec, status = obj["metadata"], obj.get("spec") or {}, obj.get("status") or {}
        taints = tuple(
            Taint(t["key"], t.get("value") or "", t.get("effect") or "")
            for t in spec.get("taints") or []
        )
        try:
            allocatable = resource_list(status.get("allocatable") or status.get("capacity"))
        except QuantityError:
            allocatable = {}
        return cls(
            name=meta["name"],
            allocatable=allocatable,
            labels=dict(meta.get("labels") or {}),
            taints=taints,
            unschedulable=bool(spec.get("unschedulable")),
        )


@dataclass
class PodInfo:
    uid: str
    namespace: str
    name: str
    requests: Resources
    node_name: str | None = None
    scheduler_name: str = "default-scheduler"
    phase: str = "Pending"
    deleting: bool = False
    group: GroupKey | None = None
    group_error: str | None = None
    task: str = membership.DEFAULT_TASK
    min_available: int | None = None
    planned_node: str | None = None
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()
    created: float = 0.0
    # The message of the pod's PodScheduled=False condition: why kube-scheduler (its own
    # filters, or this extender through them) last refused the pod; None when not refused.
    unschedulable_message: str | None = None

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def is_bound(self) -> bool:
        return bool(self.node_name)

    @property
    def holds_capacity(self) -> bool:
        """Bound and not finished: counts against its node."""
        return self.is_bound and self.phase not in TERMINAL_PHASES

    @property
    def is_active_member(self) -> bool:
        """Counts toward its group's quorum."""
        return self.group is not None and not self.deleting and self.phase not in TERMINAL_PHASES

    @classmethod
    def from_api(cls, obj: Mapping[str, Any]) -> PodInfo:
        meta, spec, status = obj["metadata"], obj.get("spec") or {}, obj.get("status") or {}
        group: GroupKey | None = None
        group_error: str | None = None
        min_avail: int | None = None
        try:
            group = membership.group_key(meta)
            min_avail = membership.min_available(meta)
        except MembershipError as err:
            group_error = str(err)
        try:
            requests = pod_requests(spec)
        except QuantityError as err:
            requests = {"pods": 1}
            group_error = group_error or f"unreadable resource request: {err}"
        tolerations = tuple(
            Toleration(
                t.get("key") or None,
                t.get("operator") or "Equal",
                t.get("value"),
                t.get("effect") or None,
            )
            for t in spec.get("tolerations") or []
        )
        return cls(
            uid=meta.get("uid") or f"{meta.get('namespace')}/{meta['name']}",
            namespace=meta.get("namespace") or "default",
            name=meta["name"],
            requests=requests,
            node_name=spec.get("nodeName") or None,
            scheduler_name=spec.get("schedulerName") or "default-scheduler",
            phase=status.get("phase") or "Pending",
            deleting=bool(meta.get("deletionTimestamp")),
            group=group,
            group_error=group_error,
            task=membership.task_name(meta),
            min_available=min_avail,
            planned_node=(meta.get("annotations") or {}).get(membership.PLANNED_NODE_ANNOTATION),
            node_selector=dict(spec.get("nodeSelector") or {}),
            tolerations=tolerations,
            created=_timestamp(meta.get("creationTimestamp")),
            unschedulable_message=_unschedulable_message(status),
        )


def _unschedulable_message(status: Mapping[str, Any]) -> str | None:
    for condition in status.get("conditions") or []:
        if (
            isinstance(condition, Mapping)
            and condition.get("type") == "PodScheduled"
            and condition.get("status") == "False"
        ):
            return str(condition.get("message") or "") or None
    return None


def _timestamp(text: str | None) -> float:
    if not text:
        return 0.0
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


@dataclass(frozen=True)
class GroupSpec:
    """What a group asks for, from its PodGroup or its pods' annotations."""

    key: GroupKey
    min_member: int
    source: str  # "PodGroup", "coscheduling PodGroup" or "annotation"
    schedule_timeout_seconds: float | None = None
    min_task_member: Mapping[str, int] | None = None
    error: str | None = None
    # A PodGroup gang-extender created from the members' min-available annotation
    # (annotated CREATED_FROM_ANNOTATION): it follows its members; a user's never does.
    managed: bool = False

    @classmethod
    def from_podgroup(cls, obj: Mapping[str, Any], *, source: str) -> GroupSpec:
        meta, spec = obj["metadata"], obj.get("spec") or {}
        key = GroupKey(meta.get("namespace") or "default", meta["name"])
        error = None
        min_member = spec.get("minMember", 1)
        if not isinstance(min_member, int) or min_member < 1:
            error = f"{source} spec.minMember={min_member!r} must be a whole number >= 1"
            min_member = 1
        timeout = spec.get("scheduleTimeoutSeconds")
        if timeout is not None and (not isinstance(timeout, int | float) or timeout <= 0):
            error = error or f"{source} spec.scheduleTimeoutSeconds={timeout!r} must be > 0"
            timeout = None
        tasks = spec.get("minTaskMember")
        # A group its lifecycle policy aborted (domain/lifecycle.py) is held until its
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
            min_task_member=dict(tasks) if isinstance(tasks, Mapping) else None,
            error=error,
            managed=membership.CREATED_FROM_ANNOTATION in (meta.get("annotations") or {}),
        )
