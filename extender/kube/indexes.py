"""Task indexes of a group's members: never two live members with the same task+index.

Two ways a pod gets its index, both through one per-group lock:

- `allocate`: a pod that brings none (Deployments, plain pods) gets the lowest free one;
- `claim`: a pod that brings one (annotation, Indexed Job, StatefulSet) is checked
  against the group's other members and raises IndexTakenError when it is held.

Why both a lock and a memory: the API server calls the webhook for many pods of
one group at once (a Deployment scaling to 20), and a pod we gave an index to is
not visible in a list until the API server has stored it, after the webhook
answered. So per group:

1. take the group's asyncio lock (one allocation or claim at a time per group);
2. list the group's pods from the API server (a consistent read, not a cache);
3. taken = indexes of active pods of the task + indexes handed out in the last
   `hold_seconds` that no listed pod shows yet;
4. hand out the lowest index not taken (allocate), or the pod's own index when
   nobody else holds it (claim), and remember it (unless dry run).

A remembered index is forgotten once its pod is listed (by name; a pod without a
name yet: once a live pod shows the index), or after `hold_seconds` (the create
failed later, e.g. another webhook denied it).
This holds within one process; the webhook runs on the leader replica only.
`IndexAllocator` implements `extender.ports.indexes.IndexAllocatorPort`, whose
types (Claimant and the errors) it answers in.

Who holds an index, for a claim: a listed pod of the task showing it that is
neither finished nor being deleted (a finished or terminating pod's index is free
for its replacement, as an Indexed Job or StatefulSet recreates it), and that has
another name (a pod of the same name is the replacement: the API server stores one
pod per name); or a remembered index that is not the claimant's own (see Claimant).
Allocation stays more careful: a pod being deleted still holds its index there.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from extender.config import Settings
from extender.domain.membership import MembershipError, group_name, task_name
from extender.injection.layout import is_deleting, is_finished, member_index
from extender.kube.rawapi import KubeError, RawApi, path_of
from extender.ports.indexes import (
    Claimant,
    IndexTakenError,
    NoFreeIndexError,
    PodsUnreadableError,
)

__all__ = [
    "Claimant",
    "IndexAllocator",
    "IndexTakenError",
    "NoFreeIndexError",
    "PodLister",
    "PodsUnreadableError",
    "api_pod_lister",
    "lowest_free",
]

# Defaults: the Settings fields', whose comments say why these values.
DEFAULT_HOLD_SECONDS: float = Settings.model_fields["index_hold_seconds"].default
DEFAULT_LIST_TIMEOUT_SECONDS: float = Settings.model_fields["index_list_timeout_seconds"].default

PodLister = Callable[[str, str], list[dict[str, Any]]]
"""(namespace, group) -> the group's pods as API JSON dicts. Blocking; run in a thread.

A lister reports a failed read as KubeError, which the allocator turns into
PodsUnreadableError; any other exception passes through unchanged.
"""


@dataclass(frozen=True)
class _Hold:
    until: float  # when the hold ends (clock seconds)
    name: str = ""  # the pod's name; "" when the API server will generate it
    owner: str = ""  # see Claimant.owner


@dataclass
class _GroupState:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0
    # (task, index) -> the hold on it
    handed_out: dict[tuple[str, int], _Hold] = field(default_factory=dict)


class IndexAllocator:
    """Lowest free task index per group, and checked explicit ones; atomic within this process."""

    def __init__(
        self,
        raw: RawApi | None = None,
        *,
        lister: PodLister | None = None,
        hold_seconds: float = DEFAULT_HOLD_SECONDS,
        list_timeout_seconds: float = DEFAULT_LIST_TIMEOUT_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Give `raw` (production) or `lister` (tests, other sources), not both.

        `hold_seconds` and `list_timeout_seconds`: see Settings.index_hold_seconds and
        Settings.index_list_timeout_seconds (the defaults are theirs).
        """
        if (raw is None) == (lister is None):
            raise ValueError("IndexAllocator needs exactly one of raw or lister")
        if lister is None:
            assert raw is not None
            lister = api_pod_lister(raw, timeout=list_timeout_seconds)
        self._lister: PodLister = lister
        self._hold_seconds = hold_seconds
        self._clock = clock
        self._groups: dict[tuple[str, str], _GroupState] = {}

    async def allocate(
        self,
        *,
        namespace: str,
        group: str,
        task: str,
        limit: int | None,
        dry_run: bool,
        claimant: Claimant | None = None,
    ) -> int:
        """The lowest free index of `task` in the group, below `limit` when one is given.

        Raises NoFreeIndexError when all below `limit` are taken; PodsUnreadableError
        when the list fails. With `dry_run` nothing is remembered: the answer may be handed out
        again, which is right, since a dry-run pod is never stored.
        """
        async with self._locked(namespace, group) as state:
            pods = await self._list(namespace, group)
            now = self._clock()
            self._forget_seen(state, pods, now)
            index = lowest_free(self._taken(state, pods, task))
            if limit is not None and index >= limit:
                raise NoFreeIndexError(task=task, limit=limit)
            if not dry_run:
                self._hold(state, task, index, claimant or Claimant(), now)
            return index

    async def claim(
        self,
        *,
        namespace: str,
        group: str,
        task: str,
        index: int,
        claimant: Claimant,
        dry_run: bool,
    ) -> None:
        """Take the index a pod brings, or raise IndexTakenError naming who holds it.

        Atomic with `allocate` and other claims of the group: of two concurrent
        creates with one index, the second sees the first's hold. PodsUnreadableError
        when the list fails. With `dry_run` the check is made and nothing is remembered.
        """
        async with self._locked(namespace, group) as state:
            pods = await self._list(namespace, group)
            now = self._clock()
            self._forget_seen(state, pods, now)
            taken = self._holder(state, pods, task, index, claimant, now)
            if taken is not None:
                raise taken
            if not dry_run:
                self._hold(state, task, index, claimant, now)

    def release(self, *, namespace: str, group: str, task: str, index: int) -> None:
        """Forget an index handed out for a pod that will not be created (it was denied)."""
        key = (namespace, group)
        state = self._groups.get(key)
        if state is None:
            return
        state.handed_out.pop((task, index), None)
        self._forget_if_idle(key, state)

    def remembered(self, *, namespace: str, group: str) -> dict[tuple[str, int], float]:
        """Indexes handed out and not yet seen, with when their hold ends (tests, debugging)."""
        state = self._groups.get((namespace, group))
        if state is None:
            return {}
        return {held: hold.until for held, hold in state.handed_out.items()}

    async def _list(self, namespace: str, group: str) -> list[dict[str, Any]]:
        try:
            return await asyncio.to_thread(self._lister, namespace, group)
        except KubeError as err:
            raise PodsUnreadableError(_describe(err)) from None

    @asynccontextmanager
    async def _locked(self, namespace: str, group: str) -> AsyncIterator[_GroupState]:
        key = (namespace, group)
        state = self._groups.setdefault(key, _GroupState())
        state.users += 1
        try:
            async with state.lock:
                yield state
        finally:
            state.users -= 1
            self._forget_if_idle(key, state)

    def _hold(
        self, state: _GroupState, task: str, index: int, claimant: Claimant, now: float
    ) -> None:
        state.handed_out[(task, index)] = _Hold(
            until=now + self._hold_seconds, name=claimant.name, owner=claimant.owner
        )

    def _forget_seen(self, state: _GroupState, pods: list[dict[str, Any]], now: float) -> None:
        """Drop holds that lapsed or whose pod the list shows (it now speaks for itself)."""
        names: set[str] = set()
        live: set[tuple[str, int]] = set()
        for pod in pods:
            meta = pod.get("metadata") or {}
            names.add(str(meta.get("name") or ""))
            index = member_index(meta)
            if index is not None and not is_finished(pod) and not is_deleting(pod):
                live.add((task_name(meta), index))
        for held, hold in list(state.handed_out.items()):
            seen = hold.name in names if hold.name else held in live
            if seen or hold.until <= now:
                del state.handed_out[held]

    def _taken(self, state: _GroupState, pods: list[dict[str, Any]], task: str) -> set[int]:
        taken: set[int] = set()
        for pod in pods:
            if is_finished(pod):
                continue  # a finished pod's index is free for its replacement
            meta = pod.get("metadata") or {}
            index = member_index(meta)
            if index is not None and task_name(meta) == task:
                taken.add(index)
        taken |= {index for each_task, index in state.handed_out if each_task == task}
        return taken

    def _holder(
        self,
        state: _GroupState,
        pods: list[dict[str, Any]],
        task: str,
        index: int,
        claimant: Claimant,
        now: float,
    ) -> IndexTakenError | None:
        for pod in pods:
            if is_finished(pod) or is_deleting(pod):
                continue  # its replacement may take the index
            meta = pod.get("metadata") or {}
            name = str(meta.get("name") or "")
            if claimant.name and name == claimant.name:
                continue  # the replacement itself (the API server keeps one pod per name)
            if task_name(meta) == task and member_index(meta) == index:
                return IndexTakenError(task=task, index=index, holder=name, stored=True)
        hold = state.handed_out.get((task, index))
        if hold is not None and not claimant.owns(name=hold.name, owner=hold.owner):
            return IndexTakenError(
                task=task, index=index, holder=hold.name, stored=False, hold_left=hold.until - now
            )
        return None

    def _forget_if_idle(self, key: tuple[str, str], state: _GroupState) -> None:
        # Bounded memory: a group nobody is allocating for and with nothing held is dropped.
        if state.users == 0 and not state.handed_out and self._groups.get(key) is state:
            del self._groups[key]


def lowest_free(taken: set[int]) -> int:
    index = 0
    while index in taken:
        index += 1
    return index


def api_pod_lister(raw: RawApi, *, timeout: float = DEFAULT_LIST_TIMEOUT_SECONDS) -> PodLister:
    """A PodLister that lists the namespace's pods from the API server and keeps the group's.

    The whole namespace is listed because the Volcano annotation cannot be selected
    on; the read is consistent (no resourceVersion), so every stored pod is seen.
    Raises KubeError when the list fails.
    """

    def list_group_pods(namespace: str, group: str) -> list[dict[str, Any]]:
        answer = raw.call(
            "GET", path_of("api", "v1", "namespaces", namespace, "pods"), timeout=timeout
        )
        items: list[dict[str, Any]] = answer.get("items") or []
        return [pod for pod in items if _in_group(pod, group)]

    return list_group_pods


def _describe(err: KubeError) -> str:
    """What failed, for the denial's message: status and reason phrase, never a body."""
    if err.status == 0 and not err.phrase:
        return err.message  # "API server unreachable: ..."
    return f"API server answered {err.status} {err.phrase}"


def _in_group(pod: dict[str, Any], group: str) -> bool:
    try:
        return group_name(pod.get("metadata") or {}, pod.get("spec")) == group
    except MembershipError:
        # A pod claiming two groups was never admitted into either (the webhook denies
        # it), so it holds no index in this one.
        return False
