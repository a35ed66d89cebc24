"""tests/e2e/module_order.py: the e2e modules that use Kueue or helm go last among the
e2e modules, whole, without moving anything else."""

from __future__ import annotations

from dataclasses import dataclass

from tests.e2e.module_order import LATE_BUILD_TIMEOUT_SECONDS, late_build_timeout, late_modules_last


@dataclass(frozen=True)
class Item:
    module: str
    name: str
    late: bool = False


def order(items: list[Item]) -> list[str]:
    reordered = late_modules_last(
        items,
        in_scope=lambda item: item.module.startswith("e2e/"),
        module_of=lambda item: item.module,
        is_late=lambda item: item.late,
    )
    return [f"{item.module}::{item.name}" for item in reordered]


def test_a_module_with_one_late_test_moves_whole_behind_the_other_e2e_modules() -> None:
    items = [
        Item("e2e/test_chart.py", "a", late=True),
        Item("e2e/test_chart.py", "b"),
        Item("e2e/test_dev_cli.py", "up"),
        Item("e2e/test_dev_cli.py", "kueue", late=True),
        Item("e2e/test_gang.py", "x"),
        Item("e2e/test_ha.py", "y"),
        Item("unit/test_a.py", "u"),
    ]
    assert order(items) == [
        "e2e/test_gang.py::x",
        "e2e/test_ha.py::y",
        "e2e/test_chart.py::a",
        "e2e/test_chart.py::b",
        "e2e/test_dev_cli.py::up",
        "e2e/test_dev_cli.py::kueue",
        "unit/test_a.py::u",
    ]


def test_items_outside_the_scope_keep_their_places_and_a_late_mark_there_moves_nothing() -> None:
    items = [
        Item("golden/test_g.py", "g", late=True),
        Item("e2e/test_kueue.py", "k", late=True),
        Item("e2e/test_gang.py", "x"),
        Item("unit/test_a.py", "u"),
        Item("e2e/test_ha.py", "y"),
    ]
    assert order(items) == [
        "golden/test_g.py::g",
        "e2e/test_gang.py::x",
        "e2e/test_ha.py::y",
        "unit/test_a.py::u",
        "e2e/test_kueue.py::k",
    ]


def test_without_late_tests_the_order_is_unchanged() -> None:
    items = [Item("e2e/test_b.py", "1"), Item("e2e/test_a.py", "2"), Item("unit/test_c.py", "3")]
    assert order(items) == ["e2e/test_b.py::1", "e2e/test_a.py::2", "unit/test_c.py::3"]


def test_a_test_that_may_wait_for_a_late_build_gets_the_build_timeout() -> None:
    assert LATE_BUILD_TIMEOUT_SECONDS > 900  # longer than the project-wide limit
    assert late_build_timeout(None) == LATE_BUILD_TIMEOUT_SECONDS
    assert late_build_timeout(120) == LATE_BUILD_TIMEOUT_SECONDS
    assert late_build_timeout(LATE_BUILD_TIMEOUT_SECONDS) == LATE_BUILD_TIMEOUT_SECONDS


def test_a_longer_own_timeout_or_none_at_all_stays() -> None:
    assert late_build_timeout(LATE_BUILD_TIMEOUT_SECONDS + 1) == LATE_BUILD_TIMEOUT_SECONDS + 1
    assert late_build_timeout(0) == 0
