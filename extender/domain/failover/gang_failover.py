"""Failover as a part of `GangCore`: plans recovered by a new leader, dropped by an old one.

Pure; a part of `GangCore` (domain/gang/gang.py), over domain/failover/recovery.py. The replica
that becomes the one writer reserves the plans the members' planned-node
annotations record (`recover`) before it reports Ready; one that stops being the
writer drops every plan (`stand_down`).
"""

from __future__ import annotations

from extender.domain.cluster.ledger import Plan
from extender.domain.failover.recovery import Recovery, recover_plans
from extender.domain.state.gang_state import GroupState, HoldReason, SharedState, say


class Failover:
    """Recovering and giving up plans when the writer changes (shared state only)."""

    def __init__(self, shared: SharedState) -> None:
        self.shared = shared

    def recover(self, now: float) -> Recovery:
        """Reserve the plans the members' planned-node annotations record (domain/failover/recovery.py).

        Called when this replica becomes the one writer, before it reports Ready. No
        effect is emitted: the annotations are already on the members.
        """
        reserved = {
            node: self.shared.ledger.reserved(node) for node in self.shared.ledger.reserved_nodes()
        }
        found = recover_plans(
            self.shared.snapshot, reserved=reserved, planned=set(self.shared.ledger.plans)
        )
        for recovered in found.plans:
            key = recovered.group
            spec = self.shared.snapshot.group_spec(key)
            timeout = (
                spec.schedule_timeout_seconds if spec is not None else None
            ) or self.shared.timeouts.schedule_timeout_seconds
            pods = {uid: self.shared.snapshot.pods[uid] for uid in recovered.placements}
            self.shared.ledger.reserve(
                Plan(
                    group=key,
                    plan_id=self.shared.ledger.new_plan_id(),
                    placements=dict(recovered.placements),
                    requests={
                        uid: dict(recovered.requests.get(uid, pod.requests))
                        for uid, pod in pods.items()
                    },
                    names={uid: pod.ref for uid, pod in pods.items()},
                    created_at=now,
                    deadline=now + timeout,
                )
            )
            state = self.shared.groups.setdefault(key, GroupState())
            state.waiting = False
            state.shortfall_generation = None
            self.shared.shortfalls.forget(key)
            say(
                state,
                HoldReason.PLANNED,
                f"gang {key}: plan of {len(pods)} members recovered, binding",
            )
        return found

    def stand_down(self, now: float) -> None:
        """No longer the writer: drop every plan (barrier waiters are refused).

        The PlanDropped effects wake the waiters; their API writes are skipped, since
        this replica is not the leader: the annotations stay for the new one.
        """
        for plan in list(self.shared.ledger.plans.values()):
            self.shared.drop(plan, "this replica is no longer the leader", now)
