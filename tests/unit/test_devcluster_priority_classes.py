"""PriorityClasses for a block (extender/devcluster/priority_classes.py), shared by the
bench's gang workload and the e2e tests of priority: what is sent, which answers are
taken as fine, and that the classes go even when the block fails. The API server is
a recording stand-in here; the e2e tests of the gang queue and preemption use the
real one."""

from __future__ import annotations

from typing import Any

import pytest

from extender.devcluster.priority_classes import PRIORITY_CLASSES, temporary_priority_classes


class StatusError(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status


class Recorder:
    """Answers each (method, path) with the error of `fails`, if any; records calls."""

    def __init__(self, fails: dict[tuple[str, str], int] | None = None) -> None:
        self.fails = fails or {}
        self.calls: list[tuple[str, str, Any]] = []

    def call(self, method: str, path: str, *, body: Any = None) -> object:
        self.calls.append((method, path, body))
        status = self.fails.get((method, path))
        if status is not None:
            raise StatusError(status)
        return {}


def test_each_class_is_made_for_the_block_with_its_fields_then_deleted() -> None:
    api = Recorder()
    with temporary_priority_classes(api, {"low": 10, "high": 1000}, preemptionPolicy="Never"):
        assert [(m, p) for m, p, _ in api.calls] == [
            ("POST", PRIORITY_CLASSES),
            ("POST", PRIORITY_CLASSES),
        ]
        assert api.calls[1][2] == {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": "high"},
            "value": 1000,
            "preemptionPolicy": "Never",
        }
    assert [(m, p) for m, p, _ in api.calls[2:]] == [
        ("DELETE", f"{PRIORITY_CLASSES}/low"),
        ("DELETE", f"{PRIORITY_CLASSES}/high"),
    ]


def test_the_classes_are_deleted_when_the_block_fails_and_gone_already_is_fine() -> None:
    api = Recorder({("DELETE", f"{PRIORITY_CLASSES}/low"): 404})
    with (
        pytest.raises(RuntimeError, match="the block"),
        temporary_priority_classes(api, {"low": 10, "high": 1000}),
    ):
        raise RuntimeError("the block")
    assert [m for m, _, _ in api.calls] == ["POST", "POST", "DELETE", "DELETE"]


@pytest.mark.parametrize(
    ("fails", "exist_ok", "raised"),
    [
        pytest.param({("POST", PRIORITY_CLASSES): 409}, True, None, id="there already: taken"),
        pytest.param(
            {("POST", PRIORITY_CLASSES): 409}, False, 409, id="there already: an error unless told"
        ),
        pytest.param({("POST", PRIORITY_CLASSES): 403}, True, 403, id="refused: an error"),
        pytest.param(
            {("DELETE", f"{PRIORITY_CLASSES}/low"): 500}, False, 500, id="delete failed: an error"
        ),
    ],
)
def test_which_answers_are_taken_as_fine(
    fails: dict[tuple[str, str], int], exist_ok: bool, raised: int | None
) -> None:
    api = Recorder(fails)
    if raised is None:
        with temporary_priority_classes(api, {"low": 10}, exist_ok=exist_ok):
            pass
        assert [m for m, _, _ in api.calls] == ["POST", "DELETE"]
        return
    with (
        pytest.raises(StatusError) as caught,
        temporary_priority_classes(api, {"low": 10}, exist_ok=exist_ok),
    ):
        pass
    assert caught.value.status == raised
