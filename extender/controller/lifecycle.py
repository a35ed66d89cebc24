"""Carries out a gang's lifecycle policy: restart, abort, retries exhausted (docs/podgroup.md).

The decisions are domain/lifecycle/lifecycle.py's (`decide`, the policy parsed by
domain/lifecycle/lifecycle_policy.py); this is the edge: what the group's memory is, which
inputs feed it, and which effect means which writes, in which order. The writes
themselves (label, announce, delete, recreate) are controller/lifecycle_writes.py's. The group
reconciler calls `reconcile` for each changed group (and for a group whose
PodsNotReady deadline is due, `due`), and merges `status_fields` into the status
it writes. The cluster state hands over every deleted pod's last object
(`pod_gone`): an evicted member is gone before the next reconcile, and only its
last object carries the DisruptionTarget condition. The core's GangBroken effects
come in through `see_effects`.

A restart, in order: the new restart count is written to the PodGroup's status
first (a crash after it never restarts the same failure again), a Warning Event
GangRestarted goes on the PodGroup and the members, every live member is deleted
together, and each member without a controller (a bare pod) is recreated from its
own last spec once its name is free (`recreated_pod`). Members with a controller
(Job, ReplicaSet, StatefulSet) come back through it; the controller labels those
new pods with the restart generation (`Stamp`) once it sees them.

The restart count of a group declared by annotation lives on the PodGroup
gang-extender created for it, which the garbage collector deletes with its last
member: a restart deletes every member, so it may go before the members' controller
makes new ones. What was known of such a group is set aside (`_set_aside`) for
`FORGOTTEN_GROUP_MEMORY_SECONDS` and taken up again when its members come back; they
are then labelled with the restart generation (`Stamp`), which `decide` reads back
after a restart of the service, and the recreated PodGroup's status says it again.

A namespace being deleted takes its gangs with it: nothing in it is restarted
(its members' deletions, PodGC's `DeletionByPodGC` among them, are not failures)
and nothing is created there (the API server would refuse it with a 403). The
watch cache says which namespaces are terminating; a restart asks the API server
once more first (`LifecycleWrites.namespace_terminating`), as the namespace's watch event may
come after its pods'.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from extender.config import Settings
from extender.controller.cluster_state import ClusterState
from extender.controller.effects import EffectWriter
from extender.controller.lifecycle_writes import LifecycleWrites, utc
from extender.domain.lifecycle.lifecycle import (
    LIFECYCLE_CONDITION,
    Abort,
    Failure,
    LifecycleState,
    Member,
    Recovered,
    Released,
    Restart,
    RetriesExhausted,
    Stamp,
    decide,
)
from extender.domain.lifecycle.lifecycle_policy import (
    POLICY_ANNOTATIONS,
    Event,
    LifecyclePolicy,
    policy_from_annotations,
    policy_from_spec,
)
from extender.domain.objects.membership import GroupKey
from extender.domain.objects.model import GroupSpec
from extender.domain.state.decisions import Effect, GangBroken
from extender.kube.client import RawApi
from extender.kube.writers import write_podgroup_status
from extender.metrics import Metrics

log = logging.getLogger(__name__)

# How long what is known of a group declared by annotation outlives both its PodGroup
# and its members (a restart's gap, until its controller's new members are seen).
FORGOTTEN_GROUP_MEMORY_SECONDS = 600.0

RESTARTED_EVENT = "GangRestarted"
ABORTED_EVENT = "GangAborted"
FAILED_EVENT = "GangFailed"
RELEASED_EVENT = "GangReleased"


@dataclass
class _Group:
    state: LifecycleState = field(default_factory=LifecycleState)
    policy: LifecyclePolicy = field(default_factory=LifecyclePolicy)
    # uid -> last object of a member the watch saw deleted (kept until a restart
    # makes it of an older generation)
    departed: dict[str, dict[str, Any]] = field(default_factory=dict)
    # name -> last object of each member without a controller: what a restart recreates
    templates: dict[str, dict[str, Any]] = field(default_factory=dict)
    broken: list[Failure] = field(default_factory=list)
    next_check: float | None = None
    adopted: bool = False
    managed: bool = False  # declared by annotation, its PodGroup gang-extender's


class LifecycleController:
    def __init__(
        self,
        settings: Settings,
        *,
        raw: RawApi,
        metrics: Metrics,
        state: ClusterState,
        writer: EffectWriter,
        clock: Callable[[], float] = time.time,
    ) -> None:
        # The writes share the service's API client, metrics, cache and clock.
        self.writes = LifecycleWrites(settings, raw, metrics, state, writer, clock)
        self.raw, self.metrics, self.state, self.clock = raw, metrics, state, clock
        self._groups: dict[GroupKey, _Group] = {}
        # Groups declared by annotation whose PodGroup and members are all gone, with
        # when to stop remembering them: their restart count survives the restart's gap.
        self._set_aside_groups: dict[GroupKey, tuple[float, LifecycleState]] = {}

    # ---- inputs ----
    def pod_gone(self, key: GroupKey, obj: dict[str, Any]) -> None:
        """The watch saw a member deleted: keep its last object for the next decision."""
        if self.state.terminating(key.namespace):
            return  # deleted with its namespace (PodGC's marks included): no failure
        member = Member.from_api(obj, gone=True)
        group = self._groups.get(key)
        if member.disruption is None:
            # Deleted by its owner (or the user): no failure, and not part of the gang
            # a restart rebuilds.
            if group is not None:
                group.templates.pop(str(obj["metadata"].get("name")), None)
            return
        if group is None:
            # Evicted before the group was first reconciled (a gang evicted within a
            # second of being bound): kept for that first decision.
            group = self._group(key)
        if member.uid and member.bound:
            group.departed[member.uid] = obj
            if not member.controlled:  # an evicted bare member: what a restart recreates
                group.templates[str(obj["metadata"]["name"])] = obj

    def see_effects(self, effects: list[Effect]) -> None:
        """The core's GangBroken: a released member that can never be bound is a failure."""
        for effect in effects:
            if not isinstance(effect, GangBroken):
                continue
            key = effect.plan.group
            group = self._groups.get(key)
            if group is None or not group.policy.active or self.state.terminating(key.namespace):
                continue
            obj = self._object_of(key, group, effect.member)
            member = Member.from_api(obj) if obj is not None else None
            if member is not None and member.generation != group.state.restarts:
                continue  # a member of a generation already restarted (our own deletes)
            event = (
                Event.POD_EVICTED
                if member is not None and member.disruption is not None
                else Event.POD_FAILED
            )
            group.broken.append(Failure(event, effect.member, f"lost ({effect.cause})"))
            self.state.dirty.add(key)

    def _object_of(self, key: GroupKey, group: _Group, ref: str) -> dict[str, Any] | None:
        name = ref.partition("/")[2]
        for obj in [*self.state.group_pods.get(key, {}).values(), *group.departed.values()]:
            if obj["metadata"].get("name") == name:
                return obj
        return None

    def due(self, now: float) -> set[GroupKey]:
        """Groups whose PodsNotReady deadline has passed: reconcile them now."""
        return {k for k, g in self._groups.items() if g.next_check and g.next_check <= now}

    def forget(self, key: GroupKey) -> None:
        self._set_aside(key, self._groups.pop(key, None))

    def _set_aside(self, key: GroupKey, group: _Group | None) -> None:
        """Keep an annotation-declared group's state a while once it is gone: its
        PodGroup (and with it the restart count) goes with the members a restart deletes."""
        now = self.clock()
        self._set_aside_groups = {k: v for k, v in self._set_aside_groups.items() if v[0] > now}
        if group is not None and group.managed and group.state.restarts:
            self._set_aside_groups[key] = (now + FORGOTTEN_GROUP_MEMORY_SECONDS, group.state)

    def _group(self, key: GroupKey) -> _Group:
        """The group's memory; a new one takes up what was set aside for it."""
        group = self._groups.get(key)
        if group is None:
            group = self._groups[key] = _Group()
            kept = self._set_aside_groups.pop(key, None)
            if kept is not None and kept[0] > self.clock():
                group.state, group.managed, group.adopted = kept[1], True, True
        return group

    # ---- what the reconciler writes ----
    def problem(self, key: GroupKey) -> str | None:
        """What is wrong with the group's policy declaration, for the Configured condition."""
        group = self._groups.get(key)
        if group is None or group.policy.error is None:
            return None
        return f"gang {key}: {group.policy.error}; no lifecycle policy applies until it is fixed"

    def status_fields(self, key: GroupKey) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """Fields to merge into the PodGroup status, and the Lifecycle condition (or None)."""
        group = self._groups.get(key)
        if group is None or (not group.policy.active and not group.state.restarts):
            return {}, None
        s = group.state
        fields: dict[str, Any] = {"restarts": s.restarts}
        if s.restarted_at is not None:
            fields["lastRestartTime"] = utc(s.restarted_at)
        if s.phase:
            fields["phase"] = s.phase
        condition = None
        if s.reason:
            condition = {
                "type": LIFECYCLE_CONDITION,
                "status": "False" if s.phase else "True",
                "reason": s.reason,
                "message": s.message,
            }
        return fields, condition

    # ---- the decision and its effects ----
    async def reconcile(
        self,
        key: GroupKey,
        *,
        podgroup: dict[str, Any] | None,
        managed: bool,
        pods: list[dict[str, Any]],
        spec: GroupSpec | None,
    ) -> None:
        """Decide and carry out what the group's policy says now. `podgroup`: ours, or None."""
        if podgroup is None:
            # No PodGroup of ours (yet again, for a group declared by annotation whose
            # PodGroup went with its last member): nowhere to count restarts.
            self._set_aside(key, self._groups.pop(key, None))
            return
        if self.state.terminating(key.namespace):
            self._groups.pop(key, None)  # going away with its namespace: nothing to decide
            return
        group = self._group(key)
        group.managed = managed
        group.policy = self._policy(podgroup, managed, pods)
        if not group.policy.active:
            group.departed.clear()  # kept only for a policy to act on
        meta = podgroup.get("metadata") or {}
        spec_generation = meta.get("generation")
        if not group.adopted:
            group.state.adopt(podgroup.get("status") or {}, spec_generation)
            group.adopted = True
        if not group.policy.active and not group.state.phase:
            return  # nothing to decide: members are not even read
        for pod in pods:
            if not _controlled(pod):
                group.templates[pod["metadata"]["name"]] = pod
        members = [Member.from_api(p) for p in pods]
        live_uids = {m.uid for m in members}
        members += [
            Member.from_api(obj, gone=True)
            for uid, obj in group.departed.items()
            if uid not in live_uids
        ]
        now = self.clock()
        broken, group.broken = group.broken, []
        decision = decide(
            str(key),
            group.policy,
            group.state,
            members,
            min_member=spec.min_member if spec is not None else 1,
            now=now,
            spec_generation=spec_generation if isinstance(spec_generation, int) else None,
            broken=broken,
        )
        group.next_check = decision.next_check
        # Departed members of an older generation can no longer fail the gang.
        group.departed = {
            u: o
            for u, o in group.departed.items()
            if Member.from_api(o).generation == group.state.restarts
        }
        if any(isinstance(e, Abort) for e in decision.effects):
            group.departed.clear()  # consumed: a released group starts afresh
        for effect in decision.effects:
            await self._carry_out(key, group, effect, pods)

    @staticmethod
    def _policy(
        podgroup: dict[str, Any], managed: bool, pods: list[dict[str, Any]]
    ) -> LifecyclePolicy:
        if not managed:
            return policy_from_spec(podgroup.get("spec") or {})
        # Declared by annotation: every member that says something must say the same.
        declared = {
            tuple(
                sorted(
                    (k, v)
                    for k, v in (p["metadata"].get("annotations") or {}).items()
                    if k in POLICY_ANNOTATIONS
                )
            )
            for p in pods
        }
        declared.discard(())
        if not declared:
            return LifecyclePolicy()
        if len(declared) > 1:
            return LifecyclePolicy(
                error="members disagree on their lifecycle annotations "
                f"({' vs '.join(str(dict(d)) for d in sorted(declared))}); give every "
                "member the same"
            )
        return policy_from_annotations(dict(next(iter(declared))))

    async def _carry_out(
        self, key: GroupKey, group: _Group, effect: Any, pods: list[dict[str, Any]]
    ) -> None:
        if isinstance(effect, Stamp):
            by_uid = {p["metadata"].get("uid"): p for p in pods}
            for uid in effect.uids:
                pod = by_uid.get(uid)
                if pod is not None:
                    await self.writes.call(key, "label", self.writes.label, pod, effect.generation)
        elif isinstance(effect, Recovered):
            self.metrics.gang_recovery_seconds.labels(cause=effect.cause.value).observe(
                effect.seconds
            )
            log.info("gang %s running again %.1fs after its failure", key, effect.seconds)
        elif isinstance(effect, Restart):
            if await self.writes.namespace_terminating(key.namespace):
                log.info("gang %s: not restarted, its namespace is being deleted", key)
                self._groups.pop(key, None)
                return
            cause = effect.failure.event.value
            self.metrics.gang_restarts.labels(cause=cause).inc()
            log.warning("%s", effect.message)
            await self._write_status(key, group)
            self.writes.announce(key, RESTARTED_EVENT, effect.message)
            await self._delete_and_recreate(key, group, effect, pods)
        elif isinstance(effect, Abort):
            self.metrics.gangs_aborted.labels(cause=effect.failure.event.value).inc()
            log.warning("%s", effect.message)
            await self._write_status(key, group)  # held before any member comes back
            self.writes.announce(key, ABORTED_EVENT, effect.message)
            await self.writes.delete(key, effect.delete, pods, effect.message)
        elif isinstance(effect, RetriesExhausted):
            self.metrics.gangs_failed.labels(cause=effect.failure.event.value).inc()
            log.warning("%s", effect.message)
            await self._write_status(key, group)
            self.writes.announce(key, FAILED_EVENT, effect.message)
        elif isinstance(effect, Released):
            log.info("%s", effect.message)
            await self._write_status(key, group, clear_phase=True)
            self.writes.announce(key, RELEASED_EVENT, effect.message, "Normal")
        self.state.dirty.add(key)

    async def _write_status(
        self, key: GroupKey, group: _Group, *, clear_phase: bool = False
    ) -> None:
        """Restart count and held phase now, before any member is deleted."""
        fields, _ = self.status_fields(key)
        if clear_phase:
            fields["phase"] = "Pending"
        await self.writes.call(
            key, "status", write_podgroup_status, self.raw, key.namespace, key.name, fields
        )

    async def _delete_and_recreate(
        self, key: GroupKey, group: _Group, effect: Restart, pods: list[dict[str, Any]]
    ) -> None:
        await self.writes.delete(key, effect.delete, pods, effect.message)
        live_names = {p["metadata"]["name"] for p in pods if _controlled(p)}
        bare = [t for name, t in sorted(group.templates.items()) if name not in live_names]
        group.templates = {}
        if not bare:
            return
        self.writes.recreate_in_background(key, bare, effect.generation)


def _controlled(pod: dict[str, Any]) -> bool:
    return any(r.get("controller") for r in pod["metadata"].get("ownerReferences") or [])
