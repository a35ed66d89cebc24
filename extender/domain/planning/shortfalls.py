"""Held gangs known not to fit, and the cluster changes that can end that.

Pure. `GangPlanning.try_plan` (domain/gang/gang_planning.py) plans a held gang at O(nodes); with
many gangs held, re-planning each of them after every cluster change cost the
service O(held gangs x nodes) per event (1,000 held gangs: 2.7 s of CPU per node
event). A gang that did not fit is remembered here with what could change that:
the shapes of its pending members (requests, nodeSelector, tolerations). Its
memo holds until one of these happens (`ShortfallMemo.absorb`, `forget`):

- its own members or PodGroup change (the core forgets it);
- a node changes where one of those shapes fits the room before or after the
  change (a node no pending member can use, then or now, cannot alter the
  gang's placement: the planner skips it, wherever it sorts);
- for a gang with a topology (required or preferred labels): a node appears,
  goes, is relabelled, or its free GPUs change, since the planner sums a
  domain's free GPUs over every node in it, usable or not;
- with gang preemption on: a pod of lower priority than the gang comes to hold
  capacity (there is something to evict now); such gangs, and starving gangs,
  are not memoised here at all (the core keeps its global memo for them).

Why "before or after": the planner is greedy (best fit decreasing), not exact,
so less room on a node it could use may change its answer too; only a node it
could not use either way is safely irrelevant.

The cost per cluster change is the number of distinct member shapes memoised
(few: a Job's members share one template), not the number of held gangs.
"""

from __future__ import annotations

from collections.abc import Iterable, KeysView, Mapping
from dataclasses import dataclass, field

from extender.domain.cluster.snapshot import fits
from extender.domain.objects.device_choice import DeviceChoice
from extender.domain.objects.membership import GroupKey
from extender.domain.objects.model import NodeInfo, PodInfo, Resources, Toleration
from extender.domain.objects.quantity import CPU, MEMORY, PODS
from extender.domain.planning.planner import node_admits


@dataclass(frozen=True)
class MemberShape:
    """What a node must offer one pending member: room for its requests, its selector
    and tolerations (what `planner.node_accepts` reads)."""

    requests: tuple[tuple[str, int], ...]
    node_selector: tuple[tuple[str, str], ...]
    tolerations: tuple[Toleration, ...]
    # Its device choices (domain/devices/choices.py): what they take depends on the
    # node's devices, so a shape with any is taken to fit every room (never stale).
    choices: tuple[DeviceChoice, ...] = ()

    @classmethod
    def of(cls, pod: PodInfo) -> MemberShape:
        return cls(
            requests=tuple(sorted((k, v) for k, v in pod.requests.items() if v > 0)),
            node_selector=tuple(sorted(pod.node_selector.items())),
            tolerations=pod.tolerations,
            choices=pod.device_choices,
        )

    def fits_room(self, room: Mapping[str, int] | None) -> bool:
        """Its requests fit `room` (None: the node did not exist)."""
        if room is None:
            return False
        return bool(self.choices) or fits(dict(self.requests), room)

    def usable_on(self, node: NodeInfo | None, room: Mapping[str, int] | None) -> bool:
        """It could be placed on `node` with `room` free (cordon, taints, selector too)."""
        if node is None or not self.fits_room(room):
            return False
        return node_admits(node, dict(self.node_selector), self.tolerations)


# Resources no gang's topology capacity counts (`NodeChange.moves_domains`).
_NOT_ACCELERATORS = frozenset({CPU, MEMORY, PODS, "ephemeral-storage"})


@dataclass(frozen=True)
class NodeChange:
    """One node between two looks: its free room (after bound pods and plans) then and
    now (None: absent), whether its labels changed, and the node as it is now."""

    name: str
    room_before: Resources | None
    room_after: Resources | None
    node_after: NodeInfo | None
    relabelled: bool = False

    @property
    def moves_domains(self) -> bool:
        """Can change a topology domain's free-GPU sum or membership.

        A domain's capacity counts a gang's accelerator resource, which the memo does
        not know: any change but to cpu, memory and pods may move it."""
        if self.room_before is None or self.room_after is None or self.relabelled:
            return True
        before, after = self.room_before, self.room_after
        return any(
            before.get(name, 0) != after.get(name, 0)
            for name in before.keys() | after.keys()
            if name not in _NOT_ACCELERATORS
        )


@dataclass
class _Memo:
    shapes: frozenset[MemberShape]
    priority: int


@dataclass
class ShortfallMemo:
    """Gang -> why its "does not fit" still holds; the shapes index answers per change."""

    _memos: dict[GroupKey, _Memo] = field(default_factory=dict)
    _by_shape: dict[MemberShape, set[GroupKey]] = field(default_factory=dict)
    _topology: set[GroupKey] = field(default_factory=set)

    def __contains__(self, key: object) -> bool:
        return key in self._memos

    def __len__(self) -> int:
        return len(self._memos)

    def keys(self) -> KeysView[GroupKey]:
        """The gangs memoised as not fitting (a view: set operations run in C)."""
        return self._memos.keys()

    def remember(
        self, key: GroupKey, pending: Iterable[PodInfo], *, topology: bool, priority: int
    ) -> None:
        """`key` did not fit now; `pending` are its members that a plan would place."""
        self.forget(key)
        memo = _Memo(frozenset(MemberShape.of(p) for p in pending), priority)
        self._memos[key] = memo
        for shape in memo.shapes:
            self._by_shape.setdefault(shape, set()).add(key)
        if topology:
            self._topology.add(key)

    def forget(self, key: GroupKey) -> bool:
        """Drop `key`'s memo (it changed, or was planned); True if it had one."""
        memo = self._memos.pop(key, None)
        if memo is None:
            return False
        for shape in memo.shapes:
            keys = self._by_shape[shape]
            keys.discard(key)
            if not keys:
                del self._by_shape[shape]
        self._topology.discard(key)
        return True

    def forget_all(self) -> set[GroupKey]:
        forgotten = set(self._memos)
        self._memos.clear()
        self._by_shape.clear()
        self._topology.clear()
        return forgotten

    def absorb(
        self, changes: Iterable[NodeChange], *, lowest_priority: int | None = None
    ) -> set[GroupKey]:
        """Forget every memo one of `changes` could end; returns the gangs forgotten.

        `lowest_priority`: with gang preemption on, the lowest priority of a pod that
        holds capacity; a memoised gang above it could now evict something.
        """
        ended: set[GroupKey] = set()
        for change in changes:
            if change.moves_domains:
                ended |= self._topology
            for shape, keys in self._by_shape.items():
                if shape.fits_room(change.room_before) or shape.usable_on(
                    change.node_after, change.room_after
                ):
                    ended |= keys
        if lowest_priority is not None:
            ended |= {k for k, m in self._memos.items() if m.priority > lowest_priority}
        for key in ended:
            self.forget(key)
        return ended
