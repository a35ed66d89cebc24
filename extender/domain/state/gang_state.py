"""What the parts of `GangCore` share: the per-group records, the cluster as the watch
tells it, the plans, and the effects going out.

Pure. `GangCore` (domain/gang/gang.py) is composed of parts that own their own state
(domain/*/gang_*.py: room, watch, queue view, starvation, preemption, barrier,
failover). What more than one of them reads or writes is here, in `SharedState`,
with the verbs every part may use on it (`say`, `drop`, `fault`, `new_plan`). A part
that needs the filter's planning steps is given one callable (`PlanGroup`), never
the core itself, so no part imports domain/gang/gang.py.
"""

from __future__ import annotations

import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import NamedTuple, Protocol

from extender.domain.cluster.ledger import Ledger, Plan
from extender.domain.cluster.snapshot import ClusterSnapshot
from extender.domain.objects.limits import clip, quoted
from extender.domain.objects.membership import GroupKey
from extender.domain.objects.model import GroupSpec, PodInfo
from extender.domain.objects.policy import Policy
from extender.domain.planning.planner import NodeRestriction, Placement
from extender.domain.planning.queue import QueueRank
from extender.domain.planning.restrictions import UnseenNodes, waiting_on
from extender.domain.planning.selection import MembersMissing, choose_members
from extender.domain.planning.shortfalls import ShortfallMemo
from extender.domain.state.decisions import Effect, GangFaulted, PlanDropped


class StarvingHold(NamedTuple):
    """On one node: the starving gang holding free accelerators there, how many, of what."""

    owner: GroupKey
    gpus: int
    resource: str


class HoldReason(Enum):
    """Why the core holds a gang, or what it did with it last: said with the group's
    message (`say`), and mapped, never re-derived, by the PodGroup status (domain/status/status.py)."""

    NO_PODGROUP = "no PodGroup or min-available annotation"
    INVALID_SPEC = "its PodGroup cannot be used"
    WAITING_FOR_MEMBERS = "fewer members than it needs"
    NO_ROOM = "no room for it"
    BEHIND_GANG = "behind another gang that wants its nodes"
    RESERVING = "starving: reserving its nodes"
    PREEMPTING = "preempting to make room"
    # Behind the admission gate while kube-scheduler binds the gangs planned before it
    # (domain/queue/gang_admission.py, `ADMISSION_WINDOW_MEMBERS`).
    ADMISSION_WINDOW = "gated until the gangs planned before it are bound"
    PLAN_DROPPED = "its plan was dropped"
    FAULTED = "planning it raised"
    # Planning it raised at an older version of its members: tried again next time.
    FAULT_CLEARED = "planning it raised before its last change"
    PLANNED = "planned, binding"
    BIND_FAILED = "a binding failed, retried"
    PARTIAL = "a member can never be bound"
    BOUND = "bound"

    @property
    def condition_reason(self) -> str:
        """The reason of the PodGroup's Pending condition."""
        if self is HoldReason.WAITING_FOR_MEMBERS:
            return "WaitingForMembers"
        if self in (HoldReason.INVALID_SPEC, HoldReason.FAULTED):
            return "InvalidSpec"
        return "Unschedulable"


@dataclass(frozen=True)
class Hold:
    """The core's word on a gang: why, and the sentence it told (cut to MAX_REASON_CHARS)."""

    reason: HoldReason
    message: str


def members_missing_message(key: GroupKey, missing: object) -> str:
    """The sentence of a gang short of members (`selection.MembersMissing`)."""
    return f"gang {key}: {missing}; waiting for the rest to be created"


@dataclass
class GroupState:
    message: str = ""
    # Why `message` was said (`say`).
    hold: HoldReason = HoldReason.NO_PODGROUP
    retry_after: float = 0.0
    shortfall_generation: tuple[int, int] | None = None
    waiting: bool = True
    # Its place in the queue of held gangs (domain/planning/queue.py), from its members the
    # last time it was tried; None before that.
    rank: QueueRank | None = None
    # The gang its message says it waits behind, if any: the kept "does not fit" is
    # not answered once that gang stops holding a place (its message would be stale).
    behind: GroupKey | None = None
    # Planning this gang raised (a defect, or an input no limit foresaw): the group
    # version it raised at, and what its hold says. The gang is held without being
    # planned again until its members or PodGroup change (`GangPlanning.try_plan`).
    fault: tuple[int, str] | None = None


@dataclass
class Timeouts:
    schedule_timeout_seconds: float
    bind_barrier_timeout_seconds: float
    replan_backoff_seconds: float
    # Starvation (domain/starvation/reservations.py): a gang at the head of the queue that has
    # waited this long reserves its nodes, for at most reservation_max_seconds at once.
    starvation_seconds: float = 60.0
    reservation_max_seconds: float = 300.0
    # How long a preemptor's plan holds the room its victims free (they get their
    # termination grace period), and how long a unit whose eviction the API server
    # refused (a PodDisruptionBudget) is left out of the next choice.
    preemption_hold_seconds: float = 120.0
    # How long a unit whose eviction the API server forbade (403, 422) is left out.
    preemption_forbidden_seconds: float = 900.0


@dataclass
class Switches:
    """The core's features that settings turn off (read at every use: a test may flip one)."""

    # Gang preemption (domain/preemption/preemption.py), Settings.preemption: off, no gang
    # preempts and kube-scheduler's own preemption is passed through unchanged.
    preemption: bool = False
    # Placeholder pods (domain/starvation/placeholders.py) make reservations visible to other
    # schedulers and the cluster autoscaler; off: only this scheduler's pods respect them.
    placeholders: bool = True
    # Fence taints (domain/cluster/fences.py) keep every other scheduler off reserved nodes; off:
    # placeholders alone, which a pod of another scheduler already pending can race.
    fences: bool = True


def say(state: GroupState, hold: HoldReason, message: str) -> str:
    """Keep `message` as the group's word (status, Events, holds), cut to
    MAX_REASON_CHARS, and `hold` as why."""
    state.message = clip(message)
    state.hold = hold
    return state.message


@dataclass
class SharedState:
    """What the parts of `GangCore` share; each part keeps the rest of its state itself."""

    policy: Policy
    timeouts: Timeouts
    switches: Switches = field(default_factory=Switches)
    snapshot: ClusterSnapshot = field(default_factory=ClusterSnapshot)
    ledger: Ledger = field(default_factory=Ledger)
    groups: dict[GroupKey, GroupState] = field(default_factory=dict)
    effects: list[Effect] = field(default_factory=list)
    # Held gangs known not to fit, each until a change that could help it
    # (domain/planning/shortfalls.py): a cluster event costs them the shapes of their members,
    # not a plan each. Gangs it does not cover (starving ones, ones that could preempt)
    # keep the global memo, `GroupState.shortfall_generation`.
    shortfalls: ShortfallMemo = field(default_factory=ShortfallMemo)
    # Per member uid: nodes kube-scheduler last offered (or refused) it, so a plan
    # avoids nodes the scheduler's own filters reject (affinity, ports, ...).
    restrictions: dict[str, NodeRestriction] = field(default_factory=dict)
    # Bumped when kube-scheduler's last word on a member (`restrictions`) changes.
    restrictions_version: int = 0
    # Nodes whose joining or change no filter's candidates named yet: kube-scheduler's
    # informer may lag ours, so their absence from a member's candidates is no refusal.
    unseen_nodes: UnseenNodes = field(default_factory=UnseenNodes)
    # Per pod uid: the node our binding of it succeeded to, until the watch delivers a
    # copy naming a node. nodeName is never unset, so a watch copy without one that
    # arrives meanwhile (a write made before the binding, delivered late) is older
    # than the binding: it keeps the node (`GangWatch.observe_pod`), else the pod's
    # room would look free to the next plan while kube-scheduler still counts it.
    confirmed_bindings: dict[str, str] = field(default_factory=dict)
    # Groups whose hold message changed outside a filter or plan (a reservation
    # started, moved or ended): the controller re-writes their status (`drain_touched`).
    touched: set[GroupKey] = field(default_factory=set)
    # Per pod uid: the pending pods behind gang-extender's admission gate
    # (`PodInfo.admission_gated`), with when the watch first showed each so. kube-scheduler
    # never asks about them: the core plans their gangs itself (`GangCore.admit_gated`).
    admission_gated: dict[str, float] = field(default_factory=dict)
    # Gated pods whose gate the core asked to lift without a plan (`LiftAdmissionGate`),
    # with when: asked again only if the watch still shows the gate a while later (the
    # write failed for good, or this replica was not the leader then).
    gates_lifting: dict[str, float] = field(default_factory=dict)

    def drop(self, plan: Plan, reason: str, now: float, *, timed_out: bool = False) -> None:
        """Drop `plan` (nothing of it bound yet, or given up): its gang waits, backing off."""
        if self.ledger.drop(plan.group) is None:
            return
        state = self.groups.setdefault(plan.group, GroupState())
        state.retry_after = now + self.timeouts.replan_backoff_seconds
        state.shortfall_generation = None
        self.shortfalls.forget(plan.group)
        state.waiting = True
        say(state, HoldReason.PLAN_DROPPED, f"gang {plan.group}: plan dropped: {reason}")
        self.effects.append(PlanDropped(plan, reason, timed_out))

    def catch_up_unseen(self, now: float, *, seen: Sequence[str] = (), broad: bool = False) -> None:
        """Note node news and a filter's candidates (`seen`; `broad`: not a one-node ask
        on the pod's nominated node); drop the plans held up by a node a broad filter
        left out past its grace (`UnseenNodes.catch_up`).

        Not a preemption's plan while its victims are still on that node
        (`Plan.victims_still_on`, as the filter reads them): kube-scheduler counts
        them, so the node passes no pod's filters and its silence refuses nothing
        (at 1,000 nodes, 116 preemption plans were dropped so when nodes flapped NotReady).
        """
        for node in self.unseen_nodes.catch_up(self.snapshot, now, seen=seen, broad=broad):
            for plan in waiting_on(self.ledger.plans.values(), node):
                if plan.victims_still_on(node, self.snapshot.pods, now):
                    continue
                self.drop(
                    plan,
                    f"kube-scheduler offered node {node} to no pod within "
                    f"{self.unseen_nodes.grace_seconds:g}s of its joining or changing",
                    now,
                )

    def fault(self, key: GroupKey, state: GroupState, err: Exception, version: int) -> str:
        """Hold `key` with what went wrong; the service logs the traceback once (`GangFaulted`)."""
        message = say(
            state,
            HoldReason.FAULTED,
            f"gang {key}: planning failed ({type(err).__name__}: {quoted(str(err))}); "
            "held until its members or PodGroup change",
        )
        state.fault = (version, message)
        state.waiting = True
        state.shortfall_generation = None
        self.touched.add(key)
        details = "".join(traceback.format_exception(err))
        self.effects.append(GangFaulted(key, "plan", message, clip(details, 16_384)))
        return message

    def word_on(self, key: GroupKey) -> Hold | None:
        """The core's last word on `key` and why (None: it said nothing yet). A fault
        is FAULTED only while the members and PodGroup are those it raised on."""
        state = self.groups.get(key)
        if state is None:
            return None
        if state.fault is not None and state.fault[0] == self.snapshot.group_version(key):
            return Hold(HoldReason.FAULTED, state.fault[1])
        if not state.message:
            return None
        if state.hold is HoldReason.FAULTED:
            return Hold(HoldReason.FAULT_CLEARED, state.message)
        return Hold(state.hold, state.message)

    def members_short(self, key: GroupKey) -> Hold | None:
        """`key` lacks members its PodGroup asks for (minMember, a task's minimum), said
        as the filter says it; None if it has them, or nothing sizes it."""
        spec = self.snapshot.group_spec(key)
        if spec is None:
            return None
        choice = choose_members(
            self.snapshot.members(key),
            min_member=spec.min_member,
            task_minimums=spec.min_task_member,
        )
        if isinstance(choice, MembersMissing):
            return Hold(HoldReason.WAITING_FOR_MEMBERS, members_missing_message(key, choice))
        return None

    def new_plan(
        self,
        key: GroupKey,
        members: Sequence[PodInfo],
        outcome: Placement,
        now: float,
        *,
        deadline: float,
    ) -> Plan:
        """The plan of `outcome`'s placements (a plain plan and a preemptor's hold alike)."""
        by_uid = {m.uid: m for m in members}
        return Plan(
            group=key,
            plan_id=self.ledger.new_plan_id(),
            placements=dict(outcome.nodes),
            requests={
                uid: outcome.requests.get(uid, by_uid[uid].requests) for uid in outcome.nodes
            },
            names={uid: by_uid[uid].ref for uid in outcome.nodes},
            created_at=now,
            deadline=deadline,
        )


class PlanGroup(Protocol):
    """The filter's steps 4-8 for a held group (`GangPlanning.try_plan`) with no pod asking:
    its new plan, or why it waits. What the queue, the starvation check and the watch
    are given of the core."""

    def __call__(
        self, key: GroupKey, state: GroupState, spec: GroupSpec, now: float, *, queue: bool
    ) -> Plan | str: ...
