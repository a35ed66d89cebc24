"""Unit-test fixtures shared by every file here."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import hypothesis
import pytest

from extender.domain.objects.quantity import _units_of_text


@pytest.fixture(autouse=True)
def _fresh_quantity_cache() -> Iterator[None]:
    """Each test parses quantity strings itself: the module's parse cache would let one
    test's answers stand in for another's, and hide a mutated parser from mutmut, whose
    forked runs inherit a filled cache."""
    _units_of_text.cache_clear()
    yield


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under mutmut, run a mutant's tests fastest first, property tests with fewer examples.

    mutmut hands each mutant the set of tests that reach it, in no order, and stops at
    the first failure (`-x`): sorting by the durations its stats run recorded lets a
    killed mutant die in the quickest test that notices, which is most of the cost of
    a run over all of extender/domain. The verdict does not change, only how soon.
    """
    stats = Path("mutmut-stats.json")
    if "MUTANT_UNDER_TEST" not in os.environ or not stats.is_file():
        return
    duration_by_test: dict[str, float] = json.loads(stats.read_text()).get("duration_by_test", {})
    items.sort(key=lambda item: duration_by_test.get(item.nodeid, float("inf")))
    if "MUTATION_FULL_EXAMPLES" in os.environ:  # checking a survivor at full strength
        return
    for item in items:
        _fewer_examples(getattr(item, "obj", None))


# Property tests under mutmut run a tenth of their examples (at least 10): a mutant that
# survives only for want of examples counts as a survivor, so the score can only be
# lower for it, and each survivor is checked against the full suite when classified.
MUTATION_EXAMPLES_DIVISOR = 10
_full_settings: dict[int, hypothesis.settings] = {}


def _fewer_examples(test: object) -> None:
    current = getattr(test, "_hypothesis_internal_use_settings", None)
    if not isinstance(current, hypothesis.settings):
        return
    full = _full_settings.setdefault(id(test), current)  # parametrized items share a test
    fewer = max(10, full.max_examples // MUTATION_EXAMPLES_DIVISOR)
    test._hypothesis_internal_use_settings = hypothesis.settings(full, max_examples=fewer)  # type: ignore[attr-defined]
