"""`gang-extender status`: one row per group, from a snapshot of API objects.

Pure (no I/O, the time is passed in): `extender/kube/status_reads.py` reads the
objects, `extender/status_view.py` prints what is computed here, `extender/cli.py`
wires the two. A row is a group the service reads, whatever declares it: a
gang-extender PodGroup carries its status; for the others (a Volcano or
scheduler-plugins PodGroup, Kubernetes' PodGroups, 1.35's Workloads, or members
naming a group that has no PodGroup) the phase comes from the members and the
reason from their latest `GangWaiting` Event (else kube-scheduler's
`FailedScheduling`). A group whose Job Kueue has not admitted (a Workload without
admission) waits for Kueue, and says so. PLACED and RUNNING count members of any scheduler, as
`kubectl get pods` shows them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from extender.domain.cluster.foreign_podgroups import (
    SOURCE_COSCHEDULING,
    SOURCE_OURS,
    SOURCE_VOLCANO,
)
from extender.domain.objects.membership import (
    SCHEDULER_NAME,
    GroupKey,
    MembershipError,
    WorkloadRef,
    group_name,
    min_available,
    task_name,
    workload_ref,
)
from extender.domain.objects.model import (
    UPSTREAM_PODGROUP_SOURCE,
    UPSTREAM_WORKLOAD_SOURCE,
    PodInfo,
    upstream_podgroup_spec,
    upstream_workload_spec,
)
from extender.domain.planning.queue import queue_order, rank_of
from extender.domain.status.status import MemberCounts, other_scheduler_message

# The SOURCE column: where a group's size comes from (docs/podgroup.md), by the
# GroupSpec.source the service gives it (the words its messages use).
SOURCE_PODS = "pods"  # no PodGroup: only the members' group label or annotation
SOURCE_UPSTREAM = "kubernetes"  # scheduling.k8s.io PodGroup or 1.35 Workload (read only)
SOURCE_COLUMN = {
    SOURCE_OURS: "gang-extender",  # a scheduling.gang-extender.io PodGroup (its status is ours)
    SOURCE_COSCHEDULING: "scheduler-plugins",  # scheduling.x-k8s.io PodGroup
    SOURCE_VOLCANO: "volcano",  # scheduling.volcano.sh PodGroup
    UPSTREAM_PODGROUP_SOURCE: SOURCE_UPSTREAM,
    UPSTREAM_WORKLOAD_SOURCE: SOURCE_UPSTREAM,
}
PLACED_PHASES = ("Scheduled", "Running", "Succeeded")
KUEUE_WAITING = "waiting for Kueue admission"
NOT_QUEUED = "-"  # the QUEUE of a group that is not held
SERVICE_LEASE = ("gang-system", "gang-extender-service")  # the leader Lease deploy/ uses
SERVICE_CHECK = "check: kubectl -n gang-system get pods,lease"


@dataclass(frozen=True)
class StatusObjects:
    """What `status` read from the API server; None: not served, or not readable."""

    now: datetime
    ours: list[dict[str, Any]] = field(default_factory=list)
    foreign: list[dict[str, Any]] = field(default_factory=list)  # Volcano's, then x-k8s.io
    upstream: list[dict[str, Any]] | None = None
    workloads: list[dict[str, Any]] | None = None
    pods: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    nodes: list[dict[str, Any]] | None = None
    lease: dict[str, Any] | None = None
    kueue_workloads: list[dict[str, Any]] | None = None  # kueue.x-k8s.io Workloads
    kueue_local_queues: list[dict[str, Any]] | None = None


@dataclass(frozen=True)
class MemberRow:
    name: str
    task: str
    scheduler: str
    node: str  # "" while not bound
    phase: str
    scheduler_reason: str  # kube-scheduler's latest word on it ("" when none)


@dataclass(frozen=True)
class GroupRow:
    namespace: str
    name: str
    phase: str
    placed: int
    min_member: int | None
    running: int
    source: str
    their_phase: str  # the phase written into a foreign PodGroup ("" for ours, or none)
    queue: str
    priority: int
    waiting_for: str
    members: tuple[MemberRow, ...] = ()
    conditions: tuple[dict[str, Any], ...] = ()

    @property
    def key(self) -> tuple[str, str]:
        return self.namespace, self.name

    @property
    def placed_of_min(self) -> str:
        return f"{self.placed}/{'?' if self.min_member is None else self.min_member}"

    @property
    def source_cell(self) -> str:
        return f"{self.source} ({self.their_phase})" if self.their_phase else self.source

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(sorted({m.node for m in self.members if m.node}))


def _key(obj: dict[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or "default"), str(meta.get("name", ""))


def _event_time(event: dict[str, Any]) -> str:
    return str(
        event.get("lastTimestamp")
        or event.get("eventTime")
        or (event.get("metadata") or {}).get("creationTimestamp")
        or ""
    )


_GANG_MESSAGE = re.compile(r"\bgang [^\s/]+/[^\s:]+: .*?(?=\. |\.?$)")


def gang_message(text: str) -> str:
    """The `gang <ns>/<name>: ...` message inside kube-scheduler's FailedScheduling text."""
    found = _GANG_MESSAGE.search(text)
    return found.group(0) if found else text


def _time(text: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None


def _ago(delta: timedelta) -> str:
    seconds = max(0, int(delta.total_seconds()))
    if seconds < 120:
        return f"{seconds}s"
    return f"{seconds // 60}m" if seconds < 7200 else f"{seconds // 3600}h"


def service_silence(objects: StatusObjects) -> str | None:
    """Why no gang-extender service answers, when its leader Lease says so; None when
    it is held, or when there is none to read (a single replica without
    --leader-elect; then each group without a word from the service says so)."""
    lease = objects.lease
    if lease is None:
        return None
    spec = lease.get("spec") or {}
    namespace, name = _key(lease)
    renewed = _time(spec.get("renewTime"))
    duration = spec.get("leaseDurationSeconds")
    holder = spec.get("holderIdentity") or ""
    if not holder:
        return f"no gang-extender service is answering: Lease {namespace}/{name} has no holder; {SERVICE_CHECK}"
    if renewed is None or not isinstance(duration, int):
        return None
    if renewed + timedelta(seconds=duration) >= objects.now:
        return None
    return (
        f"no gang-extender service is answering: Lease {namespace}/{name} (holder {holder}) "
        f"was last renewed {_ago(objects.now - renewed)} ago; {SERVICE_CHECK}"
    )


NO_WORD = (
    "no word from gang-extender on this group (no status, GangWaiting or FailedScheduling "
    "Event): is the service running? " + SERVICE_CHECK
)


def _members_by_group(pods: list[dict[str, Any]]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    members: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        try:
            name = group_name(meta, pod.get("spec"))
        except MembershipError:
            continue  # claims two groups: its GangWaiting Warning says so
        if name is not None:
            members.setdefault((_key(pod)[0], name), []).append(pod)
    return members


def _latest_words(events: list[dict[str, Any]]) -> tuple[dict[Any, Any], dict[Any, str]]:
    """Per pod: its latest (rank, time, gang message), a GangWaiting Event (rank 1)
    winning over kube-scheduler's FailedScheduling (rank 0), which carries the same
    gang message or, when its own filters reject the pod first, their reason; and
    kube-scheduler's latest FailedScheduling text whole."""
    latest: dict[tuple[str, str], tuple[int, str, str]] = {}
    scheduler: dict[tuple[str, str], tuple[str, str]] = {}
    for event in events:
        involved = event.get("involvedObject") or {}
        pod_key = (str(involved.get("namespace", "")), str(involved.get("name", "")))
        rank = 1 if event.get("reason") == "GangWaiting" else 0
        when = _event_time(event)
        said = (rank, when, gang_message(str(event.get("message", ""))))
        if pod_key not in latest or said[:2] >= latest[pod_key][:2]:
            latest[pod_key] = said
        if rank == 0 and (pod_key not in scheduler or when >= scheduler[pod_key][0]):
            scheduler[pod_key] = (when, str(event.get("message", "")))
    return latest, {k: v[1] for k, v in scheduler.items()}


def _pod_name(pod: dict[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("name", ""))


def _scheduler_of(pod: dict[str, Any]) -> str:
    return str((pod.get("spec") or {}).get("schedulerName") or "default-scheduler")


def _member_row(pod: dict[str, Any], said: dict[Any, str]) -> MemberRow:
    info = PodInfo.from_api(pod)
    reason = said.get((info.namespace, info.name), "")
    if not reason and not info.node_name:
        reason = info.unschedulable_message or ""
    return MemberRow(
        name=info.name,
        task=task_name(pod.get("metadata") or {}),
        scheduler=_scheduler_of(pod),
        node=info.node_name or "",
        phase="Terminating" if info.deleting else info.phase,
        scheduler_reason=reason,
    )


def group_rows(objects: StatusObjects) -> list[GroupRow]:
    """One row per group, sorted by namespace and name (pure, for every output)."""
    members = _members_by_group(objects.pods)
    latest, scheduler_said = _latest_words(objects.events)
    silence = service_silence(objects)
    rows: dict[tuple[str, str], GroupRow] = {}

    def build(
        key: tuple[str, str],
        source: str,
        min_member: int | None,
        *,
        status: dict[str, Any] | None = None,
        their_phase: str = "",
        conditions: tuple[dict[str, Any], ...] = (),
    ) -> GroupRow:
        pods = members.get(key, [])
        every = [PodInfo.from_api(p) for p in pods]
        counts = MemberCounts.of(every)
        phase = counts.phase(min_member)
        placed, running = counts.scheduled, counts.running
        reason = ""
        if status is not None:
            phase = str(status.get("phase") or phase)
            if not pods:
                placed, running = int(status.get("scheduled", 0)), int(status.get("running", 0))
            reason = next(
                (str(c.get("message", "")) for c in conditions if c.get("type") == "Scheduled"),
                "",
            )
        mine = [p for p in pods if _scheduler_of(p) == SCHEDULER_NAME]
        if not reason:
            heard = [
                latest[(key[0], _pod_name(p))] for p in mine if (key[0], _pod_name(p)) in latest
            ]
            reason = max(heard)[2] if heard else ""
        # Pods of the group another scheduler places: no Event of ours says so.
        foreign = [
            info
            for p, info in zip(pods, every, strict=True)
            if _scheduler_of(p) != SCHEDULER_NAME and info.is_active_member
        ]
        if foreign and (min_member is None or len(mine) < min_member) and status is None:
            reason = other_scheduler_message(
                GroupKey(*key), foreign, upstream=source == SOURCE_UPSTREAM
            )
        if phase in PLACED_PHASES:
            reason = ""
        elif silence:
            reason = f"{silence}; last word: {reason}" if reason else silence
        elif not reason and mine:
            reason = NO_WORD
        return GroupRow(
            namespace=key[0],
            name=key[1],
            phase=phase,
            placed=placed,
            min_member=min_member,
            running=running,
            source=source,
            their_phase=their_phase,
            queue=NOT_QUEUED,
            priority=0,
            waiting_for=reason,
            members=tuple(_member_row(p, scheduler_said) for p in pods),
            conditions=conditions,
        )

    for pg in objects.ours:
        status = pg.get("status") or {}
        size = (pg.get("spec") or {}).get("minMember")
        rows[_key(pg)] = build(
            _key(pg),
            SOURCE_COLUMN[SOURCE_OURS],
            size if isinstance(size, int) else None,
            status=status if status.get("phase") else None,
            conditions=tuple(status.get("conditions") or ()),
        )
    for pg in objects.foreign:
        if _key(pg) in rows:  # the service reads ours first, then Volcano's
            continue
        size = (pg.get("spec") or {}).get("minMember")
        volcano = str(pg.get("apiVersion", "")).startswith("scheduling.volcano.sh/")
        if volcano:  # Volcano's minMember is omitempty: none is 0, no minimum
            size = max(1, size or 0) if size is None or isinstance(size, int) else None
        status = pg.get("status") or {}
        rows[_key(pg)] = build(
            _key(pg),
            SOURCE_COLUMN[SOURCE_VOLCANO if volcano else SOURCE_COSCHEDULING],
            int(size) if isinstance(size, int) else None,
            their_phase=str(status.get("phase") or ""),
            conditions=tuple(status.get("conditions") or ()),
        )
    for pg in objects.upstream or []:
        if _key(pg) not in rows:  # as the service: ours, then scheduler-plugins', then these
            spec = upstream_podgroup_spec(pg)
            rows[_key(pg)] = build(
                _key(pg), SOURCE_COLUMN[spec.source], None if spec.error else spec.min_member
            )
    _rows_from_pods(objects, members, rows, build)
    for key, (size, reason) in kueue_holds(objects).items():
        row = rows.get(key) or build(key, SOURCE_PODS, size)
        if row.phase not in PLACED_PHASES:
            rows[key] = replace(row, phase="Pending", waiting_for=reason)
    return _with_queue(rows, members)


def _conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {str(c.get("type")): c for c in (obj.get("status") or {}).get("conditions") or []}


def kueue_holds(objects: StatusObjects) -> dict[tuple[str, str], tuple[int | None, str]]:
    """Groups whose Job Kueue has not admitted yet (its Workload has no admission):
    their size and "waiting for Kueue admission (ClusterQueue ..., LocalQueue ...):
    <Kueue's reason>". Such a Job stays suspended, so the group has no pod yet and
    nothing gang-extender could place: the wait is Kueue's quota, not ours."""
    cluster_queue = {
        _key(q): str((q.get("spec") or {}).get("clusterQueue") or "?")
        for q in objects.kueue_local_queues or []
    }
    holds: dict[tuple[str, str], tuple[int | None, str]] = {}
    for workload in objects.kueue_workloads or []:
        status, spec = workload.get("status") or {}, workload.get("spec") or {}
        conditions = _conditions(workload)
        if status.get("admission") or conditions.get("Finished", {}).get("status") == "True":
            continue
        for pod_set in spec.get("podSets") or []:
            meta = (pod_set.get("template") or {}).get("metadata") or {}
            try:
                group, size = group_name(meta), min_available(meta)
            except MembershipError:
                continue  # the webhook denies its pods, saying why, once admitted
            if group is None:
                continue
            namespace = _key(workload)[0]
            queue = str(spec.get("queueName") or "?")
            said = str(conditions.get("QuotaReserved", {}).get("message") or "")
            reason = (
                f"{KUEUE_WAITING} (ClusterQueue {cluster_queue.get((namespace, queue), '?')}, "
                f"LocalQueue {queue})"
            )
            holds[(namespace, group)] = (size, f"{reason}: {said}" if said else reason)
            break
    return holds


def _rows_from_pods(
    objects: StatusObjects,
    members: dict[tuple[str, str], list[dict[str, Any]]],
    rows: dict[tuple[str, str], GroupRow],
    build: Any,
) -> None:
    """Groups only the members declare: a 1.35 Workload they name, else their annotation."""

    def ref_of(pod: dict[str, Any]) -> WorkloadRef | None:
        try:
            return workload_ref(pod.get("spec"))
        except MembershipError:
            return None  # its GangWaiting Warning says what is wrong with it

    by_workload = {_key(w): w for w in objects.workloads or []}
    for key, group in members.items():
        if key in rows:
            continue
        ref = next((r for p in group if (r := ref_of(p)) is not None and r.group == key[1]), None)
        workload = by_workload.get((key[0], ref.workload)) if ref is not None else None
        if ref is not None and workload is not None:
            spec = upstream_workload_spec(workload, ref)
            rows[key] = build(
                key, SOURCE_COLUMN[spec.source], None if spec.error else spec.min_member
            )
            continue
        sizes = set()
        for pod in group:
            try:
                size = min_available(pod.get("metadata") or {})
            except MembershipError:
                continue
            if size is not None:
                sizes.add(size)
        rows[key] = build(key, SOURCE_PODS, max(sizes) if sizes else None)


def _with_queue(
    rows: dict[tuple[str, str], GroupRow],
    members: dict[tuple[str, str], list[dict[str, Any]]],
) -> list[GroupRow]:
    """QUEUE: a held group's place in the order the service plans held gangs
    (domain/planning/queue.py: pod priority, then oldest member); PRIORITY: its highest.
    Held: not placed, with a member of this scheduler not bound yet."""
    ranks = {}
    held = []
    for key, row in rows.items():
        mine = [
            PodInfo.from_api(p)
            for p in members.get(key, [])
            if (p.get("spec") or {}).get("schedulerName") == SCHEDULER_NAME
        ]
        active = [p for p in mine if not p.deleting and p.phase not in ("Succeeded", "Failed")]
        ranks[key] = rank_of(GroupKey(*key), active)
        if row.phase == "Pending" and any(not p.is_bound and not p.gated for p in active):
            held.append(ranks[key])
    place = {(r.key.namespace, r.key.name): i for i, r in enumerate(queue_order(held), 1)}
    out = []
    for key in sorted(rows):
        row = rows[key]
        queue = str(place[key]) if key in place else NOT_QUEUED
        out.append(replace(row, queue=queue, priority=ranks[key].priority))
    return out
