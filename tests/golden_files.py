"""Golden files: the expected JSON of a test, kept under tests/golden/ and reviewed in diffs.

A missing golden file is a test failure, not a file quietly written: a test that
writes what it got and then compares it with itself checks nothing, and would pass
for a golden file that was lost, renamed or never committed. Set UPDATE_GOLDEN=1 to
write (or rewrite) the golden files from the current output, then read the diff.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

UPDATE_ENV = "UPDATE_GOLDEN"


def updating() -> bool:
    return os.environ.get(UPDATE_ENV) == "1"


def expected_golden(path: Path, actual: Any) -> Any:
    """The golden content at `path` to compare `actual` with.

    With UPDATE_GOLDEN=1, `actual` is written there first (so the comparison passes).
    Without it, a missing file fails the test, saying how to create it.
    """
    if updating():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(actual, indent=2, sort_keys=True) + "\n")
    elif not path.exists():
        pytest.fail(
            f"golden file {path} is missing; run the test with {UPDATE_ENV}=1 to write it "
            f"from the current output, then review it and add it to the repository",
            pytrace=False,
        )
    return json.loads(path.read_text())
