"""Shared by the watch cache's unit tests: the cache tuning that lists in pages.

The fake API servers of the tests about paging, versions and readiness answer lists
in pages only, like an API server without WatchList; the streamed list has its own
tests (tests/unit/test_watch_cache.py).
"""

from __future__ import annotations

import dataclasses

from extender.kube.cache import DEFAULT_TUNING

PAGED = dataclasses.replace(DEFAULT_TUNING, watch_list=False)
