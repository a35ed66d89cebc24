"""Steps 1-3 of the filter, and a plain pod's filter: the order is written in domain/gang/gang.py.

Pure; a part of `GangCore`. A pod the watch has not delivered is answered from the
request and nothing is kept; a plain pod gets every candidate it fits on beside the
plans' reservations and the starving gangs' holds; a gang member is rejected for a
misdeclared group, answered from its gang's plan, or handed to the planning steps
(domain/gang/gang_planning.py). What kube-scheduler offered a member is kept as its
last word on where the member may go (`restrictions`) and, for the bind check, as
what this filter offered it (`BindBarrier.offered`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import filterfalse

from extender.domain.cluster.ledger import Plan
from extender.domain.cluster.snapshot import fits
from extender.domain.gang.gang_barrier import BindBarrier
from extender.domain.gang.gang_planning import GangPlanning
from extender.domain.objects.limits import clip, listing
from extender.domain.objects.model import PodInfo
from extender.domain.planning.restrictions import RESTRICTION_MEMORY_LIMIT, learnt_now
from extender.domain.starvation.gang_starvation import StarvationReservations
from extender.domain.state.decisions import FilterDecision, Verdict
from extender.domain.state.gang_room import GangRoom
from extender.domain.state.gang_state import GroupState, HoldReason, SharedState, say


class GangFilter:
    """The filter verb: steps 1-3, then the planning part's 4-8.

    Given the core's `expire` (run before a known pod is answered).
    """

    def __init__(
        self,
        shared: SharedState,
        *,
        planning: GangPlanning,
        room: GangRoom,
        starvation: StarvationReservations,
        barrier: BindBarrier,
        expire: Callable[[float], None],
    ) -> None:
        self.shared = shared
        self.planning = planning
        self.room = room
        self.starvation = starvation
        self.barrier = barrier
        self.expire = expire

    def filter(
        self, pod: PodInfo, candidates: Sequence[str], now: float, nominated: str | None = None
    ) -> FilterDecision:
        """`nominated`: the `status.nominatedNodeName` of the pod kube-scheduler sent."""
        nominated_alone = _nominated_alone(nominated, candidates)
        self.shared.catch_up_unseen(now, seen=candidates, broad=not nominated_alone)
        known = self.shared.snapshot.pods.get(pod.uid)
        if known is None:
            return self._filter_unknown(pod, candidates, now)
        # the watch's copy, always
        decision = self._filter_known(known, candidates, now, nominated_alone=nominated_alone)
        nodes = decision.nodes
        self.barrier.offered[pod.uid] = (
            frozenset(nodes) if len(nodes) <= RESTRICTION_MEMORY_LIMIT else None
        )
        return decision

    def _filter_unknown(
        self, pod: PodInfo, candidates: Sequence[str], now: float
    ) -> FilterDecision:
        """A pod the watch has not delivered: answered, and nothing about it kept.

        A plain pod is filtered on its request's figures (an answer changes no state;
        its bind is refused until the watch has it). A gang member is held: it cannot
        count toward a quorum before the watch says it exists. When its group already
        has members in the cache, kube-scheduler's interest is noted, so the member's
        arrival from the watch re-plans the group (`group_changed`).
        """
        if pod.group is None and pod.group_error is None:
            return self._filter_plain(pod, candidates)
        if pod.group is not None and self.shared.snapshot.members(pod.group):
            self.shared.groups.setdefault(pod.group, GroupState())
        return self._hold(
            candidates,
            Verdict.WAIT,
            f"pod {pod.ref} is not in gang-extender's watch cache yet; held until it is",
        )

    def _filter_known(
        self, pod: PodInfo, candidates: Sequence[str], now: float, *, nominated_alone: bool
    ) -> FilterDecision:
        self.expire(now)
        if pod.group is None and pod.group_error is None:
            return self._filter_plain(pod, candidates)
        if pod.group_error is not None:
            return self._hold(candidates, Verdict.REJECT, pod.group_error)
        assert pod.group is not None
        key = pod.group
        if not nominated_alone:  # a word on one node, not a refusal of the others
            self._remember_candidates(pod.uid, candidates)
        state = self.shared.groups.setdefault(key, GroupState())
        spec = self.shared.snapshot.group_spec(key)
        if spec is None:
            return self._hold(
                candidates,
                Verdict.WAIT,
                say(
                    state,
                    HoldReason.NO_PODGROUP,
                    f"gang {key}: no PodGroup {key.name} and no gang-extender.io/min-available "
                    "annotation; create the PodGroup or annotate the pods",
                ),
            )
        if spec.error is not None:
            # Waiting for its spec to be fixed (or an aborted group to be released): the
            # fix plans it at once (`group_changed`), whatever the group did before.
            state.waiting = True
            return self._hold(
                candidates,
                Verdict.REJECT,
                say(state, HoldReason.INVALID_SPEC, f"gang {key}: {spec.error}"),
            )

        plan = self.shared.ledger.plans.get(key)
        if nominated_alone:
            return self._nominated_answer(plan, pod, candidates[0])
        if plan is not None:
            node = plan.placements.get(pod.uid) if pod.uid not in plan.lost else None
            if node is None or node in candidates:
                return self._planned_answer(plan, pod, candidates)
            if plan.released:
                return self._hold(
                    candidates, Verdict.WAIT, self._released_elsewhere(plan, pod, now)
                )
            if self.starvation.placeholders_on(key, {node}):
                # kube-scheduler counts the gang's own placeholder there until the
                # watch tells it the placeholder is gone; then it offers the node.
                return self._hold(
                    candidates,
                    Verdict.WAIT,
                    f"gang {key}: {pod.ref} waits for the placeholder pods on its planned "
                    f"node {node} to be deleted",
                )
            if self.shared.unseen_nodes.unseen(node):
                return self._hold(candidates, Verdict.WAIT, self._not_seen_yet(plan, pod, node))
            evicting = plan.victims_still_on(node, self.shared.snapshot.pods, now)
            if evicting:
                # kube-scheduler counts the victims until their deletion reaches it, so
                # its own filters refuse the node meanwhile: the plan keeps its room (the
                # hold's deadline, preemption_hold_seconds, bounds the wait), and the
                # victims' deletion requeues the member in kube-scheduler's queue.
                return self._hold(
                    candidates,
                    Verdict.WAIT,
                    f"gang {key}: {pod.ref} waits for the evictions of {listing(evicting)} "
                    f"on its planned node {node} to finish",
                )
            self.shared.drop(
                plan,
                f"kube-scheduler no longer offers planned node {node} for {pod.ref}",
                now,
            )
            return self._hold(candidates, Verdict.WAIT, self.shared.groups[key].message)

        outcome = self.planning.try_plan(key, state, spec, now, asking=pod, candidates=candidates)
        if isinstance(outcome, str):
            return self._hold(candidates, Verdict.WAIT, outcome)
        return self._planned_answer(outcome, pod, candidates)

    def _nominated_answer(self, plan: Plan | None, pod: PodInfo, nominated: str) -> FilterDecision:
        """kube-scheduler checked the pod's nominated node alone, before any other
        (`findNodesThatFitPod`): the planned node, once the planned-node write has set it.

        A nomination left from an older plan, or one the write has not cleared yet, is
        refused without dropping or making a plan: kube-scheduler goes on to ask about
        every node in the same attempt, and that answer decides.
        """
        if (
            plan is not None
            and pod.uid not in plan.lost
            and plan.placements.get(pod.uid) == nominated
        ):
            return self._planned_answer(plan, pod, [nominated])
        planned = (
            f"planned on {plan.placements[pod.uid]}"
            if plan is not None and pod.uid in plan.placements
            else "not planned there"
        )
        return self._hold(
            [nominated],
            Verdict.WAIT,
            f"gang {pod.group}: {pod.ref} is nominated on {nominated} but {planned}; "
            "kube-scheduler asks about the other nodes next",
        )

    def _released_elsewhere(self, plan: Plan, pod: PodInfo, now: float) -> str:
        """A released member whose planned node kube-scheduler does not offer now.

        Its reservation is kept (the others may be bound): kube-scheduler's filters
        may reject the node for a while. A node that is gone is a loss for the gang.
        """
        node = plan.placements[pod.uid]
        if node not in self.shared.snapshot.nodes:
            self.barrier.lose(plan, pod.uid, f"its planned node {node} is gone", now)
            return self.shared.groups[plan.group].message
        return (
            f"gang {plan.group}: {pod.ref} keeps its reservation on {node}, which "
            "kube-scheduler does not offer now; waiting for it"
        )

    def _planned_answer(
        self, plan: Plan, pod: PodInfo, candidates: Sequence[str]
    ) -> FilterDecision:
        """The pod's planned node; a member the plan left out waits for the next one."""
        node = plan.placements.get(pod.uid)
        if node is None:
            return self._hold(
                candidates,
                Verdict.WAIT,
                f"gang {plan.group}: being placed without this member; it is scheduled after",
            )
        if node not in candidates:  # planned where kube-scheduler has not seen the node yet
            return self._hold(candidates, Verdict.WAIT, self._not_seen_yet(plan, pod, node))
        return FilterDecision(Verdict.PLANNED, [node], {}, {}, f"planned on {node}")

    @staticmethod
    def _not_seen_yet(plan: Plan, pod: PodInfo, node: str) -> str:
        return (
            f"gang {plan.group}: {pod.ref} is planned on {node}, which joined or changed "
            "just now and kube-scheduler has not offered yet; waiting for it to"
        )

    def _remember_candidates(self, uid: str, candidates: Sequence[str]) -> None:
        candidates = self.shared.unseen_nodes.offered_or_unseen(
            candidates, self.shared.snapshot.nodes
        )
        before = self.shared.restrictions.get(uid)
        total = len(self.shared.snapshot.nodes)
        if len(candidates) >= total:
            self.shared.restrictions.pop(uid, None)
        elif len(candidates) <= RESTRICTION_MEMORY_LIMIT:
            self.shared.restrictions[uid] = learnt_now(
                self.shared.snapshot, allowed=frozenset(candidates)
            )
        elif total - len(candidates) <= RESTRICTION_MEMORY_LIMIT:
            offered = set(candidates)
            denied = frozenset(n for n in self.shared.snapshot.nodes if n not in offered)
            self.shared.restrictions[uid] = learnt_now(self.shared.snapshot, denied=denied)
        else:
            self.shared.restrictions.pop(uid, None)
        if self.shared.restrictions.get(uid) != before:
            self.shared.restrictions_version += 1

    def _filter_plain(self, pod: PodInfo, candidates: Sequence[str]) -> FilterDecision:
        """Candidates minus the nodes where the pod does not fit beside the plans' and the
        starving gangs' holds.

        Costs the reserved and held nodes, not the candidates, in Python: the candidates
        (every node of the cluster) are only passed through C-level `filter`.
        """
        refusals = {
            name: f"capacity on {name} is reserved for gang "
            + listing(str(g) for g in self.shared.ledger.owners(name))
            for name in self.shared.ledger.reserved_nodes()
            if not fits(pod.requests, self.room.free_after_reservations(name))
        }
        if self.shared.snapshot.accelerators.asked(pod.requests):
            for name, held in self.starvation.starving_holds().items():
                if name not in refusals:
                    why = self.starvation.starving_refusal(pod, name, held)
                    if why:
                        refusals[name] = why
        if not refusals:
            return FilterDecision(Verdict.NOT_A_GANG, list(candidates), {}, {})
        nodes = list(filterfalse(refusals.__contains__, candidates))
        failed = {name: refusals[name] for name in filter(refusals.__contains__, candidates)}
        return FilterDecision(Verdict.NOT_A_GANG, nodes, failed, {})

    def _hold(self, candidates: Sequence[str], verdict: Verdict, message: str) -> FilterDecision:
        """Every candidate refused with one reason: the same string object for each node
        (no per-node copy here), cut to MAX_REASON_CHARS since kube-scheduler is sent
        it once per node."""
        message = clip(message)
        return FilterDecision(verdict, [], {}, dict.fromkeys(candidates, message), message)


def _nominated_alone(nominated: str | None, candidates: Sequence[str]) -> bool:
    """Whether kube-scheduler is checking the pod's nominated node alone: it does so
    before it scans the other nodes, so the one name is not its word on those."""
    return nominated is not None and len(candidates) == 1 and candidates[0] == nominated
