"""Plain data the scheduling core reasons about: nodes, pods, group specs.

Built from API JSON by the `from_*` constructors here (pure parsing, no I/O) so
the HTTP edge and the watch cache produce identical objects.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from extender.domain.objects import membership
from extender.domain.objects.device_choice import DeviceChoice, SharedClaim
from extender.domain.objects.limits import (
    MAX_SECONDS,
    quoted,
)
from extender.domain.objects.membership import GroupKey, MembershipError
from extender.domain.objects.policy import GroupTopology, topology_from_annotations
from extender.domain.objects.quantity import (
    MAPPING_TYPES,
    QuantityError,
    pod_requests,
    resource_list,
)

# A group's starvationSeconds on its members (a group declared by annotation).
STARVATION_ANNOTATION = "gang-extender.io/starvation-seconds"
# On a placeholder pod (domain/starvation/placeholders.py): the group whose reservation it holds.
PLACEHOLDER_LABEL = "gang-extender.io/placeholder"

Resources = dict[str, int]

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


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
    # DRA-served resources whose devices here could not all be told to match their
    # DeviceClass (a CEL selector that failed), resource -> why: holds name it.
    unreadable_devices: dict[str, str] = field(default_factory=dict)
    # Per DRA-served resource, every device here that matches its class, free or not:
    # what a request with allocationMode All asks on this node (domain/devices/choices.py).
    device_totals: dict[str, int] = field(default_factory=dict)

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
    scheduler_name: str = membership.DEFAULT_SCHEDULER_NAME
    phase: str = "Pending"
    deleting: bool = False
    group: GroupKey | None = None
    group_error: str | None = None
    task: str = membership.DEFAULT_TASK
    min_available: int | None = None
    # The pod's gang-extender.io/tasks annotation, parsed; None when absent or
    # malformed (the controller reports a malformed one, InvalidTaskLayout).
    task_layout: Mapping[str, int] | None = None
    planned_node: str | None = None
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()
    created: float = 0.0
    # spec.priority, resolved from the PriorityClass by the API server's admission
    # (0 when absent); the gang queue (domain/planning/queue.py) orders held gangs by it.
    priority: int = 0
    # spec.schedulingGates holds a gate other than ours: kube-scheduler does not queue
    # the pod yet, and neither does the core (Kueue's gate stays until Kueue lifts it).
    gated: bool = False
    # spec.schedulingGates holds gang-extender's own gate (`ADMISSION_GATE`): the core
    # plans the pod as pending, and lifts the gate once its gang is planned.
    admission_gated: bool = False
    # The message of the pod's PodScheduled=False condition: why kube-scheduler (its own
    # filters, or this extender through them) last refused the pod; None when not refused.
    unschedulable_message: str | None = None
    # Kueue's podset topology annotations, when the pod carries one (its group's default).
    topology: GroupTopology | None = None
    # gang-extender.io/starvation-seconds: its group's starvationSeconds when the
    # PodGroup sets none (domain/starvation/reservations.py).
    starvation_seconds: float | None = None
    # Gang preemption (domain/preemption/preemption.py): spec.preemptionPolicy ("Never" forbids
    # this pod's gang to preempt), the gang-extender.io/preemptible annotation (False:
    # "false", the group opts out), and the DisruptionTarget condition's reason.
    preemption_policy: str = "PreemptLowerPriority"
    preemptible: bool | None = None
    disruption: str | None = None
    # A placeholder pod holding GPUs for this group's starvation reservation
    # (label gang-extender.io/placeholder, in the group's namespace); never a member.
    placeholder_for: GroupKey | None = None
    # The ReplicaSet controlling the pod (a Deployment's), from its ownerReferences:
    # names the rolling update behind members that disagree on their group's size.
    replica_set: str | None = None
    # Its spec.resourceClaims entries (from templates) whose devices are in `requests`
    # as deviceclass.resource.kubernetes.io/<class> (domain/devices/claims.py).
    device_claims: tuple[str, ...] = ()
    # Its template requests whose devices depend on the node (firstAvailable,
    # allocationMode All): not in `requests`; the planner resolves them per node.
    device_choices: tuple[DeviceChoice, ...] = ()
    # The ResourceClaims it names directly (resourceClaimName), by key, and those of
    # them not allocated yet: a need of its gang, on one node (domain/planning/sharers.py).
    named_claims: tuple[str, ...] = ()
    shared_claims: tuple[SharedClaim, ...] = ()
    # The node its claims left allocated after a failed bind are on: kube-scheduler
    # offers it no other node (the devices are node-local), so neither may a plan.
    claims_pin: str | None = None
    # A digest of what kube-scheduler's filters read in its spec (`filter_spec_of`):
    # members with the same one are admitted on the same nodes, so the nodes
    # kube-scheduler's preemption proposes for one are the others' too. 0 outside a group.
    filter_spec: int = 0

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
            group = membership.group_key(meta, spec)
            min_avail = membership.min_available(meta)
        except MembershipError as err:
            group_error = str(err)
        try:
            requests = pod_requests(spec)
        except QuantityError as err:
            requests = {"pods": 1}
            group_error = group_error or f"unreadable resource request: {err}"
        task_layout = None
        with contextlib.suppress(MembershipError):
            task_layout = membership.task_layout(meta)
        annotations = meta.get("annotations") or {}
        topology, topology_error = topology_from_annotations(annotations)
        if group is not None and topology_error is not None:
            group_error = group_error or topology_error
        starvation, starvation_error = _starvation_annotation(annotations)
        if group is not None and starvation_error is not None:
            group_error = group_error or starvation_error
        tolerations = tuple(
            _toleration(
                t.get("key") or None,
                t.get("operator") or "Equal",
                t.get("value"),
                t.get("effect") or None,
            )
            for t in spec.get("tolerations") or []
        )
        unschedulable_message, disruption = _conditions(status)
        gates = [g.get("name") for g in spec.get("schedulingGates") or [] if isinstance(g, dict)]
        return cls(
            uid=meta.get("uid") or f"{meta.get('namespace')}/{meta['name']}",
            namespace=meta.get("namespace") or "default",
            name=meta["name"],
            requests=requests,
            node_name=spec.get("nodeName") or None,
            scheduler_name=spec.get("schedulerName") or membership.DEFAULT_SCHEDULER_NAME,
            phase=status.get("phase") or "Pending",
            deleting=bool(meta.get("deletionTimestamp")),
            group=group,
            group_error=group_error,
            task=membership.task_name(meta),
            min_available=min_avail,
            task_layout=task_layout,
            planned_node=annotations.get(membership.PLANNED_NODE_ANNOTATION),
            node_selector=dict(spec.get("nodeSelector") or {}),
            tolerations=tolerations,
            created=_timestamp(meta.get("creationTimestamp")),
            priority=_priority(spec.get("priority")),
            gated=any(name != membership.ADMISSION_GATE for name in gates),
            admission_gated=membership.ADMISSION_GATE in gates,
            unschedulable_message=unschedulable_message,
            topology=topology,
            starvation_seconds=starvation,
            preemption_policy=str(spec.get("preemptionPolicy") or "PreemptLowerPriority"),
            preemptible=_preemptible_annotation(annotations),
            disruption=disruption,
            placeholder_for=_placeholder_for(meta),
            replica_set=_replica_set(meta),
            # Read only between members of one group: a plain pod (most events, at
            # scale) does not pay for it.
            filter_spec=filter_spec_of(spec) if group is not None else 0,
        )


# The pod spec fields kube-scheduler's filters read (affinity, volumes, spread, ...),
# besides each container's ports and resources. Not read: hostname, subdomain, env,
# commands, which the webhook and Job controllers set per member.
_FILTERED_SPEC_FIELDS = (
    "nodeName",
    "nodeSelector",
    "affinity",
    "tolerations",
    "topologySpreadConstraints",
    "volumes",
    "resourceClaims",
    "runtimeClassName",
    "overhead",
    "hostNetwork",
    "schedulerName",
    "priority",
)


def filter_spec_of(spec: Mapping[str, Any]) -> int:
    """A digest of what kube-scheduler's filters read in a pod spec: equal for pods
    that pass the same filters on the same nodes (its own labels, which only other
    pods' affinity terms read, are left out)."""
    containers = [*(spec.get("initContainers") or ()), *(spec.get("containers") or ())]
    read = (
        [spec.get(name) for name in _FILTERED_SPEC_FIELDS],
        [(c.get("ports"), c.get("resources")) for c in containers if isinstance(c, Mapping)],
    )
    # repr, not a sorted JSON dump (half the cost of parsing the pod): the API server
    # writes one spec's fields, and a map's keys, in one order; pods that differ only
    # in that order would share no proposal, which is only slower.
    return hash(repr(read))


def _replica_set(meta: Mapping[str, Any]) -> str | None:
    """The name of the ReplicaSet that controls the pod, if one does."""
    refs = meta.get("ownerReferences")
    if not isinstance(refs, list):
        return None
    for ref in refs:
        if (
            isinstance(ref, dict)
            and ref.get("controller") is True
            and ref.get("kind") == "ReplicaSet"
        ):
            name = ref.get("name")
            return name[:253] if isinstance(name, str) else None
    return None


def _toleration(key: Any, operator: Any, value: Any, effect: Any) -> Toleration:
    """One Toleration per distinct toleration: most pods carry the same few (the API
    server adds not-ready and unreachable to every pod), and building one was 2 of
    the 11 us of reading a pod."""
    scalars = _JSON_SCALARS
    if (
        type(key) in scalars
        and type(operator) in scalars
        and type(value) in scalars
        and type(effect) in scalars
    ):
        return _shared_toleration(key, operator, value, effect)
    return Toleration(key, operator, value, effect)  # a list or an object: not hashable


_JSON_SCALARS = frozenset({str, int, float, bool, type(None)})
# `typed`: 1 and True are one key otherwise. Frozen, so one instance can be shared.
_shared_toleration = functools.lru_cache(maxsize=1024, typed=True)(Toleration)


def _placeholder_for(meta: Mapping[str, Any]) -> GroupKey | None:
    name = (meta.get("labels") or {}).get(PLACEHOLDER_LABEL)
    if not isinstance(name, str) or not name:
        return None
    return GroupKey(meta.get("namespace") or "default", name)


def _starvation_annotation(annotations: Mapping[str, Any]) -> tuple[float | None, str | None]:
    """The pod's gang-extender.io/starvation-seconds, or why it is unreadable."""
    raw = annotations.get(STARVATION_ANNOTATION)
    if raw is None:
        return None, None
    try:
        value = float(raw)
    except (TypeError, ValueError, OverflowError):
        value = -1.0
    if not 0 < value <= MAX_SECONDS:
        rule = f"<= {MAX_SECONDS} (a year)" if MAX_SECONDS < value < float("inf") else "> 0"
        return None, (
            f"annotation {STARVATION_ANNOTATION}={quoted(raw)} must be a number of seconds {rule}"
        )
    return value, None


def _preemptible_annotation(annotations: Mapping[str, Any]) -> bool | None:
    """gang-extender.io/preemptible: "false" opts the pod's group out; absent: None."""
    value = annotations.get("gang-extender.io/preemptible")
    if value is None:
        return None
    return str(value).strip().lower() != "false"


def _conditions(status: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """From the pod's conditions, in one pass: the PodScheduled=False message (why
    kube-scheduler last refused it) and the DisruptionTarget=True reason; None when
    absent. The first condition of each type counts."""
    unschedulable: str | None = None
    disruption: str | None = None
    seen_scheduled = seen_disruption = False
    for condition in status.get("conditions") or []:
        if not isinstance(condition, MAPPING_TYPES):
            continue
        kind, state = condition.get("type"), condition.get("status")
        if kind == "PodScheduled" and state == "False" and not seen_scheduled:
            seen_scheduled = True
            unschedulable = str(condition.get("message") or "") or None
        elif kind == "DisruptionTarget" and state == "True" and not seen_disruption:
            seen_disruption = True
            disruption = str(condition.get("reason") or "DisruptionTarget")
    return unschedulable, disruption


def _priority(value: Any) -> int:
    """spec.priority as an int; anything else (absent, or a malformed request body) is 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _timestamp(text: str | None) -> float:
    if not text or not isinstance(text, str):
        return 0.0
    return _seconds_of(text)


# Pods of one Job are created within seconds of each other: their creationTimestamps
# repeat, and parsing one was a sizeable part of reading a pod at start-up.
@functools.lru_cache(maxsize=4096)
def _seconds_of(text: str) -> float:
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


# What a group asks for lives in domain/objects/group_spec.py; its names are found here too.
from extender.domain.objects.group_spec import (  # noqa: E402
    HELD_PHASE,
    UPSTREAM_PODGROUP_SOURCE,
    UPSTREAM_WORKLOAD_SOURCE,
    GroupSpec,
    read_task_minimums,
    task_minimums_exceed,
    upstream_podgroup_spec,
    upstream_workload_spec,
)

__all__ = [
    "HELD_PHASE",
    "UPSTREAM_PODGROUP_SOURCE",
    "UPSTREAM_WORKLOAD_SOURCE",
    "GroupSpec",
    "read_task_minimums",
    "task_minimums_exceed",
    "upstream_podgroup_spec",
    "upstream_workload_spec",
]
