"""A gang's life after it is bound: what counts as a failure and what its policy does then.

What a group declares (events, actions, maxRetry, the timeout) is parsed in
domain/lifecycle/lifecycle_policy.py; this module decides what it means as members fail.

Pure: `decide` takes the policy, what is remembered of the group (`LifecycleState`,
mutated), the members as observed (`Member`, parsed from pod JSON here) and `now`,
and returns the effects the controller carries out (controller/lifecycle.py).

What is a failure (only of a member of the current restart generation that was bound):
 - PodEvicted: the member carries the DisruptionTarget condition, which Kubernetes
   sets when something other than the pod's owner removes it (the Eviction API, a
   drain, taint-based and node-pressure eviction, and PodGC, whose `DeletionByPodGC`
   means the pod's node is gone: a node failure). Not a preemption: a member
   kube-scheduler preempted (reason PreemptionByScheduler) or gang-extender's gang
   preemption evicted (annotation gang-extender.io/preempted-by) is no failure.
   Kubernetes records no "who deleted"; a plain DELETE leaves no such mark and is taken
   as the owner's own (a Job finishing or scaled down, a Deployment scaled down, the user
   deleting the Job or the pod): no failure. Nor is anything in a namespace being
   deleted: the controller does not decide for those groups at all.
 - PodFailed: phase Failed without DisruptionTarget and not being deleted, including
   kubelet admission rejects (reason `OutOfnvidia.com/gpu`, `UnexpectedAdmissionError`).
 - PodsNotReady: every bound member of the generation bound, not all Ready
   `pods_ready_timeout` seconds after the last was bound (checked once per generation:
   once all were Ready, a later un-Ready is not this event).
 - A gang the core reports broken (GangBroken, a released member that can never be
   bound) is fed in as a failure of that member (`broken`).

One failure never triggers two restarts (the loop of Volcano issue #4814): every member
carries its restart generation (`RESTART_GENERATION_LABEL`, absent = 0); a restart moves
the group to generation restarts+1 and members of an older generation are ignored, so the
old members' own deletion (which the restart causes) is never a new failure. New members
get the label from the controller (`Stamp`), once they are created after the restart.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from extender.domain.lifecycle.lifecycle_policy import Action, Event, LifecyclePolicy
from extender.domain.objects.membership import PLANNED_NODE_ANNOTATION
from extender.domain.objects.model import HELD_PHASE
from extender.domain.preemption.preemption import (
    PREEMPTED_BY_ANNOTATION,
    SCHEDULER_PREEMPTION_REASON,
)

RESTART_GENERATION_LABEL = "gang-extender.io/restart-generation"

# PodGroup status.phase values this module sets (the rest come from domain/status/status.py).
PHASE_ABORTED = HELD_PHASE
PHASE_FAILED = "Failed"

DISRUPTION_TARGET = "DisruptionTarget"
# The DisruptionTarget reason gang-extender puts on the members a policy deletes (so a
# Job's podFailurePolicy can ignore them): its own doing, never a new failure.
POLICY_DISRUPTION_REASON = "DeletedByGangPolicy"


def _timestamp(text: object) -> float:
    """An API timestamp in seconds since the epoch; 0.0 when absent or unreadable."""
    if not isinstance(text, str) or not text:
        return 0.0
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def generation_of(meta: Mapping[str, Any]) -> int | None:
    """A member's restart generation label; 0 when absent, None when unreadable."""
    raw = (meta.get("labels") or {}).get(RESTART_GENERATION_LABEL)
    if raw is None:
        return 0
    try:
        value = int(raw)
    except (TypeError, ValueError):
        return None
    return value if value >= 0 else None


@dataclass(frozen=True)
class Member:
    """A member as the lifecycle sees it, parsed from its pod JSON (`from_api`)."""

    uid: str
    ref: str  # "ns/name"
    generation: int | None  # None: a label that is not a whole number (treated as old)
    bound: bool
    phase: str
    reason: str  # status.reason (kubelet's admission reject says OutOf<resource> here)
    message: str
    deleting: bool
    disruption: str | None  # DisruptionTarget condition's reason when True, else None
    ready: bool
    scheduled_at: float | None  # PodScheduled=True lastTransitionTime
    created: float
    controlled: bool  # has a controller ownerReference (Job, ReplicaSet, ...)
    gone: bool = False  # deleted: the last object the watch delivered
    # Preempted (gang-extender's gang preemption marks its victims, kube-scheduler's
    # DisruptionTarget says PreemptionByScheduler): never a failure (`_failure_of`).
    preempted: bool = False

    @classmethod
    def from_api(cls, obj: Mapping[str, Any], *, gone: bool = False) -> Member:
        meta, spec, status = obj["metadata"], obj.get("spec") or {}, obj.get("status") or {}
        conditions = {
            c.get("type"): c for c in status.get("conditions") or [] if isinstance(c, Mapping)
        }
        disruption = conditions.get(DISRUPTION_TARGET)
        scheduled = conditions.get("PodScheduled")
        ready = conditions.get("Ready")
        return cls(
            uid=str(meta.get("uid") or ""),
            ref=f"{meta.get('namespace') or 'default'}/{meta['name']}",
            generation=generation_of(meta),
            bound=bool(spec.get("nodeName")),
            phase=str(status.get("phase") or "Pending"),
            reason=str(status.get("reason") or ""),
            message=str(status.get("message") or ""),
            deleting=bool(meta.get("deletionTimestamp")) or gone,
            disruption=(
                str(disruption.get("reason") or DISRUPTION_TARGET)
                if disruption is not None and disruption.get("status") == "True"
                else None
            ),
            ready=ready is not None and ready.get("status") == "True",
            scheduled_at=(
                _timestamp(scheduled.get("lastTransitionTime")) or None
                if scheduled is not None and scheduled.get("status") == "True"
                else None
            ),
            created=_timestamp(meta.get("creationTimestamp")),
            controlled=any(
                isinstance(r, Mapping) and r.get("controller")
                for r in meta.get("ownerReferences") or []
            ),
            gone=gone,
            preempted=(
                PREEMPTED_BY_ANNOTATION in (meta.get("annotations") or {})
                or (
                    disruption is not None
                    and disruption.get("reason") == SCHEDULER_PREEMPTION_REASON
                )
            ),
        )


@dataclass
class LifecycleState:
    """What is remembered of one group between decisions.

    `restarts` and `phase` are also in the PodGroup's status (the controller seeds
    them from there after a restart of the service, `adopt`); the rest is kept only
    in memory.
    """

    restarts: int = 0
    phase: str = ""  # "", PHASE_ABORTED or PHASE_FAILED
    reason: str = ""  # why the phase or the last restart, for the condition
    message: str = ""
    restarted_at: float | None = None  # when the current generation began
    failed_at: float | None = None  # the failure the current generation recovers from
    held_generation: int | None = None  # the PodGroup's metadata.generation when held
    ready_seen: bool = False  # every member of the generation was Ready once
    # Members of an aborted run (their failures were acted on): never a failure again,
    # however long they take to go away after the group is released.
    aborted_uids: frozenset[str] = frozenset()
    reported_invalid: str | None = None

    def adopt(self, status: Mapping[str, Any], generation: int | None) -> None:
        """Take restarts and a held phase from a PodGroup status written before."""
        restarts = status.get("restarts")
        if isinstance(restarts, int) and restarts > self.restarts:
            self.restarts = restarts
            self.restarted_at = _timestamp(status.get("lastRestartTime")) or None
        phase = status.get("phase")
        if phase in (PHASE_ABORTED, PHASE_FAILED) and not self.phase:
            self.phase = str(phase)
            self.held_generation = generation
            for condition in status.get("conditions") or []:
                if isinstance(condition, Mapping) and condition.get("type") == LIFECYCLE_CONDITION:
                    self.reason = str(condition.get("reason") or "")
                    self.message = str(condition.get("message") or "")


LIFECYCLE_CONDITION = "Lifecycle"


# ---- effects the controller carries out ----
@dataclass(frozen=True)
class Failure:
    event: Event
    member: str  # "ns/name"
    why: str  # e.g. "evicted (EvictionByEvictionAPI)", "Failed: OutOfnvidia.com/gpu"


@dataclass(frozen=True)
class Restart:
    """Delete every live member together; members without a controller are recreated."""

    failure: Failure
    generation: int  # the new generation (== restarts after this one)
    delete: tuple[str, ...]  # uids of live members (any generation)
    message: str


@dataclass(frozen=True)
class Abort:
    """Delete every live member; the group is held (phase Aborted)."""

    failure: Failure
    delete: tuple[str, ...]
    message: str


@dataclass(frozen=True)
class RetriesExhausted:
    """maxRetry restarts done: phase Failed, nothing restarts."""

    failure: Failure
    message: str


@dataclass(frozen=True)
class Released:
    """The user changed the held group's PodGroup: it may run again."""

    message: str


@dataclass(frozen=True)
class Stamp:
    """Label new members with the current restart generation."""

    uids: tuple[str, ...]
    generation: int


@dataclass(frozen=True)
class Recovered:
    """The generation after a failure is bound whole: how long it took."""

    seconds: float
    cause: Event


LifecycleEffect = Restart | Abort | RetriesExhausted | Released | Stamp | Recovered


@dataclass(frozen=True)
class Decision:
    effects: list[LifecycleEffect]
    next_check: float | None = None  # when to look again without a change (PodsNotReady)


def _failure_of(member: Member) -> Failure | None:
    if not member.bound or member.disruption == POLICY_DISRUPTION_REASON:
        return None
    if member.preempted and member.disruption is not None:
        # Preempted for a higher-priority pod or gang: the gang goes whole
        # (domain/preemption/preemption.py) and its owner re-creates it to wait its turn; a restart
        # counted here would spend maxRetry on preemptions and fight them.
        return None
    if member.disruption is not None:
        return Failure(Event.POD_EVICTED, member.ref, f"evicted ({member.disruption})")
    if member.phase == "Failed" and not member.deleting:
        said = member.reason or "no reason given"
        if member.message:
            said = f"{said}: {member.message}"
        return Failure(Event.POD_FAILED, member.ref, f"Failed ({said[:200]})")
    return None


def current_members(members: Sequence[Member], generation: int) -> list[Member]:
    return [m for m in members if m.generation == generation]


def _not_ready(
    policy: LifecyclePolicy,
    state: LifecycleState,
    members: Sequence[Member],
    min_member: int,
    now: float,
) -> tuple[Failure | None, float | None]:
    """PodsNotReady for the current generation; else when to look again (or None)."""
    timeout = policy.pods_ready_timeout_seconds
    if timeout is None or state.ready_seen or Event.PODS_NOT_READY not in policy.rules:
        return None, None
    live = [m for m in members if not m.deleting and m.phase != "Succeeded"]
    bound = [m for m in live if m.bound]
    if len(bound) < min_member or len(bound) < len(live):
        return None, None  # not bound whole yet: the clock has not started
    if all(m.ready for m in bound):
        state.ready_seen = True
        return None, None
    times = [m.scheduled_at for m in bound if m.scheduled_at is not None]
    if len(times) < len(bound):
        return None, None  # a bind time not known yet
    deadline = max(times) + timeout
    if now < deadline:
        return None, deadline
    late = sorted(m.ref for m in bound if not m.ready)
    shown = ", ".join(late[:5]) + (", ..." if len(late) > 5 else "")
    return (
        Failure(
            Event.PODS_NOT_READY,
            late[0],
            f"{len(late)}/{len(bound)} bound members not Ready {timeout:g}s after the "
            f"gang was bound ({shown})",
        ),
        None,
    )


def decide(
    group: str,
    policy: LifecyclePolicy,
    state: LifecycleState,
    members: Sequence[Member],
    *,
    min_member: int,
    now: float,
    spec_generation: int | None = None,
    broken: Sequence[Failure] = (),
) -> Decision:
    """What the group's lifecycle does now; updates `state` as if the effects were done.

    `members` are every pod of the group the controller knows of, departed ones too
    (`Member.gone`); `broken` are failures the gang core reported (GangBroken);
    `spec_generation` is the PodGroup's metadata.generation (a held group is released
    when it changes).
    """
    effects: list[LifecycleEffect] = []
    if state.phase:
        if spec_generation is not None and spec_generation != state.held_generation:
            effects.append(
                Released(f"gang {group}: PodGroup changed; the {state.phase} group may run again")
            )
            # Restarts are kept: a Failed group fails again at its next failure unless the
            # change raised maxRetry.
            state.phase, state.held_generation, state.reason, state.message = "", None, "", ""
        else:
            return Decision(effects)
    if not policy.active:
        return Decision(effects)
    # Members labelled with a later generation than remembered (memory lost: the
    # service restarted before the status was written, a created PodGroup went with
    # its pods): theirs is the current one, or they would be ignored for good.
    # Generations only move forward, whether or not such a member is going away.
    labelled = [m.generation for m in members if m.generation is not None]
    if labelled and max(labelled) > state.restarts:
        state.restarts = max(labelled)
    generation = state.restarts
    current = current_members(members, generation)
    stamp = tuple(
        m.uid
        for m in members
        if m.generation is not None
        and m.generation < generation
        and not m.deleting
        and state.restarted_at is not None
        and m.created >= int(state.restarted_at)  # creation times are whole seconds
    )
    if stamp:
        effects.append(Stamp(stamp, generation))
        stamped = set(stamp)
        current += [m for m in members if m.uid in stamped]

    bound_live = [m for m in current if m.bound and not m.deleting]
    if state.failed_at is not None and len(bound_live) >= min_member:
        effects.append(Recovered(max(0.0, now - state.failed_at), _last_cause(state)))
        state.failed_at = None

    current = [m for m in current if m.uid not in state.aborted_uids]
    failures = [f for m in sorted(current, key=lambda m: m.ref) if (f := _failure_of(m))]
    failures += list(broken)
    next_check: float | None = None
    if not failures:
        late, next_check = _not_ready(policy, state, current, min_member, now)
        if late is not None:
            failures.append(late)
    ruled = [f for f in failures if f.event in policy.rules]
    if not ruled:
        return Decision(effects, next_check)
    failure = ruled[0]
    action = policy.rules[failure.event]
    live = tuple(sorted(m.uid for m in members if not m.deleting))
    if action is Action.ABORT_JOB:
        message = (
            f"gang {group} aborted: {failure.member} {failure.why} ({failure.event.value} -> "
            f"AbortJob); members deleted; change or delete the PodGroup to run it again"
        )
        state.phase, state.held_generation = PHASE_ABORTED, spec_generation
        state.reason, state.message = "Aborted", message
        state.aborted_uids = frozenset(m.uid for m in members)
        effects.append(Abort(failure, live, message))
        return Decision(effects)
    if state.restarts >= policy.max_retry:
        message = (
            f"gang {group} failed: {failure.member} {failure.why} ({failure.event.value}) after "
            f"{state.restarts} restart(s), maxRetry {policy.max_retry}; not restarted again"
        )
        state.phase, state.held_generation = PHASE_FAILED, spec_generation
        state.reason, state.message = "RetriesExhausted", message
        effects.append(RetriesExhausted(failure, message))
        return Decision(effects)
    state.restarts += 1
    state.restarted_at = now
    state.ready_seen = False
    if state.failed_at is None:
        state.failed_at = now
    state.reason = failure.event.value
    message = (
        f"gang {group} restarted ({state.restarts}/{policy.max_retry}): {failure.member} "
        f"{failure.why} ({failure.event.value} -> RestartJob); every member is replaced"
    )
    state.message = message
    effects.append(Restart(failure, state.restarts, live, message))
    return Decision(effects)


def _last_cause(state: LifecycleState) -> Event:
    try:
        return Event(state.reason)
    except ValueError:
        return Event.POD_FAILED


# Server-set or per-object metadata a recreated pod must not carry.
_DROPPED_METADATA = (
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "managedFields",
    "selfLink",
)


def recreated_pod(obj: Mapping[str, Any], generation: int) -> dict[str, Any]:
    """The body that recreates a member without a controller, for restart `generation`.

    Its own spec and metadata, less what the API server sets or a placement
    decided: no nodeName (it is gang-scheduled again), no planned node, no status.
    """
    meta = {k: v for k, v in obj["metadata"].items() if k not in _DROPPED_METADATA}
    meta["labels"] = {**(meta.get("labels") or {}), RESTART_GENERATION_LABEL: str(generation)}
    annotations = {
        k: v for k, v in (meta.get("annotations") or {}).items() if k != PLANNED_NODE_ANNOTATION
    }
    if annotations:
        meta["annotations"] = annotations
    else:
        meta.pop("annotations", None)
    spec = dict(obj.get("spec") or {})
    spec.pop("nodeName", None)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
