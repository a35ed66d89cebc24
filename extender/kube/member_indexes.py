"""Who holds which task index in each group: the answers the webhook's index allocator needs.

Two ways to get them, with the same answers (tests/unit/test_member_indexes.py
checks it on random event sequences):

- `ListedGroup`: from scratch, from one list of a group's members (the plain path,
  used while the watch is not caught up);
- `MemberIndex`: kept up to date from the watch cache, one pod at a time, O(1) per
  event (the fast path): (namespace, group) -> (task, index) -> the members showing it.

Both speak `GroupView`. Members are `Member` facts (name, task, index, finished,
terminating), read from pod JSON by `extender.kube.indexes`, its only user, beside
it; pure all the same (no I/O, so `make mutate` covers it); nothing here knows pod
JSON, an API server or a clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

__all__ = ["GroupView", "ListedGroup", "Member", "MemberIndex"]


@dataclass(frozen=True, slots=True)
class Member:
    """One pod of a group, as far as task indexes go."""

    namespace: str
    group: str
    name: str
    task: str
    index: int | None  # None: the pod shows no (readable) task index
    finished: bool  # Succeeded or Failed: its index is free for its replacement
    deleting: bool  # terminating: its controller may already replace it


class GroupView(Protocol):
    """What one group's members say about task indexes."""

    def has_name(self, name: str) -> bool:
        """A member of this name exists (finished or not)."""
        ...

    def live(self, task: str, index: int) -> bool:
        """A member neither finished nor terminating shows `task`[`index`]."""
        ...

    def taken(self, task: str, index: int) -> bool:
        """A member not finished shows `task`[`index`] (a terminating one still counts)."""
        ...

    def holder(self, task: str, index: int, *, other_than: str) -> str | None:
        """The live member showing `task`[`index`] whose name is not `other_than` ("": any).

        Of several (possible only for pods created around the webhook), the
        smallest name, so both ways of answering name the same pod.
        """
        ...


def _live(member: Member) -> bool:
    return not member.finished and not member.deleting


def _holder(members: Iterable[Member], other_than: str) -> str | None:
    names = [m.name for m in members if _live(m) and not (other_than and m.name == other_than)]
    return min(names) if names else None


class ListedGroup:
    """A group's view computed from scratch from a list of its members (the plain path)."""

    def __init__(self, members: Iterable[Member]) -> None:
        self._members = list(members)

    def has_name(self, name: str) -> bool:
        return any(m.name == name for m in self._members)

    def live(self, task: str, index: int) -> bool:
        return any(m.task == task and m.index == index and _live(m) for m in self._members)

    def taken(self, task: str, index: int) -> bool:
        return any(m.task == task and m.index == index and not m.finished for m in self._members)

    def holder(self, task: str, index: int, *, other_than: str) -> str | None:
        return _holder(
            (m for m in self._members if m.task == task and m.index == index), other_than
        )


@dataclass(slots=True)
class _Group:
    # name -> how many members have it (a pod's uid changes when it is recreated;
    # old and new may overlap in the cache for an event or two)
    names: dict[str, int] = field(default_factory=dict)
    # task -> index -> the members showing it (nearly always one; lists, not dicts
    # keyed by uid, for memory: a list of one is a quarter of a dict of one)
    tasks: dict[str, dict[int, list[Member]]] = field(default_factory=dict)
    size: int = 0

    def add(self, member: Member) -> None:
        self.size += 1
        self.names[member.name] = self.names.get(member.name, 0) + 1
        if member.index is not None:
            indexes = self.tasks.setdefault(member.task, {})
            indexes.setdefault(member.index, []).append(member)

    def remove(self, member: Member) -> None:
        """Remove `member` (one equal to it: equal members answer alike)."""
        self.size -= 1
        left = self.names[member.name] - 1
        if left:
            self.names[member.name] = left
        else:
            del self.names[member.name]
        if member.index is not None:
            indexes = self.tasks[member.task]
            holders = indexes[member.index]
            holders.remove(member)
            if not holders:
                del indexes[member.index]
                if not indexes:
                    del self.tasks[member.task]

    def _slot(self, task: str, index: int) -> list[Member]:
        return self.tasks.get(task, {}).get(index, [])

    # ---- GroupView ----
    def has_name(self, name: str) -> bool:
        return name in self.names

    def live(self, task: str, index: int) -> bool:
        return any(_live(m) for m in self._slot(task, index))

    def taken(self, task: str, index: int) -> bool:
        return any(not m.finished for m in self._slot(task, index))

    def holder(self, task: str, index: int, *, other_than: str) -> str | None:
        return _holder(self._slot(task, index), other_than)


_EMPTY = ListedGroup(())


class MemberIndex:
    """Every group's members by task index, kept from watch events (the fast path).

    Keyed by pod uid: `put` replaces what a pod showed before (its group, task or
    index may change, or it may leave its group: `put(uid, None)`), `remove` forgets
    it. A relist replaces everything: `begin_relist`, a `put` per listed pod, then
    `end_relist` drops every pod the relist did not show. Memory: one `Member`, a
    list of one and three dict entries per pod that belongs to a group (the strings
    are the watched pod's own); groups without members are dropped.
    """

    def __init__(self) -> None:
        self._members: dict[str, Member] = {}
        self._groups: dict[tuple[str, str], _Group] = {}
        self._relist_seen: set[str] | None = None

    def put(self, uid: str, member: Member | None) -> None:
        """What pod `uid` shows now; None: it belongs to no group (or left its group)."""
        if self._relist_seen is not None:
            self._relist_seen.add(uid)
        old = self._members.get(uid)
        if old == member:
            return
        if old is not None:
            self._drop(uid, old)
        if member is not None:
            self._members[uid] = member
            self._groups.setdefault((member.namespace, member.group), _Group()).add(member)

    def remove(self, uid: str) -> None:
        """Pod `uid` is gone."""
        old = self._members.get(uid)
        if old is not None:
            self._drop(uid, old)

    def begin_relist(self) -> None:
        """A full list starts; what it does not `put` before `end_relist` is gone."""
        self._relist_seen = set()

    def end_relist(self) -> None:
        """The full list is in: forget every pod it did not show."""
        seen, self._relist_seen = self._relist_seen or set(), None
        for uid in [uid for uid in self._members if uid not in seen]:
            self.remove(uid)

    def group(self, namespace: str, group: str) -> GroupView:
        """The group's members (an empty view when it has none); valid until the next change."""
        return self._groups.get((namespace, group)) or _EMPTY

    def members(self) -> Iterator[tuple[str, Member]]:
        """Every (uid, member) held."""
        return iter(self._members.items())

    def __len__(self) -> int:
        return len(self._members)

    def group_count(self) -> int:
        """Groups held: only those with a member (an emptied group is dropped)."""
        return len(self._groups)

    def _drop(self, uid: str, member: Member) -> None:
        del self._members[uid]
        key = (member.namespace, member.group)
        state = self._groups[key]
        state.remove(member)
        if not state.size:
            del self._groups[key]
