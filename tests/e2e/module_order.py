"""The order e2e test modules reach pytest-xdist's workers in.

Under `--dist loadfile` a worker takes whole modules in collection order. The modules
that use a piece `make test` (hack/test-all.sh) builds beside the first tier instead
of before it (Kueue's manager, helm) go after the other e2e modules: by the time a
worker reaches them the build is usually done, and where it is not their fixture
waits for it (the build scripts hold a lock per piece, so a second run of one waits
for the first and then finds it cached). Pure: no pytest, so the unit tests can
check it.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import TypeVar

Item = TypeVar("Item")

# Fixtures that run a build script of a piece CI builds beside the first tier.
LATE_BUILD_FIXTURES = frozenset({"kueue", "helm"})
# The marker for a test that needs such a piece without one of those fixtures.
LATE_BUILD_MARK = "after_builds"
# pytest-timeout's limit for such a test, its fixture's wait for the build included.
# The project-wide 900 s (pyproject.toml) is for a test's own work: in a cold run on a
# loaded machine, a Kueue test's fixture waited 8 minutes for Kueue's build (done at
# +3391 s), near that limit, and pytest-timeout's thread method would end the whole
# xdist worker. The build scripts' own timeouts (an hour) bound the wait instead.
LATE_BUILD_TIMEOUT_SECONDS = 3600.0


def late_build_timeout(own: float | None) -> float:
    """The pytest-timeout limit for a test that may wait for a late build: its own
    `timeout` mark where that is longer, else LATE_BUILD_TIMEOUT_SECONDS (0 is
    pytest-timeout's "no limit" and stays)."""
    if own is not None and (own == 0 or own > LATE_BUILD_TIMEOUT_SECONDS):
        return own
    return LATE_BUILD_TIMEOUT_SECONDS


def late_modules_last(
    items: Sequence[Item],
    *,
    in_scope: Callable[[Item], bool],
    module_of: Callable[[Item], Hashable],
    is_late: Callable[[Item], bool],
) -> list[Item]:
    """`items` with every in-scope module that holds a late item moved behind the other
    in-scope modules. A module moves whole (loadfile keeps a module on one worker, in
    the place its first item had); the in-scope items keep the positions they fill, so
    out-of-scope items do not move; the order within each part stays as it was."""
    late = {module_of(item) for item in items if in_scope(item) and is_late(item)}
    slots = [index for index, item in enumerate(items) if in_scope(item)]
    in_slots = [items[index] for index in slots]
    reordered = [item for item in in_slots if module_of(item) not in late] + [
        item for item in in_slots if module_of(item) in late
    ]
    result = list(items)
    for index, item in zip(slots, reordered, strict=True):
        result[index] = item
    return result
