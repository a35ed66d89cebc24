"""Reservations: capacity planned for a gang but not yet bound.

A plan reserves a node for every member at once, so two gangs can never each
hold part of what both need (no deadlock). A member's reservation ends when the
pod is seen bound (then the snapshot counts it), when the member is lost after
its barrier released (deleted, bound elsewhere by someone else: `forget_member`),
or when the plan is dropped.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Container, Mapping
from dataclasses import dataclass, field

from extender.domain.cluster.snapshot import add_into
from extender.domain.objects.membership import GroupKey
from extender.domain.objects.model import Resources

# A victim the watch saw deleted may still be counted by kube-scheduler for a moment
# (its informer is behind ours, or the member's cycle began before the delete): its
# preemptor's members wait this long after before a refused node drops the plan.
VICTIM_GONE_GRACE_SECONDS = 5.0


@dataclass
class Plan:
    group: GroupKey
    plan_id: int
    placements: dict[str, str]  # pod uid -> node
    requests: dict[str, Resources]  # pod uid -> requests
    names: dict[str, str]  # pod uid -> "ns/name", for messages
    created_at: float
    deadline: float
    bound: set[str] = field(default_factory=set)
    # Members at bind on their planned node (any other node is refused there).
    arrived: set[str] = field(default_factory=set)
    barrier_started: float | None = None
    # Set once the barrier released (after the re-check of every planned node): from
    # then on the plan is never dropped; unbound members keep their reservations until
    # bound or lost, so a failed binding is retried onto the same node.
    released: bool = False
    lost: dict[str, str] = field(default_factory=dict)  # pod uid -> why it cannot be bound
    # A preemptor's victims: until the watch sees one gone, kube-scheduler
    # still counts it and may not offer that node; its members wait there (gang_filter.py).
    victims: dict[str, tuple[str, str]] = field(default_factory=dict)  # uid -> (node, ref)
    # When the watch saw each victim deleted (pod uid -> time): kube-scheduler may learn
    # it later, or answer from a cycle begun before (`victims_still_on`'s grace).
    victims_gone: dict[str, float] = field(default_factory=dict)
    # Members behind the admission gate keep it until every victim is gone: let out
    # earlier, kube-scheduler tries them while the victims still hold the node, fails
    # them and runs its own preemption dry run (domain/queue/gang_admission.py).
    gates_held: bool = False

    def victims_still_on(self, node: str, pods: Container[str], now: float) -> list[str]:
        """The refs of the plan's victims on `node` kube-scheduler may still count: not
        seen deleted (their uid still in `pods`, the watch's), or seen deleted less than
        `VICTIM_GONE_GRACE_SECONDS` ago."""
        return sorted(
            ref
            for uid, (at, ref) in self.victims.items()
            if at == node
            and (uid in pods or now - self.victims_gone.get(uid, now) < VICTIM_GONE_GRACE_SECONDS)
        )

    @property
    def waiting_for(self) -> set[str]:
        """Planned members that have not reached bind yet."""
        return set(self.placements) - self.bound - self.arrived - set(self.lost)

    @property
    def unbound(self) -> set[str]:
        """Planned members still holding a reservation: neither bound nor lost."""
        return set(self.placements) - self.bound - set(self.lost)

    @property
    def barrier_complete(self) -> bool:
        return not self.waiting_for

    @property
    def fully_bound(self) -> bool:
        """Every member that can still be bound is: the plan is settled (whole if none lost)."""
        return not self.unbound


class Ledger:
    def __init__(self) -> None:
        self.plans: dict[GroupKey, Plan] = {}
        self._reserved: dict[str, Resources] = defaultdict(dict)
        self._plan_of: dict[str, GroupKey] = {}
        # node -> group -> its members reserved there (bound or lost ones leave): who
        # holds a node, for the refusal message of every plain pod that does not fit it.
        self._holders: dict[str, dict[GroupKey, int]] = {}
        self._next_id = 1
        self.generation = 0
        # Nodes whose reservations changed since the core last drained this set.
        self.capacity_changed: set[str] = set()

    def new_plan_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def reserve(self, plan: Plan) -> None:
        if plan.group in self.plans:
            raise ValueError(f"gang {plan.group} already has a plan")
        self.plans[plan.group] = plan
        for uid, node in plan.placements.items():
            if uid in plan.bound:
                continue
            add_into(self._reserved[node], plan.requests[uid])
            self.capacity_changed.add(node)
            self._plan_of[uid] = plan.group
            holders = self._holders.setdefault(node, {})
            holders[plan.group] = holders.get(plan.group, 0) + 1
        self.generation += 1

    def plan_of(self, uid: str) -> Plan | None:
        key = self._plan_of.get(uid)
        return self.plans.get(key) if key is not None else None

    def mark_bound(self, uid: str) -> Plan | None:
        """The pod is bound: its capacity is now counted by the snapshot."""
        key = self._plan_of.pop(uid, None)
        if key is None:
            return None
        plan = self.plans[key]
        plan.bound.add(uid)
        self._release(plan.placements[uid], plan.requests[uid], key)
        self.generation += 1
        return plan

    def forget_member(self, uid: str) -> Plan | None:
        """A planned member will never be bound here: give its reservation back."""
        key = self._plan_of.pop(uid, None)
        if key is None:
            return None
        plan = self.plans[key]
        self._release(plan.placements[uid], plan.requests[uid], key)
        self.generation += 1
        return plan

    def drop(self, group: GroupKey) -> Plan | None:
        plan = self.plans.pop(group, None)
        if plan is None:
            return None
        for uid, node in plan.placements.items():
            if self._plan_of.get(uid) == group:
                del self._plan_of[uid]
                self._release(node, plan.requests[uid], group)
        self.generation += 1
        return plan

    def _release(self, node: str, requests: Mapping[str, int], group: GroupKey) -> None:
        """Give a reservation back; a node with nothing left reserved leaves the index,
        so `reserved_nodes()` costs the reservations held, not every node ever reserved."""
        reserved = self._reserved[node]
        add_into(reserved, requests, -1)
        self.capacity_changed.add(node)
        if not any(reserved.values()):
            del self._reserved[node]
        holders = self._holders[node]
        holders[group] -= 1
        if not holders[group]:
            del holders[group]
            if not holders:
                del self._holders[node]

    def reserved(self, node: str) -> Mapping[str, int]:
        return self._reserved.get(node, {})

    def reserved_nodes(self) -> list[str]:
        return [node for node, res in self._reserved.items() if any(res.values())]

    def owners(self, node: str) -> list[GroupKey]:
        """The gangs with a member reserved on `node` (planned, not bound, not lost).

        From an index kept by every reservation change: a plain pod's filter asks it
        for each node it does not fit, and scanning every plan per node was
        O(plans x members) each (6-14 ms per filter at 100 planned gangs)."""
        return sorted(self._holders.get(node, ()))
