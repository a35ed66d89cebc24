"""A member's DRA claim request whose devices depend on the node: data only.

A ResourceClaimTemplate request with `firstAvailable` (subrequests tried in order,
the first that can be allocated on the node wins, as kube-scheduler's allocator
does) or `allocationMode: All` (every device of the class on the node, none of
them taken, at least one) asks no fixed number of devices. The member carries such
requests as `DeviceChoice`s beside its fixed `requests`; domain/devices/choices.py
turns them into requests on one node.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DeviceAlternative:
    """One way to serve a request: `count` devices of the class whose implicit extended
    resource is `resource`, or every such device of the node (`count` None: All)."""

    resource: str  # deviceclass.resource.kubernetes.io/<class>
    count: int | None
    name: str  # the (sub)request's name, for holds


@dataclass(frozen=True)
class DeviceChoice:
    """A claim request served by the first of its alternatives that fits the node."""

    claim: str  # the pod's name for the claim (spec.resourceClaims[].name)
    source: str  # "ResourceClaimTemplate <name>" or "ResourceClaim <name>", for holds
    request: str
    alternatives: tuple[DeviceAlternative, ...]


@dataclass(frozen=True)
class SharedClaim:
    """A ResourceClaim named directly by members (`resourceClaimName`), not allocated
    yet: a need of their gang, counted once, on the one node all of them share it on
    (its devices are node-local). The planner places the members naming it together
    (domain/planning/sharers.py)."""

    key: str  # namespace/name
    requests: tuple[tuple[str, int], ...]  # class resource -> devices, exactly
    choices: tuple[DeviceChoice, ...]  # its requests whose devices depend on the node
