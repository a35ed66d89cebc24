"""Task indexes for pods that bring none (Deployments, plain pods): lowest free, never twice.

Why both a lock and a memory: the API server calls the webhook for many pods of
one group at once (a Deployment scaling to 20), and a pod we gave an index to is
not visible in a list until the API server has stored it, after the webhook
answered. So per group:

1. take the group's asyncio lock (one allocation at a time per group);
2. list the group's pods from the API server (a consistent read, not a cache);
3. taken = indexes of active pods of the task + indexes handed out in the last
   `hold_seconds` that no listed pod shows yet;
4. hand out the lowest index not taken, and remember it (unless dry run).

A remembered index is forgotten once a pod showing it is listed, or after
`hold_seconds` (the create failed later, e.g. another webhook denied it).
This holds within one process; the webhook runs on the leader replica only.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import kubernetes.client
import orjson
import urllib3

from extender.domain.membership import MembershipError, group_name, task_name
from extender.injection.layout import is_finished, member_index

PodLister = Callable[[str, str], list[dict[str, Any]]]
"""(namespace, group) -> the group's pods as API JSON dicts. Blocking; run in a thread."""

# How long an index handed out stays taken without a pod showing it. Longer than the
# API server takes to store a pod after admission (the admission chain is bounded by
# its webhooks' timeouts, at most 30 s each); short enough that a create that failed
# after us frees its index soon.
UNSEEN_INDEX_HOLD_SECONDS = 60.0
# The webhook's own timeout (deploy/webhook.yaml) is 10 s; the list must end well before.
LIST_TIMEOUT_SECONDS = 5.0


class NoFreeIndexError(Exception):
    """Every index below the task's limit is taken."""

    def __init__(self, *, task: str, limit: int) -> None:
        super().__init__(f"all {limit} indexes of task {task!r} are taken")
        self.task = task
        self.limit = limit


@dataclass
class _GroupState:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0
    # (task, index) -> when the hold ends (clock seconds)
    handed_out: dict[tuple[str, int], float] = field(default_factory=dict)


class IndexAllocator:
    """Lowest free task index per group, atomic within this process."""

    def __init__(
        self,
        api_client: kubernetes.client.ApiClient | None = None,
        *,
        lister: PodLister | None = None,
        hold_seconds: float = UNSEEN_INDEX_HOLD_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Give `api_client` (production) or `lister` (tests, other sources), not both."""
        if (api_client is None) == (lister is None):
            raise ValueError("IndexAllocator needs exactly one of api_client or lister")
        self._lister: PodLister = lister if lister is not None else api_pod_lister(api_client)
        self._hold_seconds = hold_seconds
        self._clock = clock
        self._groups: dict[tuple[str, str], _GroupState] = {}

    async def allocate(
        self, *, namespace: str, group: str, task: str, limit: int | None, dry_run: bool
    ) -> int:
        """The lowest free index of `task` in the group, below `limit` when one is given.

        Raises NoFreeIndexError when all below `limit` are taken; ApiException when the
        list fails. With `dry_run` nothing is remembered: the answer may be handed out
        again, which is right, since a dry-run pod is never stored.
        """
        key = (namespace, group)
        state = self._groups.setdefault(key, _GroupState())
        state.users += 1
        try:
            async with state.lock:
                pods = await asyncio.to_thread(self._lister, namespace, group)
                now = self._clock()
                taken = self._taken(state, pods, task, now)
                index = lowest_free(taken)
                if limit is not None and index >= limit:
                    raise NoFreeIndexError(task=task, limit=limit)
                if not dry_run:
                    state.handed_out[(task, index)] = now + self._hold_seconds
                return index
        finally:
            state.users -= 1
            self._forget_if_idle(key, state)

    def release(self, *, namespace: str, group: str, task: str, index: int) -> None:
        """Forget an index handed out for a pod that will not be created (it was denied)."""
        key = (namespace, group)
        state = self._groups.get(key)
        if state is None:
            return
        state.handed_out.pop((task, index), None)
        self._forget_if_idle(key, state)

    def remembered(self, *, namespace: str, group: str) -> dict[tuple[str, int], float]:
        """Indexes handed out and not yet seen (for tests and debugging)."""
        state = self._groups.get((namespace, group))
        return dict(state.handed_out) if state is not None else {}

    def _taken(
        self, state: _GroupState, pods: list[dict[str, Any]], task: str, now: float
    ) -> set[int]:
        visible: set[tuple[str, int]] = set()
        for pod in pods:
            if is_finished(pod):
                continue  # a finished pod's index is free for its replacement
            meta = pod.get("metadata") or {}
            index = member_index(meta)
            if index is not None:
                visible.add((task_name(meta), index))
        for held, until in list(state.handed_out.items()):
            if held in visible or until <= now:
                del state.handed_out[held]
        taken = {index for each_task, index in visible if each_task == task}
        taken |= {index for each_task, index in state.handed_out if each_task == task}
        return taken

    def _forget_if_idle(self, key: tuple[str, str], state: _GroupState) -> None:
        # Bounded memory: a group nobody is allocating for and with nothing held is dropped.
        if state.users == 0 and not state.handed_out and self._groups.get(key) is state:
            del self._groups[key]


def lowest_free(taken: set[int]) -> int:
    index = 0
    while index in taken:
        index += 1
    return index


def api_pod_lister(api_client: kubernetes.client.ApiClient | None) -> PodLister:
    """A PodLister that lists the namespace's pods from the API server and keeps the group's.

    The whole namespace is listed because the Volcano annotation cannot be selected
    on; the read is consistent (no resourceVersion), so every stored pod is seen.
    """
    core = kubernetes.client.CoreV1Api(api_client)

    def list_group_pods(namespace: str, group: str) -> list[dict[str, Any]]:
        response = core.list_namespaced_pod(
            namespace, _preload_content=False, _request_timeout=LIST_TIMEOUT_SECONDS
        )
        items: list[dict[str, Any]] = _response_json(response).get("items") or []
        return [pod for pod in items if _in_group(pod, group)]

    return list_group_pods


def _response_json(response: object) -> dict[str, Any]:
    # With _preload_content=False the client returns the raw urllib3 response (its type
    # hints still name the model): the JSON is read as plain dicts, no model round trip.
    body: dict[str, Any] = orjson.loads(cast(urllib3.HTTPResponse, response).data)
    return body


def _in_group(pod: dict[str, Any], group: str) -> bool:
    try:
        return group_name(pod.get("metadata") or {}) == group
    except MembershipError:
        # A pod claiming two groups was never admitted into either (the webhook denies
        # it), so it holds no index in this one.
        return False
