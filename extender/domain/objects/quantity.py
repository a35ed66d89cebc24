"""Kubernetes resource quantities ("500m", "2Gi", "1.5") and pod resource totals.

Arithmetic is in integers of a fixed unit per resource so sums never drift:
cpu in millicores, everything else in whole units (bytes, GPUs, pods), rounded up.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from types import MappingProxyType
from typing import Any

from extender.domain.objects.accelerators import DEFAULT_ACCELERATORS, Accelerators
from extender.domain.objects.limits import quoted

GPU = "nvidia.com/gpu"
CPU = "cpu"
MEMORY = "memory"
PODS = "pods"

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}


# A dict first: JSON's objects are dicts, and the check against the Mapping ABC alone
# costs 20 times the check against dict (it ran four times for every pod read).
MAPPING_TYPES = (dict, Mapping)  # for isinstance on a hot path (model.py too)


class QuantityError(ValueError):
    """A quantity that Kubernetes would not accept (or this service cannot count)."""


# Largest quantity accepted, in base units (bytes, cores, GPUs): Kubernetes itself
# refuses quantities past 2^63-1 of their smallest scale. Without a bound, a string
# such as "1e1000000" parses exactly and then overflows Decimal arithmetic (an
# error that is not a QuantityError) or builds a million-digit integer.
MAX_QUANTITY = Decimal(2**63 - 1)


def parse_quantity(text: object) -> Decimal:
    """Parse a Kubernetes quantity into a Decimal of base units ("500m" -> 0.5).

    QuantityError for anything else: a wrong JSON type (booleans, lists, objects,
    null), NaN or infinity, a negative value, one past `MAX_QUANTITY`.
    """
    if isinstance(text, bool) or not isinstance(text, str | int | float):
        raise QuantityError(
            f"invalid quantity {quoted(text)}: must be a string or a number, not {type(text).__name__}"
        )
    if isinstance(text, int | float):
        return _bounded(_number(str(text), text), text)
    raw = text.strip()
    if not raw:
        raise QuantityError("empty quantity")
    # "NaN" and "Infinity" end in letters, and would be refused as unknown suffixes.
    with contextlib.suppress(InvalidOperation):
        if not Decimal(raw).is_finite():
            raise QuantityError(f"invalid quantity {quoted(text)}: not a finite number")
    for suffix, factor in _BINARY.items():
        if raw.endswith(suffix):
            return _bounded(_number(raw[: -len(suffix)], text), text, factor)
    # Exponent forms such as "1e3" end in a digit and parse directly.
    suffix = raw[-1] if raw[-1].isalpha() else ""
    if suffix not in _DECIMAL:
        raise QuantityError(f"invalid quantity {quoted(text)}: unknown suffix {suffix!r}")
    number = raw[: -len(suffix)] if suffix else raw
    return _bounded(_number(number, text), text, _DECIMAL[suffix])


def _number(text: str, original: object) -> Decimal:
    try:
        value = Decimal(text)
    except (InvalidOperation, ValueError):
        raise QuantityError(f"invalid quantity {quoted(original)}") from None
    if not value.is_finite():
        raise QuantityError(f"invalid quantity {quoted(original)}: not a finite number")
    return value


def _bounded(value: Decimal, original: object, factor: Decimal | int = 1) -> Decimal:
    """`value * factor`, refused when negative or past MAX_QUANTITY.

    The magnitude is checked on the exponent before multiplying, so no Decimal
    operation can overflow its context.
    """
    if value < 0:
        raise QuantityError(f"invalid quantity {quoted(original)}: must not be negative")
    if value and value.adjusted() > MAX_QUANTITY.adjusted():
        raise QuantityError(f"invalid quantity {quoted(original)}: too large")
    scaled = value * factor
    if scaled > MAX_QUANTITY:
        raise QuantityError(f"invalid quantity {quoted(original)}: too large")
    return scaled


# Distinct (resource, quantity string) pairs remembered by `to_units`. A cluster
# repeats a handful of request strings ("100m", "1Gi", "8") across thousands of
# pods, and Decimal parsing was most of the cost of reading a pod.
UNITS_CACHE_SIZE = 4096


def to_units(resource: str, quantity: object) -> int:
    """Quantity in the integer unit used for `resource` (cpu: millicores), rounded up."""
    if isinstance(quantity, str):
        return _units_of_text(resource, quantity)
    return _units(resource, quantity)


def _units(resource: str, quantity: object) -> int:
    value = parse_quantity(quantity)
    if resource == CPU:
        value *= 1000
    integral = int(value.to_integral_value(rounding="ROUND_CEILING"))
    return integral


def shown_units(resource: str, units: int) -> str:
    """`units` of `resource` as a user reads it: cpu in millicores ("1500m"), others bare."""
    return f"{units}m" if resource == CPU else str(units)


# Pure, so safe to memoise; an invalid string raises again on every call (not cached).
_units_of_text = functools.lru_cache(maxsize=UNITS_CACHE_SIZE)(_units)


def resource_list(mapping: Mapping[str, Any] | None) -> dict[str, int]:
    """A `resources.requests`-style mapping in integer units; QuantityError if unreadable."""
    if not mapping:
        return {}
    if not isinstance(mapping, MAPPING_TYPES):
        raise QuantityError(f"expected a map of quantities, not {type(mapping).__name__}")
    return {name: to_units(str(name), value) for name, value in mapping.items()}


def _add_max(total: dict[str, int], other: Mapping[str, int]) -> None:
    for name, value in other.items():
        total[name] = max(total.get(name, 0), value)


def _add_sum(total: dict[str, int], other: Mapping[str, int]) -> None:
    for name, value in other.items():
        total[name] = total.get(name, 0) + value


def pod_requests(spec: Mapping[str, Any]) -> dict[str, int]:
    """Effective requests of a pod spec, as kube-scheduler computes them.

    Mirrors component-helpers' PodRequests: containers sum; restartable (sidecar)
    init containers add to that sum; the pod needs the larger of the sum and the
    peak of any regular init container (plus the sidecars started before it);
    plus overhead. A limit without a request counts as the request (API
    defaulting does this for extended resources such as GPUs).
    """
    total: dict[str, int] = {}
    for container in spec.get("containers") or []:
        _add_sum(total, _container_requests(container))
    inits, overhead = spec.get("initContainers"), spec.get("overhead")
    if inits:  # most pods have none: their total is the containers' sum
        sidecars: dict[str, int] = {}
        init_peak: dict[str, int] = {}
        for init in inits:
            requests = _container_requests(init)
            if init.get("restartPolicy") == "Always":
                _add_sum(total, requests)
                _add_sum(sidecars, requests)
                _add_max(init_peak, sidecars)
            else:
                running = dict(requests)
                _add_sum(running, sidecars)
                _add_max(init_peak, running)
        _add_max(total, init_peak)
    if overhead:
        _add_sum(total, resource_list(overhead))
    total[PODS] = 1
    return total


# Distinct (limits, requests) pairs remembered by `_container_requests`. The replicas
# of a workload repeat their containers' resources, and converting them was the
# largest part of reading a pod from a start-up list (5 of 14 us per pod).
RESOURCES_CACHE_SIZE = 4096


def _container_requests(container: Mapping[str, Any]) -> Mapping[str, int]:
    """One container's requests, a limit standing in for a missing request.

    Read-only: the same mapping is returned for every container whose limits and
    requests are the same items in the same order.
    """
    if not isinstance(container, MAPPING_TYPES):
        raise QuantityError(f"expected a container object, not {type(container).__name__}")
    resources = container.get("resources") or {}
    if not isinstance(resources, MAPPING_TYPES):
        raise QuantityError(f"expected resources to be an object, not {type(resources).__name__}")
    limits, requests = resources.get("limits"), resources.get("requests")
    limit_items, request_items = _text_items(limits), _text_items(requests)
    if limit_items is not None and request_items is not None:
        return _merged_of_items(limit_items, request_items)
    return _merged_requests(limits, requests)


def _text_items(mapping: object) -> tuple[tuple[str, str], ...] | None:
    """The items of a quantities map as a memo key: only text names and quantities (as
    the API server sends them), since 1, 1.0 and True are one key and not one quantity;
    None for anything else, which is converted (or refused) without the memo."""
    if not mapping:
        return ()
    if not isinstance(mapping, MAPPING_TYPES):
        return None
    items = tuple(mapping.items())
    for name, value in items:
        if type(name) is not str or type(value) is not str:
            return None
    return items


def _merged_requests(limits: Any, requests: Any) -> dict[str, int]:
    merged = resource_list(limits)
    merged.update(resource_list(requests))
    return merged


# Pure, so safe to memoise; a pair that does not convert raises again on every call.
@functools.lru_cache(maxsize=RESOURCES_CACHE_SIZE)
def _merged_of_items(
    limits: tuple[tuple[str, str], ...], requests: tuple[tuple[str, str], ...]
) -> Mapping[str, int]:
    return MappingProxyType(_merged_requests(dict(limits), dict(requests)))  # shared: read-only


def pod_gpus(spec: Mapping[str, Any], accelerators: Accelerators = DEFAULT_ACCELERATORS) -> int:
    """Accelerators a pod requests, every accelerator resource counted (0 when none)."""
    return accelerators.amount(pod_requests(spec))
