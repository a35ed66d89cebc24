"""Every quantity Kubernetes would refuse (or this service cannot count) is a QuantityError."""

from __future__ import annotations

from decimal import Decimal

import pytest

from extender.domain.model import NodeInfo, PodInfo
from extender.domain.quantity import QuantityError, parse_quantity, pod_requests, to_units
from tests.builders import make_node, make_pod


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("1e1000000", id="decimal overflow"),
        pytest.param("1e19", id="past 2^63-1"),
        pytest.param("9Ei", id="binary suffix past 2^63-1"),
        pytest.param(2**64, id="integer past 2^63-1"),
        pytest.param(1e300, id="float past 2^63-1"),
        pytest.param("NaN", id="NaN"),
        pytest.param("Infinity", id="Infinity"),
        pytest.param("-inf", id="-Infinity"),
        pytest.param(float("nan"), id="float NaN"),
        pytest.param(float("inf"), id="float infinity"),
        pytest.param("-1", id="negative"),
        pytest.param(-2, id="negative integer"),
        pytest.param("", id="empty"),
        pytest.param("1.2.3", id="not a number"),
        pytest.param(True, id="boolean"),
        pytest.param(None, id="null"),
        pytest.param([1], id="list"),
        pytest.param({"a": 1}, id="object"),
    ],
)
def test_an_unreadable_quantity_is_a_quantity_error(value: object) -> None:
    with pytest.raises(QuantityError):
        to_units("nvidia.com/gpu", value)


@pytest.mark.parametrize(
    ("value", "expected"),
    [("500m", Decimal("0.5")), ("7Ei", Decimal(7 * 2**60)), ("1e18", Decimal(10) ** 18), (4, 4)],
)
def test_readable_quantities_still_parse(value: object, expected: Decimal) -> None:
    assert parse_quantity(value) == expected


def test_a_pod_with_a_poisoned_request_is_held_as_misdeclared_not_a_crash() -> None:
    pod = make_pod("w0").group("job").obj()
    pod["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "1e1000000"
    info = PodInfo.from_api(pod)
    assert info.group_error is not None and "too large" in info.group_error
    with pytest.raises(QuantityError):
        pod_requests(pod["spec"])


def test_a_node_with_a_poisoned_allocatable_offers_nothing() -> None:
    node = make_node("n1").obj()
    node["status"]["allocatable"]["nvidia.com/gpu"] = "NaN"
    assert NodeInfo.from_api(node).allocatable == {}
