"""Unit-test fixtures shared by every file here."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from extender.domain.quantity import _units_of_text


@pytest.fixture(autouse=True)
def _fresh_quantity_cache() -> Iterator[None]:
    """Each test parses quantity strings itself: the module's parse cache would let one
    test's answers stand in for another's, and hide a mutated parser from mutmut, whose
    forked runs inherit a filled cache."""
    _units_of_text.cache_clear()
    yield
