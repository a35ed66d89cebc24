"""Shared by the watch cache's unit tests: the cache tuning that lists in pages.

The fake API servers of the tests about paging, versions and readiness answer lists
in pages only, like an API server without WatchList, read with whole lists off; the
streamed list and the list read whole have their own tests
(tests/unit/test_watch_cache.py, tests/unit/test_whole_list.py).
"""

from __future__ import annotations

import dataclasses

from extender.kube.cache import DEFAULT_TUNING

PAGED = dataclasses.replace(DEFAULT_TUNING, watch_list=False, whole_list=False)
# Lists streamed as a watch (WatchList), for the fakes that answer only that way.
STREAMED = dataclasses.replace(DEFAULT_TUNING, whole_list=False)
