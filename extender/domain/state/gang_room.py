"""The room a gang is planned on, and the memo of the held gangs that do not fit it.

Pure. A part of `GangCore` (domain/gang/gang.py), like the other domain/*/gang_*.py
modules: every node's free capacity for planning a group (after the plans'
reservations, without the GPUs other starving gangs hold, with the group's own
placeholder pods counted as its room), and step 5 of the filter: a held gang
known not to fit stays held, without a plan, until something that could help it
changes (domain/planning/shortfalls.py per gang, else the global planning generation).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from extender.domain.cluster.snapshot import add_into
from extender.domain.objects.membership import GroupKey
from extender.domain.objects.model import GroupSpec, PodInfo, Resources
from extender.domain.objects.policy import default_topology
from extender.domain.planning.node_order import NodeOrder
from extender.domain.planning.scoring import NodeScoreBoard
from extender.domain.planning.shortfalls import NodeChange
from extender.domain.state.gang_state import GroupState, SharedState, StarvingHold

# Per node, the starving gang holding free GPUs there and how many (`starving_holds`).
StarvingHolds = Callable[[], dict[str, StarvingHold]]


class GangRoom:
    """Capacity for planning, and the memo of held gangs known not to fit (filter step 5).

    Given the starvation check's holds (`starving_holds`) and reservations
    (`reserving`), and the queue's `holds_a_place`, as callables.
    """

    def __init__(
        self,
        shared: SharedState,
        *,
        starving_holds: StarvingHolds,
        reserving: Callable[[GroupKey], bool],
        holds_a_place: Callable[[GroupKey], bool],
    ) -> None:
        self.shared = shared
        self.starving_holds = starving_holds
        self.reserving = reserving
        self.holds_a_place = holds_a_place
        # Prioritize's per-node scores, rescored only where capacity changed.
        self.score_board = NodeScoreBoard()
        # The lowest priority holding capacity at the last `absorb_changes`: a drop
        # below a memoised gang's priority gives it something to preempt.
        self.lowest_priority_seen: int | None = None

    # -------------------------------------------------------------- capacity
    def free_after_reservations(self, node: str) -> Resources:
        free = self.shared.snapshot.free(node)
        for name, value in self.shared.ledger.reserved(node).items():
            free[name] = free.get(name, 0) - value
        return free

    def free_for_planning(self, group: GroupKey | None = None) -> dict[str, Resources]:
        """Every node's free capacity for planning `group`: after the plans' reservations
        (kept by the board where it changed), and without the GPUs other starving gangs hold.

        Read-only per node: the planner copies a node's room before placing on it, and a
        node whose room a hold lessens gets a room of its own here.
        """
        return self.planning_room(group)[0]

    def planning_room(
        self, group: GroupKey | None = None
    ) -> tuple[dict[str, Resources], NodeOrder]:
        """`free_for_planning`, and its nodes in the planner's order (domain/planning/node_order.py):
        the board's, with the few nodes whose room a hold or a placeholder changes moved."""
        board = self.score_board
        free = board.free_capacity(self.shared.snapshot, self.shared.ledger, self.shared.policy)
        changed: dict[str, Resources] = {}
        for node, (owner, gpus, resource) in self.starving_holds().items():
            if owner != group and node in free:
                room = dict(free[node])
                room[resource] = room.get(resource, 0) - gpus
                free[node] = changed[node] = room
        # The group's own placeholder pods hold its room: free for it, for nobody else.
        for placeholder in self.shared.snapshot.placeholders.values():
            at = placeholder.node_name
            if placeholder.placeholder_for == group and placeholder.holds_capacity and at in free:
                room = dict(free[at])
                add_into(room, placeholder.requests)
                free[at] = changed[at] = room
        order = board.planning_order(self.shared.snapshot, self.shared.ledger, self.shared.policy)
        return free, order.with_rooms(changed.items())

    # ------------------------------------------------- the memo of shortfalls
    def planning_inputs(self) -> tuple[int, int]:
        """What a held gang's "does not fit" is memoised on when `shortfalls` does not
        cover it: changes to nodes, capacity, group members and PodGroups
        (snapshot.planning_generation), and to plans."""
        return (self.shared.snapshot.planning_generation, self.shared.ledger.generation)

    def shortfall_holds(self, key: GroupKey, state: GroupState) -> bool:
        """The gang did not fit, and nothing that could change that happened since; nor
        did the gang its message names as ahead of it stop holding a place."""
        self.absorb_changes()
        if (
            key not in self.shared.shortfalls
            and state.shortfall_generation != self.planning_inputs()
        ):
            return False
        return state.behind is None or self.holds_a_place(state.behind)

    def remember_shortfall(
        self, key: GroupKey, spec: GroupSpec, members: Sequence[PodInfo], priority: int
    ) -> None:
        """Memoise `key`'s "does not fit" per gang (domain/planning/shortfalls.py), unless it is
        starving (its placeholders are its own room) or could preempt something."""
        if self.reserving(key):
            return
        lowest = self.shared.snapshot.lowest_holding_priority()
        if self.shared.switches.preemption and lowest is not None and lowest < priority:
            return
        topology = spec.topology or next(
            (m.topology for m in members if m.topology is not None), None
        )
        if topology is None:
            topology = default_topology(self.shared.policy)
        self.shared.shortfalls.remember(
            key,
            (m for m in members if not m.is_bound),
            topology=bool(topology.required or topology.preferred),
            priority=priority,
        )

    def absorb_changes(self) -> None:
        """Forget the memoised shortfalls that what changed since the last look could end.

        Drains the snapshot's changed groups and relabelled nodes, and the score
        board's room changes, whether or not anything is memoised (they are only
        ever read here).
        """
        snapshot = self.shared.snapshot
        board = self.score_board
        board.refresh(snapshot, self.shared.ledger, self.shared.policy)
        rooms = board.drain_room_changes()
        groups, snapshot.groups_changed = snapshot.groups_changed, set()
        relabelled, snapshot.relabelled = snapshot.relabelled, set()
        replaced, snapshot.replaced = snapshot.replaced, False
        lowest = snapshot.lowest_holding_priority() if self.shared.switches.preemption else None
        dropped = lowest is not None and (
            self.lowest_priority_seen is None or lowest < self.lowest_priority_seen
        )
        self.lowest_priority_seen = lowest
        if not self.shared.shortfalls:
            return
        if rooms is None or replaced:
            forgotten = self.shared.shortfalls.forget_all()
        else:
            forgotten = {key for key in groups if self.shared.shortfalls.forget(key)}
            merged: dict[str, tuple[Resources | None, Resources | None]] = {}
            for name, before, after in rooms:
                first = merged.get(name)
                merged[name] = (first[0] if first is not None else before, after)
            changes = [
                NodeChange(name, before, after, snapshot.nodes.get(name), name in relabelled)
                for name, (before, after) in merged.items()
            ]
            forgotten |= self.shared.shortfalls.absorb(
                changes, lowest_priority=lowest if dropped else None
            )
        for key in forgotten:
            state = self.shared.groups.get(key)
            if state is not None:
                state.shortfall_generation = None
