"""Starvation reservations and the placeholder pods that make them visible, as parts of `GangCore`.

Pure; a part of `GangCore` (domain/gang/gang.py), over domain/starvation/reservations.py and
domain/starvation/placeholders.py. A held gang at the head of the queue (`gang_ahead_of` is
None) that waited longer than its starvationSeconds reserves nodes
(`update_reservations`, run with every expiry pass): the GPUs free there, up to its
need, are taken out of every other gang's planning (`starving_holds`) and refused to
plain pods (`starving_refusal`, at filter and bind), and it is planned once they
hold its need. The reservation ends when it is planned or no longer held, or at its
bound (`reservation_max_seconds`, then other nodes are chosen).

While it holds GPUs, placeholder pods request them on the reserved nodes
(`_sync_placeholders`), so other schedulers see them taken, and the nodes carry the
fence taint (domain/cluster/fences.py, `_sync_fences`) when every pending member tolerates
it, so no other scheduler places a pod there at all, until the gang planned on them
is bound. A placeholder or fence write the watch has not confirmed is asked again
after PLACEHOLDER_RETRY_SECONDS.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import replace

from extender.domain.cluster.fences import FENCE_TAINT_KEY, FenceNode, changes, tolerates_fence
from extender.domain.cluster.fences import desired as desired_fences
from extender.domain.cluster.ledger import Plan
from extender.domain.objects.membership import GroupKey
from extender.domain.objects.model import GroupSpec, PodInfo
from extender.domain.planning.planner import Placement, plan_gang
from extender.domain.planning.selection import MembersMissing, choose_members
from extender.domain.queue.gang_queue import QueueOrder
from extender.domain.starvation.placeholders import ObservedPlaceholder, desired, diff
from extender.domain.starvation.reservations import (
    NodeGpus,
    Reservation,
    choose_nodes,
    hold,
    reservation_message,
    starving,
)
from extender.domain.state.decisions import PlaceholderCreate
from extender.domain.state.gang_room import GangRoom
from extender.domain.state.gang_state import (
    GroupState,
    HoldReason,
    PlanGroup,
    SharedState,
    StarvingHold,
    say,
)

# Starving gangs are looked for at most this often (every filter runs the upkeep of the
# reservations that exist; finding new ones walks every held group).
STARVATION_CHECK_SECONDS = 1.0
# A placeholder create or delete not seen by the watch after this long is asked again
# (a repeated create is a 409 by its deterministic name, a repeated delete a 404).
PLACEHOLDER_RETRY_SECONDS = 5.0


def own_starvation_seconds(spec: GroupSpec, members: Sequence[PodInfo]) -> float | None:
    """spec.starvationSeconds, else the members' annotation (the lowest), else None."""
    if spec.starvation_seconds is not None:
        return spec.starvation_seconds
    said = [m.starvation_seconds for m in members if m.starvation_seconds is not None]
    return min(said) if said else None


class StarvationReservations:
    """Reservations of starving gangs, their placeholder pods and fences.

    A starving gang is one at the head of the queue (`queue`); its GPUs are the room's
    (`room`). Given the filter's planning steps (`plan_group`) for a gang whose
    reserved GPUs are all free, and the barrier's `placeholder_gone`.
    """

    def __init__(
        self,
        shared: SharedState,
        *,
        queue: QueueOrder,
        room: GangRoom,
        plan_group: PlanGroup,
        placeholder_gone: Callable[[GroupKey, float], None],
    ) -> None:
        self.shared = shared
        self.queue = queue
        self.room = room
        self.plan_group = plan_group
        self.placeholder_gone = placeholder_gone
        # Starving gangs' reservations (domain/starvation/reservations.py), and the nodes of the
        # last one each gave up (its next choice prefers others).
        self.reservations: dict[GroupKey, Reservation] = {}
        self.given_up: dict[GroupKey, tuple[str, ...]] = {}
        self.starvation_checked = float("-inf")
        # Since when each held gang without a plan has been seen held by the starvation
        # check: its wait, on this service's clock (not the pods' creation times, which
        # a gated or long-existing pod makes old, and another clock writes).
        self.held_since: dict[GroupKey, float] = {}
        # Per unplanned group: (its version, held, its own starvationSeconds or None for
        # the default) when last looked at.
        self.starving_inputs: dict[GroupKey, tuple[int, bool, float | None]] = {}
        # Placeholder deletes asked for and not seen done yet: ("delete", name) -> when
        # asked; creates, by name: when asked and what (counted as there until seen or
        # retried).
        self.placeholder_requests: dict[tuple[str, str], float] = {}
        self.placeholder_creating: dict[str, tuple[float, PlaceholderCreate]] = {}
        # Fence writes asked for and not seen done: (node, value, "" to remove) -> when asked.
        self.fence_requests: dict[tuple[str, str], float] = {}
        # Gangs planned from a fenced reservation: the plan and the nodes kept fenced
        # until that plan is bound or dropped.
        self.fenced_plans: dict[GroupKey, tuple[Plan, frozenset[str]]] = {}

    def reserving(self, key: GroupKey) -> bool:
        """`key` holds a starvation reservation."""
        return key in self.reservations

    def starving_holds(self) -> dict[str, StarvingHold]:
        """Per node, the starving gang that holds free GPUs there, how many and of what."""
        holds: dict[str, StarvingHold] = {}
        for key, reservation in self.reservations.items():
            resource = reservation.resource
            for node, gpus in self._held(reservation).items():
                # What its placeholders hold is counted as used already, by everyone;
                # the node stays listed so a plain pod is still checked against it (a
                # kube-scheduler that has not seen the placeholder yet offers the node).
                placeholders = self.shared.snapshot.placeholder_gpus(key, node, resource)
                holds[node] = StarvingHold(key, max(gpus - placeholders, 0), resource)
        return holds

    def held(self, key: GroupKey) -> dict[str, int]:
        """GPUs `key`'s reservation holds per node ({} when it holds none)."""
        reservation = self.reservations.get(key)
        return {} if reservation is None else self._held(reservation)

    def _held(self, reservation: Reservation) -> dict[str, int]:
        """GPUs the reservation holds per node, its own placeholders' included."""
        resource = reservation.resource
        free = {
            node: self.room.free_after_reservations(node).get(resource, 0)
            + self.shared.snapshot.placeholder_gpus(reservation.group, node, resource)
            for node in reservation.nodes
            if node in self.shared.snapshot.nodes
        }
        return hold(reservation, free)

    def starvation_seconds_of(self, spec: GroupSpec, members: Sequence[PodInfo]) -> float:
        """spec.starvationSeconds, else the members' annotation, else the cluster default."""
        own = own_starvation_seconds(spec, members)
        return self.shared.timeouts.starvation_seconds if own is None else own

    def update_reservations(self, now: float) -> None:
        """End reservations whose gang is planned, no longer held or past its bound; start
        one for each starving gang at the head of the queue; plan a gang whose reserved
        GPUs are all free. Called with every expiry pass (each filter, each tick)."""
        for key, reservation in list(self.reservations.items()):
            if reservation.expired(now):
                self.given_up[key] = reservation.nodes
                self.end_reservation(key)
            elif key in self.shared.ledger.plans or not self.queue.is_held(
                key, self.shared.snapshot.members(key)
            ):
                self.end_reservation(key)
        if now - self.starvation_checked >= STARVATION_CHECK_SECONDS:
            self.starvation_checked = now
            for key in self.starving_heads(now):
                try:
                    self._start_reservation(key, now)
                except Exception as err:  # noqa: BLE001 -- held to this gang, as try_plan does
                    state = self.shared.groups.setdefault(key, GroupState())
                    version = self.shared.snapshot.group_version(key)
                    self.shared.fault(key, state, err, version)
        for key, reservation in list(self.reservations.items()):
            state = self.shared.groups.setdefault(key, GroupState())
            held = self._held(reservation)
            spec = self.shared.snapshot.group_spec(key)
            if sum(held.values()) >= reservation.need and spec is not None:
                self.plan_group(key, state, spec, now, queue=False)
                if key in self.shared.ledger.plans:
                    continue
            before = state.message
            if say(state, HoldReason.RESERVING, self.reserving_message(key)) != before:
                self.shared.touched.add(key)
        self.sync_holds(now)

    def starving_heads(self, now: float) -> list[GroupKey]:
        """Held gangs without a plan or reservation that waited past their
        starvationSeconds and have no held gang ahead wanting their nodes."""
        found: set[GroupKey] = set()
        known = {*self.shared.groups, *self.queue.unasked}
        for key in [k for k in self.held_since if k not in known]:
            del self.held_since[key]
        for key in [k for k in self.given_up if k not in known]:
            del self.given_up[key]
        for kept in (self.starving_inputs, self.queue.fits_when_empty):
            for key in [k for k in kept if k not in known]:
                del kept[key]
        for key in sorted(known - set(self.reservations)):
            if key in self.shared.ledger.plans:
                continue  # its wait goes on if the plan is dropped
            held, limit = self._held_and_limit(key)
            if not held:
                self.held_since.pop(key, None)
                continue
            since = self.held_since.setdefault(key, now)
            state = self.shared.groups.get(key)
            if state is not None and now < state.retry_after:
                continue
            fault = state.fault if state is not None else None
            if fault is not None and fault[0] == self.shared.snapshot.group_version(key):
                continue  # faulted and unchanged since: not tried again (`GangPlanning.try_plan`)
            if state is not None and state.hold is HoldReason.ADMISSION_WINDOW:
                # Waiting its turn behind the admission gate, not for room: reserving
                # nodes would only fence them from the gangs kube-scheduler is binding.
                continue
            if starving(since, now, limit):
                found.add(key)
        if not found:
            return []
        # A starving gang that overlaps a gang ahead but would not fit even on empty
        # nodes is no head either: no reservation could hold it.
        return self.queue.held_queue_view().heads(found, len(self.shared.snapshot.nodes))

    def _held_and_limit(self, key: GroupKey) -> tuple[bool, float]:
        """Whether the unplanned group `key` is held, and its starvationSeconds. Both read
        only its members and PodGroup (and the cluster default), so what they read is
        kept until the group's version moves: the once-a-second look for starving gangs
        then costs a lookup per held gang."""
        version = self.shared.snapshot.group_version(key)
        cached = self.starving_inputs.get(key)
        if cached is None or cached[0] != version:
            members = self.shared.snapshot.members(key)
            spec = self.shared.snapshot.group_spec(key)
            held = spec is not None and self.queue.is_held(key, members)
            own = own_starvation_seconds(spec, members) if held and spec is not None else None
            cached = self.starving_inputs[key] = (version, held, own)
        _, held, own = cached
        return held, self.shared.timeouts.starvation_seconds if own is None else own

    def _start_reservation(self, key: GroupKey, now: float) -> None:
        spec = self.shared.snapshot.group_spec(key)
        members = self.shared.snapshot.members(key)
        if spec is None:
            return
        choice = choose_members(
            members, min_member=spec.min_member, task_minimums=spec.min_task_member
        )
        if isinstance(choice, MembersMissing):
            return
        snapshot = self.shared.snapshot
        resource = snapshot.accelerators.main(m.requests for m in members)
        pending = min(
            ([m for m in chosen if not m.is_bound] for chosen in choice.attempts),
            key=lambda chosen: sum(m.requests.get(resource, 0) for m in chosen),
        )
        need = sum(m.requests.get(resource, 0) for m in pending)
        taken = {node for r in self.reservations.values() for node in r.nodes}
        # The held view's wanted nodes: `starving_heads` just computed this gang's shapes.
        eligible = self.queue.held_queue_view().wanted.of_gang(pending) - taken
        gpus = {
            node: NodeGpus(
                capacity=snapshot.nodes[node].allocatable.get(resource, 0),
                free=max(self.room.free_after_reservations(node).get(resource, 0), 0),
            )
            for node in eligible
        }

        def holds(nodes: Sequence[str]) -> bool:
            empty = {n: dict(self.shared.snapshot.nodes[n].allocatable) for n in nodes}
            placed = plan_gang(
                pending,
                empty,
                snapshot.nodes,
                self.shared.policy,
                accelerators=snapshot.accelerators,
            )
            return isinstance(placed, Placement)

        nodes = choose_nodes(need, gpus, holds=holds, avoid=self.given_up.get(key, ()))
        if nodes is None:
            return
        self.reservations[key] = Reservation(
            group=key,
            nodes=nodes,
            need=need,
            started=now,
            deadline=now + self.shared.timeouts.reservation_max_seconds,
            resource=resource,
        )
        self.shared.groups.setdefault(key, GroupState())
        self._forget_shortfalls()

    def end_reservation(self, key: GroupKey) -> None:
        if self.reservations.pop(key, None) is not None:
            self.shared.touched.add(key)
            self._forget_shortfalls()

    def _forget_shortfalls(self) -> None:
        """Held GPUs changed hands: every memoised 'does not fit' may be wrong now."""
        self.shared.shortfalls.forget_all()
        for state in self.shared.groups.values():
            state.shortfall_generation = None

    def reserving_message(self, key: GroupKey) -> str:
        reservation = self.reservations[key]
        spec = self.shared.snapshot.group_spec(key)
        members = self.shared.snapshot.members(key)
        seconds = self.starvation_seconds_of(spec, members) if spec is not None else 0.0
        message = (
            f"gang {key}: {reservation_message(reservation, self._held(reservation))}; "
            f"it has waited longer than its starvationSeconds ({seconds:g} s), so nothing "
            "else of this scheduler takes a GPU that frees there until it fits"
        )
        if not self.shared.switches.fences:
            return message
        if self.fence_tolerated(key):
            return (
                f"{message}; the nodes are tainted {FENCE_TAINT_KEY}:NoSchedule, so no "
                "other scheduler places a pod there meanwhile"
            )
        return (
            f"{message}; the nodes are not fenced: a pending member lacks the "
            f"{FENCE_TAINT_KEY} toleration (the webhook adds it in labelled namespaces)"
        )

    def starving_refusal(self, pod: PodInfo, node: str, held: StarvingHold) -> str:
        """Why a plain pod may not take a GPU a starving gang holds on `node` ("" if it may)."""
        owner, gpus, resource = held
        want = pod.requests.get(resource, 0)
        if want <= 0:
            return ""  # it asks another accelerator than the one held here
        free = self.room.free_after_reservations(node).get(resource, 0) - gpus
        if want <= free:
            return ""
        gpus += self.shared.snapshot.placeholder_gpus(owner, node, resource)
        return (
            f"{gpus} free {resource} on {node} are reserved for gang {owner}, which has "
            "waited longer than its starvationSeconds; nothing else is placed there "
            "until it fits"
        )

    # ------------------------------------------------------ placeholder pods, fences

    def sync_holds(self, now: float) -> None:
        """Make the placeholder pods and the fence taints match the reservations."""
        self._sync_placeholders(now)
        self._sync_fences(now)

    def fence_tolerated(self, key: GroupKey) -> bool:
        """Every pending member of `key` tolerates its fence (else it would fence itself out)."""
        pending = [
            m for m in self.shared.snapshot.members(key) if not m.is_bound and not m.deleting
        ]
        return bool(pending) and all(tolerates_fence(m.tolerations, key) for m in pending)

    def keep_fence_for(self, plan: Plan) -> None:
        """The gang is planned from its reservation: its fence stays on the planned nodes
        it reserved until this plan is bound or dropped, so no other scheduler takes a
        GPU between the placeholders' deletion and the binding."""
        reservation = self.reservations.get(plan.group)
        if (
            not self.shared.switches.fences
            or reservation is None
            or not self.fence_tolerated(plan.group)
        ):
            return
        nodes = frozenset(reservation.nodes) & set(plan.placements.values())
        if nodes:
            self.fenced_plans[plan.group] = (plan, nodes)

    def _sync_fences(self, now: float) -> None:
        """Ask for the taint writes that make the fenced nodes match the reservations."""
        if (
            not self.shared.switches.fences
            and not self.shared.snapshot.fences
            and not self.fence_requests
        ):
            return
        for key, (plan, _) in list(self.fenced_plans.items()):
            if self.shared.ledger.plans.get(key) is not plan:
                del self.fenced_plans[key]  # bound, or dropped
        fenced: dict[GroupKey, Collection[str]] = {}
        if self.shared.switches.fences:
            fenced = {
                key: reservation.nodes
                for key, reservation in self.reservations.items()
                if self.fence_tolerated(key)
            }
            for key, (_, nodes) in self.fenced_plans.items():
                fenced.setdefault(key, nodes)
        observed = self.shared.snapshot.fences
        # A write the watch shows done is forgotten; one not seen is asked again later.
        for node, value in list(self.fence_requests):
            if observed.get(node, "") == value:
                del self.fence_requests[(node, value)]
        for change in changes(desired_fences(fenced, self.shared.snapshot.nodes), observed):
            asked_for = (change.node, change.value if isinstance(change, FenceNode) else "")
            asked = self.fence_requests.get(asked_for)
            if asked is not None and now - asked < PLACEHOLDER_RETRY_SECONDS:
                continue
            self.fence_requests[asked_for] = now
            self.shared.effects.append(change)

    def _sync_placeholders(self, now: float) -> None:
        """Ask for the placeholder creates and deletes that make the pods match the holds."""
        if not self.shared.switches.placeholders and not self.shared.snapshot.placeholders:
            return
        holds: dict[GroupKey, dict[str, int]] = {}
        resources: dict[GroupKey, str] = {}
        for key, reservation in (
            self.reservations.items() if self.shared.switches.placeholders else ()
        ):
            held = self._held(reservation)
            resource = resources[key] = reservation.resource
            # Never fewer than its placeholders there: a node over-committed by a pod
            # another scheduler bound at the same moment shows less free, and giving a
            # placeholder back would only hand its GPU to the next such pod.
            holds[key] = {
                node: max(
                    held.get(node, 0), self.shared.snapshot.placeholder_gpus(key, node, resource)
                )
                for node in reservation.nodes
            }
        observed = [
            ObservedPlaceholder(
                group=p.placeholder_for,
                name=p.name,
                node=p.node_name,
                gpus=self.shared.snapshot.accelerators.amount(p.requests),
                active=p.holds_capacity,
                deleting=p.deleting,
            )
            for p in self.shared.snapshot.placeholders.values()
            if p.placeholder_for is not None
        ]
        # A create asked for and not seen yet counts as there (its GPUs are not asked
        # for twice under another name), until it is due to be asked again.
        seen = {p.name for p in observed}
        for name, (asked, create) in list(self.placeholder_creating.items()):
            if name in seen:
                del self.placeholder_creating[name]
            elif now - asked >= PLACEHOLDER_RETRY_SECONDS:
                del self.placeholder_creating[name]  # never seen: failed, or gone at once
                self.placeholder_gone(create.group, now)
            else:
                observed.append(
                    ObservedPlaceholder(
                        create.group, name, create.node, create.gpus, active=True, deleting=False
                    )
                )
        for effect in diff(desired(holds), observed):
            if isinstance(effect, PlaceholderCreate):
                # A placeholder requests the reservation's own accelerator resource.
                effect = replace(effect, resource=resources.get(effect.group, effect.resource))
                self.placeholder_creating[effect.name] = (now, effect)
            else:
                deleted_at = self.placeholder_requests.get(("delete", effect.name))
                if deleted_at is not None and now - deleted_at < PLACEHOLDER_RETRY_SECONDS:
                    continue
                self.placeholder_requests[("delete", effect.name)] = now
            self.shared.effects.append(effect)

    def freed_on(self, node: str | None, now: float) -> None:
        """A pod stopped holding capacity on `node`: a reserved node's freed GPUs are
        held (and their placeholder asked for) now, not at the next tick, since another
        scheduler with pods pending reacts to the same event at once."""
        if node is not None and any(node in r.nodes for r in self.reservations.values()):
            self.update_reservations(now)

    def placeholders_on(self, group: GroupKey, nodes: Collection[str]) -> bool:
        """The watch still has a placeholder pod of `group` on one of `nodes`, or one
        asked for is not seen yet (its create may still land there)."""
        return any(
            p.placeholder_for == group and p.node_name in nodes
            for p in self.shared.snapshot.placeholders.values()
        ) or any(
            create.group == group and create.node in nodes
            for _, create in self.placeholder_creating.values()
        )
