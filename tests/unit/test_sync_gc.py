"""The cyclic GC is off while the cache's first lists arrive, and comes back (kube/sync_gc.py)."""

from __future__ import annotations

import asyncio
import gc
import threading

from extender.kube.sync_gc import OLDER_FACTOR, YOUNG_THRESHOLD, pause_gc_until_synced

DEFAULT_THRESHOLD = gc.get_threshold()


async def _until(condition: object, seconds: float = 5.0) -> bool:
    for _ in range(int(seconds / 0.01)):
        if condition():  # type: ignore[operator]
            return True
        await asyncio.sleep(0.01)
    return False


async def test_gc_is_paused_until_every_list_is_synced_then_resumes_frozen() -> None:
    assert gc.isenabled()
    events = [threading.Event(), threading.Event()]
    try:
        pause_gc_until_synced(events, asyncio.get_running_loop(), max_seconds=30)
        assert not gc.isenabled()
        events[0].set()
        assert not await _until(gc.isenabled, 0.2)  # one of two synced: still paused
        events[1].set()
        assert await _until(gc.isenabled)
        assert gc.get_freeze_count() > 0
        # Resumed with the young generation collected less often than Python's 700.
        assert gc.get_threshold() == (YOUNG_THRESHOLD, OLDER_FACTOR, OLDER_FACTOR)
    finally:
        gc.unfreeze()
        gc.set_threshold(*DEFAULT_THRESHOLD)
        gc.enable()


async def test_gc_resumes_when_a_list_hangs_past_the_pause() -> None:
    try:
        pause_gc_until_synced([threading.Event()], asyncio.get_running_loop(), max_seconds=0.05)
        assert not gc.isenabled()
        assert await _until(gc.isenabled)
        assert gc.get_threshold() == (YOUNG_THRESHOLD, OLDER_FACTOR, OLDER_FACTOR)
    finally:
        gc.set_threshold(*DEFAULT_THRESHOLD)
        gc.enable()


async def test_a_gc_paused_by_someone_else_is_left_alone() -> None:
    gc.disable()
    try:
        event = threading.Event()
        event.set()
        pause_gc_until_synced([event], asyncio.get_running_loop(), max_seconds=30)
        assert not await _until(gc.isenabled, 0.2)
    finally:
        gc.enable()
