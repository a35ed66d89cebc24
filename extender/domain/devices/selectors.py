"""A DeviceClass's CEL selectors evaluated on one device, as Kubernetes evaluates them.

With the `common-expression-language` library (the Rust `cel` crate): on the
device environment (`device.driver`, `device.attributes["domain"].name`,
`device.capacity["domain"].name`) it gave the same answers as `cel-python`,
1 to 76 us per evaluation against 1 to 3 ms (docs/dra.md#cel).

The subset served: Kubernetes' standard CEL (comparisons, strings, `in`, macros)
and its quantity functions `quantity()`, `compareTo()`, `isGreaterThan()`,
`isLessThan()`, `asInteger()`, `asApproximateFloat()` on capacities. Quantities are
strings here, so a comparison Kubernetes would refuse as a type error (a capacity
compared with a string by `==`) is not refused. An expression that does not compile
or fails on a device (a missing attribute, `semver()`, any function not served)
is an error the caller reports, never a guess: the device is not counted.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import cel

from extender.domain.devices.objects import Device
from extender.domain.objects.quantity import QuantityError, parse_quantity


class SelectorError(ValueError):
    """An expression that does not compile, fails on a device, or is not a boolean."""


def _quantity(text: Any) -> Decimal:
    try:
        return parse_quantity(text)
    except QuantityError as err:
        raise ValueError(str(err)) from None


def _checked_quantity(text: Any) -> str:
    """`quantity("40Gi")`: the text, once it reads as a quantity."""
    _quantity(text)
    return str(text)


def _compare(left: Any, right: Any) -> int:
    a, b = _quantity(left), _quantity(right)
    return (a > b) - (a < b)


def _as_integer(value: Any) -> int:
    number = _quantity(value)
    if number != number.to_integral_value():
        raise ValueError(f"quantity {value} is not an integer")
    return int(number)


_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "quantity": _checked_quantity,
    "compareTo": _compare,
    "isGreaterThan": lambda a, b: _compare(a, b) > 0,
    "isLessThan": lambda a, b: _compare(a, b) < 0,
    "asInteger": _as_integer,
    "asApproximateFloat": lambda value: float(_quantity(value)),
}


@dataclass(frozen=True)
class Compiled:
    expression: str
    program: cel.Program | None
    error: str | None


@functools.lru_cache(maxsize=1024)
def compiled(expression: str) -> Compiled:
    """One compiled program per distinct expression (classes repeat few)."""
    try:
        return Compiled(expression, cel.compile(expression), None)
    except Exception as err:  # the library raises ValueError/RuntimeError subclasses
        return Compiled(expression, None, f"does not compile: {err}")


# A device's content as a memo key (Device.content): (driver, attributes, capacity),
# each domain's values sorted. Devices of one model differ only in a few attributes
# (an index, a UUID), so across a cluster most devices repeat few contents per class.
_Content = tuple[Any, ...]


def _content(device: Device) -> _Content:
    if device.content:
        return device.content
    return (
        device.driver,
        tuple((d, tuple(sorted(v.items()))) for d, v in sorted(device.attributes.items())),
        tuple((d, tuple(sorted(v.items()))) for d, v in sorted(device.capacity.items())),
    )


def matches(expressions: tuple[str, ...], device: Device) -> bool:
    """The device matches every expression; SelectorError naming the one that cannot tell."""
    if not expressions:
        return True
    try:
        outcome = _evaluated(expressions, _content(device))
    except TypeError:  # an attribute value that is not hashable (malformed): no memo
        outcome = _evaluate(expressions, _content(device))
    if isinstance(outcome, str):
        raise SelectorError(outcome.replace("{device}", f"device {device.name}"))
    return outcome


def _evaluate(expressions: tuple[str, ...], content: _Content) -> bool | str:
    """True/False, or why the expressions cannot tell ("{device}" stands for its name)."""
    driver, attributes, capacity = content
    environment = {
        "driver": driver,
        "attributes": {domain: dict(values) for domain, values in attributes},
        "capacity": {domain: dict(values) for domain, values in capacity},
    }
    context = cel.Context(variables={"device": environment}, functions=_FUNCTIONS)
    for expression in expressions:
        program = compiled(expression)
        if program.program is None:
            return f"CEL {expression!r} {program.error}"
        try:
            result = program.program.execute(context)
        except Exception as err:
            return (
                f"CEL {expression!r} failed on {{device}} of driver {driver}: "
                f"{type(err).__name__}: {err}"
            )
        if not isinstance(result, bool):
            return f"CEL {expression!r} gave {result!r}, not a boolean"
        if not result:
            return False
    return True


# Distinct (selectors, device content) pairs remembered: a class's selectors over a
# few device models. Pure, so safe to memoise.
_evaluated = functools.lru_cache(maxsize=65536)(_evaluate)
