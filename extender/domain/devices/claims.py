"""What a pod asks of DRA through its ResourceClaimTemplates, as resource requests.

A member with `spec.resourceClaims[].resourceClaimTemplateName` gets one claim of
its own per entry; each asks exactly N devices of a class. The planner counts them
as the class's implicit extended resource (`deviceclass.resource.kubernetes.io/<class>`),
which every node offers as many of as its matching free devices
(`inventory.DeviceInventory.capacity`). A member's claim that stays allocated
after its bind failed (kube-scheduler takes the pod out of the claim's reservedFor
and leaves the allocation) is not asked again: the member has those devices
already, and they count as taken. A claim named directly
(`resourceClaimName`, shared) is not a per-member need: its devices are taken
once, when it is allocated.

A template whose devices depend on the node (`firstAvailable`, `allocationMode:
All`) gives the member `DeviceChoice`s instead, which the planner resolves per
node (domain/devices/choices.py).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from extender.domain.devices.objects import CLASS_RESOURCE_PREFIX, ClaimTemplate, class_resource
from extender.domain.objects.device_choice import DeviceChoice
from extender.domain.objects.model import PodInfo


@dataclass(frozen=True)
class ClaimNeeds:
    requests: dict[str, int]  # class resource -> devices
    claims: tuple[str, ...]  # the pod's claim names counted in `requests`
    error: str | None  # a template missing or not countable
    choices: tuple[DeviceChoice, ...] = ()  # requests whose devices depend on the node


def claim_needs(
    spec: Mapping[str, Any],
    namespace: str,
    templates: Mapping[str, ClaimTemplate],
    held: Collection[str] = (),
) -> ClaimNeeds:
    """`held`: the pod's claims allocated to it already (left over from a failed bind),
    which need no device again."""
    requests: dict[str, int] = {}
    counted: list[str] = []
    choices: list[DeviceChoice] = []
    for entry in spec.get("resourceClaims") or []:
        if not isinstance(entry, dict):
            continue
        template_name = entry.get("resourceClaimTemplateName")
        if not template_name or entry.get("name") in held:
            # A shared claim (resourceClaimName) is counted once, when allocated; a
            # claim allocated to the pod already counts as taken (inventory.py).
            continue
        template = templates.get(f"{namespace}/{template_name}")
        if template is None:
            return ClaimNeeds({}, (), f"ResourceClaimTemplate {template_name} not found")
        if template.unsupported is not None:
            return ClaimNeeds(
                {},
                (),
                f"ResourceClaimTemplate {template_name}: {template.unsupported}, "
                "which gang-extender cannot count yet (docs/dra.md)",
            )
        claim_name = str(entry.get("name") or "")
        choices.extend(
            DeviceChoice(claim_name, str(template_name), request, alternatives)
            for request, alternatives in template.choices
        )
        if template.choices:
            continue
        for device_class, count in template.needs.items():
            resource = class_resource(device_class)
            requests[resource] = requests.get(resource, 0) + count
        counted.append(claim_name)
    return ClaimNeeds(requests, tuple(counted), None, tuple(choices))


def with_claim_needs(
    pod: PodInfo,
    spec: Mapping[str, Any],
    templates: Mapping[str, ClaimTemplate],
    held: Collection[str] = (),
) -> PodInfo:
    """`pod` with what its claim templates ask added to its requests (a gang member's
    group error when a template is missing or cannot be counted)."""
    if not spec.get("resourceClaims"):
        return pod
    needs = claim_needs(spec, pod.namespace, templates, held)
    if needs.error is not None:
        return replace(pod, group_error=pod.group_error or needs.error)
    if not needs.requests and not needs.choices:
        return pod
    requests = dict(pod.requests)
    for name, count in needs.requests.items():
        requests[name] = requests.get(name, 0) + count
    return replace(pod, requests=requests, device_claims=needs.claims, device_choices=needs.choices)


def device_shortfall(
    head: str, members: Sequence[PodInfo], misfit: PodInfo, free: Mapping[str, Mapping[str, int]]
) -> str | None:
    """A hold's words for a member short of devices of a class (None: it asks none):
    "needs 4 devices of class gpu.example.com in all (1 for m-3), 2 free, ..."."""
    for resource, amount in sorted(misfit.requests.items()):
        if not resource.startswith(CLASS_RESOURCE_PREFIX) or amount <= 0:
            continue
        need = sum(p.requests.get(resource, 0) for p in members)
        total = sum(max(0, room.get(resource, 0)) for room in free.values())
        largest = max((room.get(resource, 0) for room in free.values()), default=0)
        if amount <= largest and need <= total:
            continue  # not this class: another of its needs is short
        return (
            f"{head}: needs {need} devices of class {resource[len(CLASS_RESOURCE_PREFIX) :]} "
            f"in all ({amount} for {misfit.name}), {total} free, largest free node has {largest}"
        )
    return None
