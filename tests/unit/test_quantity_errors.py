"""Every quantity Kubernetes would refuse (or this service cannot count) is a QuantityError."""

from __future__ import annotations

from decimal import Decimal

import pytest

from extender.domain.objects.model import NodeInfo, PodInfo
from extender.domain.objects.quantity import (
    QuantityError,
    parse_quantity,
    pod_requests,
    shown_units,
    to_units,
)
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


# ---- the exact message a user reads, and the exact edges ----
@pytest.mark.parametrize(
    ("value", "message"),
    [
        pytest.param(
            True,
            "invalid quantity True: must be a string or a number, not bool",
            id="boolean",
        ),
        pytest.param(
            [1], "invalid quantity [1]: must be a string or a number, not list", id="list"
        ),
        pytest.param("", "empty quantity", id="empty"),
        pytest.param("   ", "empty quantity", id="blank"),
        pytest.param("1.2.3", "invalid quantity '1.2.3'", id="not a number"),
        pytest.param("xKi", "invalid quantity 'xKi'", id="not a number before a binary suffix"),
        pytest.param("1Q", "invalid quantity '1Q': unknown suffix 'Q'", id="unknown suffix"),
        pytest.param("NaNm", "invalid quantity 'NaNm': not a finite number", id="NaN milli"),
        pytest.param("NaN", "invalid quantity 'NaN': not a finite number", id="plain NaN"),
        pytest.param(
            "Infinity", "invalid quantity 'Infinity': not a finite number", id="plain Infinity"
        ),
        pytest.param(
            "InfKi", "invalid quantity 'InfKi': not a finite number", id="infinite binary"
        ),
        pytest.param(float("nan"), "invalid quantity nan: not a finite number", id="float NaN"),
        pytest.param("-1", "invalid quantity '-1': must not be negative", id="negative"),
        pytest.param(-2, "invalid quantity -2: must not be negative", id="negative integer"),
        pytest.param("-1Ki", "invalid quantity '-1Ki': must not be negative", id="negative binary"),
        pytest.param("1e19", "invalid quantity '1e19': too large", id="exponent past 2^63-1"),
        pytest.param("8Ei", "invalid quantity '8Ei': too large", id="8Ei is 2^63"),
        pytest.param(
            str(2**63), "invalid quantity '9223372036854775808': too large", id="2^63 written out"
        ),
    ],
)
def test_an_unreadable_quantity_says_which_and_why(value: object, message: str) -> None:
    with pytest.raises(QuantityError) as raised:
        parse_quantity(value)
    assert str(raised.value) == message


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param(2**63 - 1, Decimal(2**63 - 1), id="2^63-1 itself, a number"),
        pytest.param(str(2**63 - 1), Decimal(2**63 - 1), id="2^63-1 itself, a string"),
        pytest.param("0", Decimal(0), id="zero"),
        pytest.param(0, Decimal(0), id="zero, a number"),
        pytest.param("0.5", Decimal("0.5"), id="a fraction below one"),
        pytest.param("100n", Decimal("1e-7"), id="nano"),
    ],
)
def test_quantities_at_the_edges_are_accepted(value: object, expected: Decimal) -> None:
    assert parse_quantity(value) == expected


@pytest.mark.parametrize(
    ("resource", "value", "units"),
    [
        pytest.param("cpu", 2, 2000, id="cpu counts in millicores"),
        pytest.param("cpu", 0.0015, 2, id="cpu rounds up to the next millicore"),
        pytest.param("memory", 3, 3, id="memory counts in bytes"),
        pytest.param("memory", 0.1, 1, id="a fraction of a byte is a whole byte"),
        pytest.param("nvidia.com/gpu", 2.2, 3, id="a fraction of a GPU is a whole GPU"),
        pytest.param("nvidia.com/gpu", 0, 0, id="no GPU"),
    ],
)
def test_numbers_count_in_the_unit_of_their_resource(
    resource: str, value: object, units: int
) -> None:
    # JSON numbers, not strings: these bypass the memo of string quantities.
    assert to_units(resource, value) == units


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        pytest.param(
            {"containers": ["main"]},
            "unreadable resource request: expected a container object, not str",
            id="container not an object",
        ),
        pytest.param(
            {"containers": [{"name": "main", "resources": "cpu: 1"}]},
            "unreadable resource request: expected resources to be an object, not str",
            id="resources not an object",
        ),
        pytest.param(
            {"containers": [{"name": "main", "resources": {"requests": ["cpu"]}}]},
            "unreadable resource request: expected a map of quantities, not list",
            id="requests not a map",
        ),
        pytest.param(
            {"containers": [{"name": "main"}], "overhead": ["cpu"]},
            "unreadable resource request: expected a map of quantities, not list",
            id="overhead not a map",
        ),
    ],
)
def test_a_pod_of_the_wrong_shape_is_held_saying_which_part(
    spec: dict[str, object], message: str
) -> None:
    pod = make_pod("w0").group("job").obj()
    pod["spec"] = spec
    assert PodInfo.from_api(pod).group_error == message


@pytest.mark.parametrize(
    ("resource", "units", "shown"),
    [
        ("cpu", 3000, "3000m"),
        ("cpu", 0, "0m"),
        ("memory", 1024, "1024"),
        ("nvidia.com/gpu", 2, "2"),
    ],
)
def test_messages_show_cpu_in_millicores_and_others_bare(
    resource: str, units: int, shown: str
) -> None:
    assert shown_units(resource, units) == shown
