"""What the gang core decides and asks for: verdicts the routes translate, effects the service carries out.

The core (`domain/gang/gang.py`) returns these records and never acts itself: the
extender routes map a verdict to the wire format, and the controller turns each
effect into API writes and Events. Kept apart from the core so each side reads
one small vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from extender.domain.cluster.fences import FenceChange
from extender.domain.cluster.ledger import Plan
from extender.domain.objects.membership import GroupKey
from extender.domain.objects.model import PodInfo
from extender.domain.objects.quantity import GPU


class Verdict(Enum):
    NOT_A_GANG = "not-a-gang"
    WAIT = "wait"
    PLANNED = "planned"
    REJECT = "reject"


@dataclass(frozen=True)
class FilterDecision:
    verdict: Verdict
    nodes: list[str]  # nodes the pod may go to
    failed: dict[str, str]  # node -> reason, resolvable (plain pods vs reservations)
    unresolvable: dict[str, str]  # node -> reason, preemption cannot help
    message: str = ""


class BindVerdict(Enum):
    BIND_NOW = "bind-now"  # not part of a plan: bind straight away
    WAIT = "wait"  # inside the barrier: wait for the rest of the gang
    RELEASE = "release"  # last member arrived: everyone may bind
    ERROR = "error"  # refuse: plan gone or node differs


@dataclass(frozen=True)
class BindDecision:
    verdict: BindVerdict
    plan_id: int | None = None
    group: GroupKey | None = None
    message: str = ""


@dataclass(frozen=True)
class Assumption:
    """A plain pod counted on a node before its binding call returned: what to undo."""

    before: PodInfo  # the pod as it was
    assumed: PodInfo  # the copy recorded as bound on the node


# ---- effects the service carries out ----
@dataclass(frozen=True)
class PlanCreated:
    plan: Plan


@dataclass(frozen=True)
class PlanDropped:
    plan: Plan
    reason: str
    timed_out: bool = False


@dataclass(frozen=True)
class GangBound:
    plan: Plan


@dataclass(frozen=True)
class MemberBindFailed:
    """A released member's binding failed; it keeps its reservation and is retried."""

    plan: Plan
    member: str  # "ns/name"
    reason: str


@dataclass(frozen=True)
class GangBroken:
    """A released gang lost a member that can never be bound: the gang is partial.

    The hook for the gang's lifecycle policy (restart, abort); today the service
    turns it into a Warning Event and counts the gang once (`first`).
    """

    plan: Plan
    member: str  # "ns/name"
    cause: str
    bound: int  # members of the plan bound when the loss was seen
    first: bool  # the plan's first loss: count the gang once
    message: str  # what the group's status says, and the Warning Event on its members


@dataclass(frozen=True)
class Victim:
    """A pod to evict for a preemption (domain/preemption/preemption.py)."""

    uid: str
    ref: str  # "ns/name"
    unit: str  # what it goes with: "gang ns/name" or "pod ns/name"


@dataclass(frozen=True)
class EvictVictims:
    """Evict `victims` through the Eviction API (PodDisruptionBudgets honoured).

    `group` is the preemptor's gang (its plan holds the room the victims free), or,
    completing a gang kube-scheduler preempted in part, the victim gang itself.
    `preemptor` names who preempts, for the victims' `PreemptedByGang` Event and
    their gang-extender.io/preempted-by annotation; `message` is the Event on the
    preemptor's members ("" when the preemptor is not one of our gangs).
    """

    group: GroupKey
    preemptor: str
    victims: tuple[Victim, ...]
    message: str = ""


@dataclass(frozen=True)
class BarrierReleased:
    """A complete barrier released after the fact: its gang's placeholders are gone.

    The bind barrier of a gang that reserved nodes waits until the watch saw its
    placeholder pods deleted (domain/starvation/placeholders.py): the waiters are woken here.
    """

    plan: Plan


@dataclass(frozen=True)
class PlaceholderCreate:
    """Create a placeholder pod bound to `node` requesting `gpus` of `resource` for `group`."""

    group: GroupKey
    name: str
    node: str
    gpus: int
    resource: str = GPU  # the gang's accelerator resource


@dataclass(frozen=True)
class PlaceholderDelete:
    """Delete the placeholder pod `name` in the group's namespace."""

    group: GroupKey
    name: str


@dataclass(frozen=True)
class GangFaulted:
    """Planning one gang raised: that gang is held with `message` (its status and hold
    say so) and the others are planned as if it were not there. The service logs
    `details` (the traceback) once and counts it (gang_extender_gang_faults_total)."""

    group: GroupKey
    where: str  # "plan" (a filter, the queue pass, a watch event) or "reconcile"
    message: str
    details: str


@dataclass(frozen=True)
class LiftAdmissionGate:
    """Lift gang-extender's admission gate off a pod the core will not plan behind it.

    A gang's planned members are ungated with their planned node (`PlanCreated`);
    this is for a pod the gate would otherwise hold with nobody saying why (not a
    gang member, another scheduler's, a misdeclared group, no group spec): ungated,
    kube-scheduler asks about it and the filter's answer says what to fix.
    """

    group: GroupKey | None
    pod: str  # "ns/name"
    reason: str


PlanEffect = PlanCreated | PlanDropped | GangBound | MemberBindFailed | GangBroken | BarrierReleased
Effect = (
    PlanEffect
    | EvictVictims
    | PlaceholderCreate
    | PlaceholderDelete
    | FenceChange
    | GangFaulted
    | LiftAdmissionGate
)
