"""The cyclic garbage collector paused while the watch cache's first lists arrive.

Why: a list of 50,000 pods allocates millions of JSON containers that all live
until their page is applied, and the generational GC traverses them again and
again as they survive (a 500-pod page parses ~6x slower with it on). Once synced,
the cache's long-lived objects are frozen out of later collections (`gc.freeze`),
so full collections, and the pauses they put into request handling, stay small.
Frozen objects that become garbage are still freed by reference counting (the
cache's objects hold no reference cycles), and GC resumes even if a list hangs.

When GC resumes, its youngest generation is collected every `YOUNG_THRESHOLD`
allocations instead of Python's 700: every watch event and extender call allocates
hundreds of short-lived containers, and with the default the collector took about
10% of the service's CPU in a 300-node gang run (2.7 s, with 8 full collections
of 113 ms on average); with these thresholds 0.36 s (5 young collections of 61 ms on
average, 1 full one), docs/benchmarks.md round 17.
"""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from collections.abc import Sequence

# gc.set_threshold once GC resumes: (young generation, then each older one's factor).
YOUNG_THRESHOLD = 50_000
OLDER_FACTOR = 20


def pause_gc_until_synced(
    synced: Sequence[threading.Event], loop: asyncio.AbstractEventLoop, max_seconds: float
) -> None:
    """Disable GC now; freeze and re-enable it on `loop` once every event is set.

    After `max_seconds` without all of them, GC is simply enabled again. Does nothing
    when GC is off already (someone else paused it).
    """
    if not gc.isenabled():
        return
    gc.disable()
    threading.Thread(
        target=_resume_after_sync,
        args=(synced, loop, max_seconds),
        name="gc-after-sync",
        daemon=True,
    ).start()


def _resume_after_sync(
    synced: Sequence[threading.Event], loop: asyncio.AbstractEventLoop, max_seconds: float
) -> None:
    deadline = time.monotonic() + max_seconds
    for event in synced:
        event.wait(max(0.0, deadline - time.monotonic()))
    if not all(event.is_set() for event in synced):
        _enable_gc()
        return
    # `synced` is set on the loop once the final pages are applied, so the cache's
    # objects exist by now; the freeze runs on the loop after whatever is queued.
    try:
        loop.call_soon_threadsafe(_freeze_and_enable_gc)
    except RuntimeError:  # the loop is closed: nothing left to protect
        _enable_gc()


def _freeze_and_enable_gc() -> None:
    gc.collect()
    gc.freeze()
    _enable_gc()


def _enable_gc() -> None:
    gc.set_threshold(YOUNG_THRESHOLD, OLDER_FACTOR, OLDER_FACTOR)
    gc.enable()
