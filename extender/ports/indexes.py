"""What admission asks of the task-index allocator, and the answers it can get.

`extender.admitter` depends on `IndexAllocatorPort` only; `extender.kube.indexes`
implements it against the API server. Both speak the types defined here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


class NoFreeIndexError(Exception):
    """Every index below the task's limit is taken."""

    def __init__(self, *, task: str, limit: int) -> None:
        super().__init__(f"all {limit} indexes of task {task!r} are taken")
        self.task = task
        self.limit = limit


class IndexTakenError(Exception):
    """The index a pod brings is held by another member of the same group and task."""

    def __init__(
        self, *, task: str, index: int, holder: str, stored: bool, hold_left: float = 0.0
    ) -> None:
        who = f"pod {holder!r}" if holder else "a pod whose name the API server assigns"
        super().__init__(f"index {index} of task {task!r} is taken by {who}")
        self.task = task
        self.index = index
        # The holder's name; "" for a pod admitted with generateName and not stored yet.
        self.holder = holder
        # False: the holder was admitted moments ago and the API server has not stored
        # it yet (or its create failed); its hold lapses in `hold_left` seconds.
        self.stored = stored
        self.hold_left = hold_left


class PodsUnreadableError(Exception):
    """The group's pods could not be read from the API server; a retry may succeed.

    `detail` says what went wrong ("API server answered 503 Service Unavailable",
    "API server unreachable: ..."), without any response body.
    """

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


@dataclass(frozen=True)
class Claimant:
    """The pod that claims (or is allocated) an index: what makes a remembered index its own.

    A remembered index is the claimant's own, not another pod's, when it was handed out
    for a pod of the same `name`; or of the same `owner` (set only for pods whose index
    a controller keeps one pod per, i.e. an Indexed Job's uid: its retried create);
    or when the claimant is `rewiring`, i.e. already carries this webhook's wiring for
    that index: the API server calling the webhook again for the same create.
    """

    name: str = ""
    owner: str = ""
    rewiring: bool = False

    def owns(self, *, name: str, owner: str) -> bool:
        """Whether an index handed out for a pod `name` of `owner` is this claimant's own."""
        return (
            self.rewiring
            or (bool(self.name) and self.name == name)
            or (bool(self.owner) and self.owner == owner)
        )


class IndexAllocatorPort(Protocol):
    """Task indexes of a group's members: never two live members with the same task+index."""

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

        Raises NoFreeIndexError when all below `limit` are taken, PodsUnreadableError
        when the group's pods cannot be read. With `dry_run` nothing is remembered.
        """
        ...

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

        PodsUnreadableError when the group's pods cannot be read. With `dry_run` the
        check is made and nothing is remembered.
        """
        ...

    def release(self, *, namespace: str, group: str, task: str, index: int) -> None:
        """Forget an index handed out for a pod that will not be created (it was denied)."""
        ...
