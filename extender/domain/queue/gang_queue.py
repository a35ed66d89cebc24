"""Queue order, a part of `GangCore`: which held gangs go first, and whom a gang waits behind.

Pure; a part of `GangCore` (domain/gang/gang.py, filter step 6), over the order of
domain/planning/queue.py. Before a gang is planned, every held gang ahead of it that fits
now is planned first (`plan_gangs_ahead`, by the filter's own steps 4-7); one
that cannot blocks no one (backfill). A gang that does not fit is told whom it
waits behind: the first gang ahead whose plan holds the room it lacks
(`waiting_behind`), else the first held gang ahead that wants its nodes
(`gang_ahead_of`, also read by the status writer and the starvation check).
It and the starvation check read one view of the held gangs in queue order
(`held_queue_view`, over domain/queue/held_queue.py), rebuilt only for the groups that changed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from extender.domain.objects.membership import GroupKey
from extender.domain.objects.model import PodInfo, Resources
from extender.domain.planning.planner import NodeRestriction, Placement, member_order, plan_gang
from extender.domain.planning.queue import QueueRank, gangs_ahead, rank_of
from extender.domain.planning.restrictions import CurrentRestrictions
from extender.domain.planning.selection import MembersMissing, choose_members
from extender.domain.planning.shortfalls import MemberShape
from extender.domain.queue.held_queue import HeldEntry, HeldQueue, WantedNodes, held_queue
from extender.domain.state.gang_state import GroupState, PlanGroup, SharedState

# The most held gangs ahead one call tries to plan (each a plan, a victim search
# when preemption is on): the work of one filter or watch event stays bounded. At
# 1,000 nodes full of lower-priority pods, trying all 999 gangs ahead of one took
# 27.7 s of the event loop; 16 took 0.8 s (docs/benchmarks.md round 16).
GANGS_AHEAD_TRIED_PER_CALL = 16


class QueueOrder:
    """Queue order (filter step 6) and the held gangs ahead of a gang.

    Given the room's `absorb_changes` (what changed since the last look) and the
    filter's planning steps (`plan_group`) for the gangs ahead it plans first.
    """

    def __init__(
        self,
        shared: SharedState,
        *,
        absorb_changes: Callable[[], None],
        plan_group: PlanGroup,
    ) -> None:
        self.shared = shared
        self.absorb_changes = absorb_changes
        self.plan_group = plan_group
        # Groups with a pending, ungated member kube-scheduler has not asked about yet:
        # they join the queue (`groups`) when a gang behind them is tried, since
        # kube-scheduler never asks the extender about a pod its own filters place
        # nowhere (every GPU taken), and a gang created then must still go first.
        self.unasked: set[GroupKey] = set()
        # Per group: whether it would fit on the empty nodes it wants (gang_ahead_of),
        # with the inputs that was computed on (its version, nodes, kube-scheduler's
        # last word).
        self.fits_when_empty: dict[GroupKey, tuple[tuple[int, int, int], bool]] = {}
        # The same answer per demand shape (`demand_shape`), for the nodes as of
        # `fits_by_shape_nodes`: after a node change every held gang asks again, and
        # gangs of one template (the common case) share one plan on the empty nodes.
        self.fits_by_shape: dict[object, bool] = {}
        self.fits_by_shape_nodes = -1
        # The held gangs in queue order (domain/queue/held_queue.py), rebuilt when an entry,
        # the nodes or kube-scheduler's last word changed; each group's entry (its rank
        # and members if held, None if not) kept with the group version and plan state
        # it was computed from, so a member event recomputes one entry, not every group's.
        self.held_view: HeldQueue | None = None
        self.held_view_inputs: tuple[int, int] = (-1, -1)
        self.held_entries: dict[GroupKey, tuple[tuple[int, int, bool], HeldEntry | None]] = {}
        # The groups whose kept entry was computed with a plan: its plan may have gone since.
        self.held_planned: set[GroupKey] = set()

    def plan_gangs_ahead(self, rank: QueueRank, now: float) -> list[QueueRank]:
        """Try every held gang ahead of `rank`, in queue order; every gang ahead of it.

        A gang ahead that fits now is planned here, before the one asking takes the
        room; one that cannot (short of room, of members, or backing off) blocks no
        one. At most `GANGS_AHEAD_TRIED_PER_CALL` are tried, the first in order: the
        rest are tried by their own members' calls (and by later ones), as backfill.
        Each is memoised by its own shortfall generation, so an event costs O(1)
        per held gang ahead unless capacity changed. They are tried with
        `queue=False`: the gangs ahead of each were tried just before it, in order.
        """
        for key in self.unasked:
            # Still pending: its members may have been bound since (gated ones never
            # enter `unasked`, `observe_pod`).
            if key not in self.shared.groups and any(
                not m.is_bound for m in self.shared.snapshot.members(key)
            ):
                self.shared.groups[key] = GroupState()
        self.unasked.clear()
        self.absorb_changes()
        ranks = []
        # Memoised gangs do not fit, and nothing since could change that: left out by a
        # set difference, not looked at one by one (most held gangs are memoised).
        for key in self.shared.groups.keys() - self.shared.shortfalls.keys():
            state = self.shared.groups[key]
            if state.rank is None:
                state.rank = rank_of(key, self.shared.snapshot.members(key))
            ranks.append(state.rank)
        ahead = gangs_ahead(rank, ranks)
        tried = 0
        for other in ahead:
            if tried == GANGS_AHEAD_TRIED_PER_CALL:
                break
            state = self.shared.groups[other.key]
            if not state.waiting or other.key in self.shared.ledger.plans:
                continue
            spec = self.shared.snapshot.group_spec(other.key)
            if spec is None or spec.error is not None:
                continue
            tried += 1
            self.plan_group(other.key, state, spec, now, queue=False)
        return ahead

    def waiting_behind(
        self,
        ahead: Sequence[QueueRank],
        attempts: Sequence[Sequence[PodInfo]],
        free: Mapping[str, Resources],
        allowed: Mapping[str, NodeRestriction],
    ) -> QueueRank | None:
        """The first gang ahead whose plan holds the room this gang lacks, None if none.

        The gang would fit on the capacity reserved for the plans of the gangs ahead
        (their members not bound yet): it waits behind the first of them.
        """
        planned = [r for r in ahead if r.key in self.shared.ledger.plans]
        if not planned:
            return None
        without = {node: dict(resources) for node, resources in free.items()}
        for rank in planned:
            plan = self.shared.ledger.plans[rank.key]
            for uid in plan.unbound:
                node = without.get(plan.placements[uid])
                if node is None:
                    continue
                for name, value in plan.requests[uid].items():
                    node[name] = node.get(name, 0) + value
        for chosen in attempts:
            if isinstance(
                plan_gang(
                    chosen,
                    without,
                    self.shared.snapshot.nodes,
                    self.shared.policy,
                    allowed=allowed,
                    accelerators=self.shared.snapshot.accelerators,
                ),
                Placement,
            ):
                return planned[0]
        return None

    def gang_ahead_of(
        self,
        key: GroupKey,
        members: Sequence[PodInfo] | None = None,
        allowed: Mapping[str, NodeRestriction] | None = None,
    ) -> QueueRank | None:
        """The first held gang ahead of `key` that would use the nodes `key` wants, or None.

        Held: pending, with a quorum of members, and not released (waiting for room,
        or planned and binding). It goes first when room appears there, so `key` waits
        behind it for as long as it is held, not only while its plan holds the room.
        Nodes wanted: those a pending member could ever use (cordon, taints, selector,
        kube-scheduler's last word, a request within the node's allocatable). A gang
        that would not fit even on empty nodes waits behind no one: its shortfall is
        its own. Also for a gang kube-scheduler never asked about (its own filters
        refuse every node): the PodGroup status names the gang ahead all the same.
        """
        # What the status writer asks (the group's own members, kube-scheduler's last
        # word) is kept per inputs: it asks for every held gang on each pass.
        inputs = (
            (
                self.shared.snapshot.group_version(key),
                self.shared.snapshot.nodes_generation,
                self.shared.restrictions_version,
            )
            if members is None and allowed is None
            else None
        )
        members = list(members) if members is not None else self.shared.snapshot.members(key)
        queue = self.held_queue_view()
        wanted = queue.wanted.of_gang(members, allowed)
        ahead = queue.first_ahead_wanting(rank_of(key, members), wanted)
        if ahead is None:
            return None
        kept = self.fits_when_empty.get(key) if inputs is not None else None
        if kept is not None and kept[0] == inputs:
            return ahead if kept[1] else None
        allowed = allowed if allowed is not None else self.current_restrictions()
        fits = self.fits_on_empty_nodes(key, members, wanted, allowed)
        if inputs is not None:
            self.fits_when_empty[key] = (inputs, fits)
        return ahead if fits else None

    def holds_a_place(self, key: GroupKey) -> bool:
        """Others may wait behind `key`: its plan holds room, or it is a held gang."""
        if key in self.shared.ledger.plans:
            return True
        self.held_queue_view()
        kept = self.held_entries.get(key)
        return kept is not None and kept[1] is not None

    def held_queue_view(self) -> HeldQueue:
        """The held gangs in queue order, recomputing only the groups that changed."""
        entries, planned = self.held_entries, self.held_planned
        known = self.shared.groups.keys() | self.unasked
        changed = False
        for key in entries.keys() - known:
            del entries[key]
            planned.discard(key)
            changed = True
        # An entry moves with its group's version or its plan (made, released, dropped):
        # look at the groups the snapshot says moved, every plan's and the new ones (set
        # operations in C), not at every group's stamp: a resync asks once per group.
        moved, self.shared.snapshot.held_changed = self.shared.snapshot.held_changed, set()
        looked = (
            moved | self.shared.ledger.plans.keys() | planned | (known - entries.keys())
        ) & known
        for key in sorted(looked):  # sorted: the same order in every process
            plan = self.shared.ledger.plans.get(key)
            stamp = (
                self.shared.snapshot.group_version(key),
                plan.plan_id if plan is not None else 0,
                plan is not None and plan.released,
            )
            if plan is None:
                planned.discard(key)
            else:
                planned.add(key)
            cached = entries.get(key)
            if cached is not None and cached[0] == stamp:
                continue
            members = self.shared.snapshot.members(key)
            entry = (rank_of(key, members), members) if self.is_held(key, members) else None
            entries[key] = (stamp, entry)
            changed = changed or cached is None or cached[1] != entry
        inputs = (self.shared.snapshot.nodes_generation, self.shared.restrictions_version)
        view = self.held_view
        if view is not None and not changed and inputs != self.held_view_inputs:
            # Only the nodes or kube-scheduler's word moved (every node event does): the
            # queue order stands; only the nodes each gang wants are asked afresh. Sorting
            # the held gangs again made each node event O(held gangs log held gangs).
            self.held_view = view = HeldQueue(
                order=view.order, wanted=self._wanted_nodes(view.wanted, inputs)
            )
            self.held_view_inputs = inputs
        elif view is None or changed:
            wanted = self._wanted_nodes(view.wanted, inputs) if view is not None else None
            held = [entry for _, entry in entries.values() if entry is not None]
            self.held_view = view = held_queue(
                held, self.shared.snapshot.nodes, self.current_restrictions(), wanted=wanted
            )
            self.held_view_inputs = inputs
        return view

    def _wanted_nodes(self, last: WantedNodes, inputs: tuple[int, int]) -> WantedNodes:
        """The wanted-nodes cache for `inputs` (nodes generation, restrictions version):
        `last` itself when neither moved, its per-shape scans when only the restrictions
        did, a new one when a node changed."""
        nodes_generation, restrictions_version = self.held_view_inputs
        if inputs[0] != nodes_generation:
            return WantedNodes(self.shared.snapshot.nodes, self.current_restrictions())
        if inputs[1] != restrictions_version:
            return last.with_restrictions(self.current_restrictions())
        return last

    def current_restrictions(self) -> CurrentRestrictions:
        """kube-scheduler's last word on each member, with the nodes that joined since."""
        return CurrentRestrictions(self.shared.restrictions, self.shared.snapshot)

    def is_held(self, key: GroupKey, members: Sequence[PodInfo]) -> bool:
        plan = self.shared.ledger.plans.get(key)
        if plan is not None:
            return not plan.released
        spec = self.shared.snapshot.group_spec(key)
        if spec is None or spec.error is not None:
            return False
        pending = [m for m in members if not m.is_bound and not m.gated]
        if not pending:
            return False
        choice = choose_members(
            members, min_member=spec.min_member, task_minimums=spec.min_task_member
        )
        return not isinstance(choice, MembersMissing)

    def fits_on_empty_nodes(
        self,
        key: GroupKey,
        members: Sequence[PodInfo],
        nodes: set[str],
        allowed: Mapping[str, NodeRestriction],
    ) -> bool:
        spec = self.shared.snapshot.group_spec(key)
        if spec is None:
            return False
        choice = choose_members(
            members, min_member=spec.min_member, task_minimums=spec.min_task_member
        )
        if isinstance(choice, MembersMissing):
            return False
        pending = [[m for m in chosen if not m.is_bound] for chosen in choice.attempts]
        if self.fits_by_shape_nodes != self.shared.snapshot.nodes_generation:
            self.fits_by_shape.clear()
            self.fits_by_shape_nodes = self.shared.snapshot.nodes_generation
        shape = (frozenset(nodes), tuple(demand_shape(chosen, allowed) for chosen in pending))
        kept = self.fits_by_shape.get(shape)
        if kept is not None:
            return kept
        empty = {name: dict(self.shared.snapshot.nodes[name].allocatable) for name in nodes}
        fits = any(
            isinstance(
                plan_gang(
                    chosen,
                    empty,
                    self.shared.snapshot.nodes,
                    self.shared.policy,
                    allowed=allowed,
                    accelerators=self.shared.snapshot.accelerators,
                ),
                Placement,
            )
            for chosen in pending
        )
        self.fits_by_shape[shape] = fits
        return fits


def demand_shape(members: Sequence[PodInfo], allowed: Mapping[str, NodeRestriction]) -> object:
    """What `plan_gang` reads of `members` (without bound ones, topology or order), as
    a hashable value: two gangs of one shape get the same answer on the same nodes.

    Per member, in the planner's order (`member_order`): what a node must offer it
    (`MemberShape`: requests, nodeSelector, tolerations), its Kueue topology, planned
    node and kube-scheduler's last word; uids and names only key the answer and break
    ties, which that order settles. Members with a planned node are also tried first
    in the order given, so that order is kept too.
    """
    shapes = {
        m.uid: (MemberShape.of(m), m.topology, m.planned_node, allowed.get(m.uid)) for m in members
    }
    return (
        tuple(shapes[m.uid] for m in member_order(members)),
        tuple(shapes[m.uid] for m in members if m.planned_node),
    )
