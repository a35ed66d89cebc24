"""Task indexes of a group's members: never two live members with the same task+index.

Two ways a pod gets its index, both through one per-group lock:

- `allocate`: a pod that brings none (Deployments, plain pods) gets the lowest free one;
- `claim`: a pod that brings one (annotation, Indexed Job, StatefulSet) is checked
  against the group's other members and raises IndexTakenError when it is held.

Why both a lock and a memory: the API server calls the webhook for many pods of
one group at once (a Deployment scaling to 20), and a pod we gave an index to is
not visible until the API server has stored it, after the webhook answered. So
per group:

1. take the group's asyncio lock (one allocation or claim at a time per group);
2. read the group's members (see below);
3. taken = indexes of active pods of the task + indexes handed out in the last
   `hold_seconds` that the members do not show yet;
4. hand out the lowest index not taken (allocate), or the pod's own index when
   nobody else holds it (claim), and remember it (unless dry run).

Where the members come from (docs/webhook.md, "How task indexes are allocated"):
the service's watch cache feeds every pod event into a `MemberIndex`
(extender.kube.member_indexes) through `PodIndexFeed`, O(1) per event; while
the pod watch is caught up (its list applied, its watch not failed since, and a
pod delivered within `hold_seconds`) the allocator answers from it without any
API call. Before that, and from a watch
error until the relist is complete, it lists the group's pods from the API server
per create (a consistent read), as it always did: a partial or stale index never
answers. Both give the same answers from the same pods (ListedGroup vs MemberIndex,
tests/unit/test_member_indexes.py).

A remembered index is forgotten once its pod is seen (by name; a pod without a
name yet: once a live pod shows the index), or after `hold_seconds` (the create
failed later, e.g. another webhook denied it).
This holds within one process; the webhook runs on the leader replica only (only
it is Ready). Every replica runs the watch cache, so a new leader's index is
current the moment it is Ready.
`IndexAllocator` implements `extender.ports.indexes.IndexAllocatorPort`, whose
types (Claimant and the errors) it answers in.

Who holds an index, for a claim: a pod of the task showing it that is neither
finished nor being deleted (a finished or terminating pod's index is free for its
replacement, as an Indexed Job or StatefulSet recreates it), and that has another
name (a pod of the same name is the replacement: the API server stores one pod per
name); or a remembered index that is not the claimant's own (see Claimant).
Allocation stays more careful: a pod being deleted still holds its index there.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from extender.config import Settings
from extender.domain.objects.membership import MembershipError, group_name, task_name
from extender.injection.layout import is_deleting, is_finished, member_index
from extender.kube.cache import CacheSink
from extender.kube.member_indexes import GroupView, ListedGroup, Member, MemberIndex
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
    "PodIndexFeed",
    "PodLister",
    "PodsUnreadableError",
    "api_pod_lister",
    "member_of",
    "pod_uid",
]

log = logging.getLogger(__name__)

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
        on_read: Callable[[str], None] | None = None,
    ) -> None:
        """Give `raw` (production) or `lister` (tests, other sources), not both.

        `on_read(source)` is told where each read of a group's members came from:
        "watch" or "list" (gang_extender_index_reads_total).

        `hold_seconds` and `list_timeout_seconds`: see Settings.index_hold_seconds and
        Settings.index_list_timeout_seconds (the defaults are theirs).
        The allocator lists per create until `answer_from_watch` is called.
        """
        if (raw is None) == (lister is None):
            raise ValueError("IndexAllocator needs exactly one of raw or lister")
        if lister is None:
            assert raw is not None
            lister = api_pod_lister(raw, timeout=list_timeout_seconds)
        self._lister: PodLister = lister
        self._hold_seconds = hold_seconds
        self._clock = clock
        self._on_read = on_read
        self._groups: dict[tuple[str, str], _GroupState] = {}
        # Fed by PodIndexFeed from the watch cache; read only while `_watch_current()`
        # and the watch was heard from within `hold_seconds` (see `_caught_up`).
        self.members = MemberIndex()
        self._watch_current: Callable[[], bool] = _never
        self._last_heard: float | None = None
        self._answering_from_watch = False

    def answer_from_watch(self, current: Callable[[], bool]) -> None:
        """Answer from `members` whenever `current()` says the pod watch is caught up.

        `current` is true while the watch cache's pod list is applied and its watch has
        not failed since (`WatchCache.watching("pods")`); otherwise (start-up, a relist
        after an error or a 410) the allocator lists the group's pods per create, as
        without a watch: a partial or stale index never answers.
        """
        self._watch_current = current

    def feed(self, then: CacheSink) -> PodIndexFeed:
        """The watch cache's sink: pods into `members` (telling this allocator), all to `then`."""
        return PodIndexFeed(then, self.members, heard=self._heard_from_watch)

    def _heard_from_watch(self) -> None:
        self._last_heard = self._clock()

    def _caught_up(self) -> bool:
        """The pod watch is caught up (`current`) and has delivered a pod lately.

        Why "lately": a watch whose connection died without an error delivers nothing
        until its read times out (minutes). A pod this allocator admitted meanwhile
        is covered by its hold for `hold_seconds`; once the watch has been silent for
        that long, a hold may have lapsed for a pod the watch never delivered, so the
        group is listed instead. On a quiet cluster this costs one list per create
        until the next pod event arrives (the create's own pod is one).
        """
        if self._last_heard is None or not self._watch_current():
            return False
        return self._clock() - self._last_heard < self._hold_seconds

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
            view = await self._view(namespace, group)
            now = self._clock()
            self._forget_seen(state, view, now)
            index = 0
            while view.taken(task, index) or (task, index) in state.handed_out:
                index += 1
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
            view = await self._view(namespace, group)
            now = self._clock()
            self._forget_seen(state, view, now)
            taken = self._holder(state, view, task, index, claimant, now)
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

    async def _view(self, namespace: str, group: str) -> GroupView:
        """The group's members: from the watch when it is caught up, else listed now.

        The watch view is read with no await until the answer is remembered, so no
        event lands in between (events are applied on this event loop).
        """
        current = self._caught_up()
        if current != self._answering_from_watch:
            self._answering_from_watch = current
            log.info(
                "task indexes: %s",
                "answering from the pod watch"
                if current
                else "the pod watch is not caught up; listing the group's pods per create",
            )
        if self._on_read is not None:
            self._on_read("watch" if current else "list")
        if current:
            return self.members.group(namespace, group)
        try:
            pods = await asyncio.to_thread(self._lister, namespace, group)
        except KubeError as err:
            raise PodsUnreadableError(_describe(err)) from None
        return ListedGroup(_listed_member(pod, namespace, group) for pod in pods)

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

    def _forget_seen(self, state: _GroupState, view: GroupView, now: float) -> None:
        """Drop holds that lapsed or whose pod the view shows (it now speaks for itself)."""
        for held, hold in list(state.handed_out.items()):
            seen = view.has_name(hold.name) if hold.name else view.live(*held)
            if seen or hold.until <= now:
                del state.handed_out[held]

    def _holder(
        self,
        state: _GroupState,
        view: GroupView,
        task: str,
        index: int,
        claimant: Claimant,
        now: float,
    ) -> IndexTakenError | None:
        # A finished or terminating pod is not a holder: its replacement may take the
        # index; nor is a pod of the claimant's name (the API server keeps one per name).
        holder = view.holder(task, index, other_than=claimant.name)
        if holder is not None:
            return IndexTakenError(task=task, index=index, holder=holder, stored=True)
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


def _never() -> bool:
    return False


def _nothing() -> None:
    pass


def pod_uid(pod: dict[str, Any]) -> str:
    """The key a pod is kept under: its uid, or namespace/name when it has none (as ClusterState)."""
    meta = pod.get("metadata") or {}
    return str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}")


def member_of(pod: dict[str, Any]) -> Member | None:
    """What a watched pod says about task indexes; None when it belongs to no group.

    A pod claiming two groups was never admitted into either (the webhook denies it),
    so it holds no index in any: None, as the plain path's `_in_group` decides.
    """
    meta = pod.get("metadata") or {}
    try:
        group = group_name(meta)
    except MembershipError:
        return None
    if group is None:
        return None
    return _listed_member(pod, str(meta.get("namespace") or "default"), group)


def _listed_member(pod: dict[str, Any], namespace: str, group: str) -> Member:
    meta = pod.get("metadata") or {}
    return Member(
        namespace=namespace,
        group=group,
        name=str(meta.get("name") or ""),
        task=task_name(meta),
        index=member_index(meta),
        finished=is_finished(pod),
        deleting=is_deleting(pod),
    )


class PodIndexFeed(CacheSink):
    """The watch cache's sink in front of `then`: pods also go into a MemberIndex.

    O(1) per watch event; a relist (pages from `first` to `last`) replaces what the
    index holds. Everything is passed on to `then` unchanged, after the index.
    """

    def __init__(
        self, then: CacheSink, members: MemberIndex, *, heard: Callable[[], None] = _nothing
    ) -> None:
        """`heard()` is called after each page or event of pods is applied."""
        self.then = then
        self.members = members
        self.heard = heard

    def on_page(self, kind: str, items: list[dict[str, Any]], first: bool, last: bool) -> None:
        if kind == "pods":
            if first:
                self.members.begin_relist()
            for pod in items:
                self._put(pod)
            if last:
                self.members.end_relist()
            self.heard()
        self.then.on_page(kind, items, first, last)

    def on_event(self, kind: str, event_type: str, obj: dict[str, Any]) -> None:
        if kind == "pods":
            if event_type == "DELETED":
                self._remove(obj)
            else:
                self._put(obj)
            self.heard()
        self.then.on_event(kind, event_type, obj)

    def _put(self, pod: Any) -> None:
        try:
            self.members.put(pod_uid(pod), member_of(pod))
        except Exception as err:  # a malformed object: ClusterState logs and counts it too
            log.warning("task index: skipped an unreadable pod: %s: %s", type(err).__name__, err)

    def _remove(self, pod: Any) -> None:
        try:
            self.members.remove(pod_uid(pod))
        except Exception as err:
            log.warning("task index: skipped an unreadable pod: %s: %s", type(err).__name__, err)


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
