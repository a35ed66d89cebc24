"""What a pod asks of DRA through its ResourceClaimTemplates, as resource requests.

A member with `spec.resourceClaims[].resourceClaimTemplateName` gets one claim of
its own per entry; each asks exactly N devices of a class. The planner counts them
as the class's implicit extended resource (`deviceclass.resource.kubernetes.io/<class>`),
which every node offers as many of as its matching free devices
(`inventory.DeviceInventory.capacity`). A member's claim that stays allocated
after its bind failed (kube-scheduler takes the pod out of the claim's reservedFor
and leaves the allocation) is not asked again: the member has those devices
already, and they count as taken. A claim named directly
(`resourceClaimName`, shared) is not a per-member need: once allocated, its
devices are taken, once; before that it is a need of the gang, counted once, on
the one node its members share it on (domain/planning/sharers.py).

A template whose devices depend on the node (`firstAvailable`, `allocationMode:
All`) gives the member `DeviceChoice`s instead, which the planner resolves per
node (domain/devices/choices.py).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from extender.domain.devices.objects import (
    CLASS_RESOURCE_PREFIX,
    Claim,
    ClaimTemplate,
    class_resource,
)
from extender.domain.objects.device_choice import DeviceChoice, SharedClaim
from extender.domain.objects.model import PodInfo


@dataclass(frozen=True)
class ClaimNeeds:
    requests: dict[str, int]  # class resource -> devices
    claims: tuple[str, ...]  # the pod's claim names counted in `requests`
    error: str | None  # a template missing or not countable
    choices: tuple[DeviceChoice, ...] = ()  # requests whose devices depend on the node
    shared: tuple[SharedClaim, ...] = ()  # claims named directly, not allocated yet
    named: tuple[str, ...] = ()  # keys of the claims named directly


def claim_needs(
    spec: Mapping[str, Any],
    namespace: str,
    templates: Mapping[str, ClaimTemplate],
    held: Collection[str] = (),
    claims: Mapping[str, Claim] | None = None,
    allocated: Mapping[str, Sequence[str]] | None = None,
) -> ClaimNeeds:
    """`held`: the pod's claims allocated to it already (left over from a failed bind),
    which need no device again. `claims`: the ResourceClaims by key, for the claims
    the pod names directly (None: not looked at). `allocated`: the pod's claims
    kube-scheduler allocated and reserved for it, with the request each device
    serves: a request with choices then asks what was allocated for it."""
    requests: dict[str, int] = {}
    counted: list[str] = []
    choices: list[DeviceChoice] = []
    shared: list[SharedClaim] = []
    named: list[str] = []
    for entry in spec.get("resourceClaims") or []:
        if not isinstance(entry, dict):
            continue
        claim_name = entry.get("resourceClaimName")
        if claim_name and claims is not None:
            named.append(f"{namespace}/{claim_name}")
            need = _shared_need(str(entry.get("name") or ""), str(claim_name), namespace, claims)
            if isinstance(need, str):
                return ClaimNeeds({}, (), need)
            if need is not None:
                shared.append(need)
            continue
        template_name = entry.get("resourceClaimTemplateName")
        if not template_name or entry.get("name") in held:
            # A claim allocated to the pod already counts as taken (inventory.py).
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
        pod_claim = str(entry.get("name") or "")
        served = (allocated or {}).get(pod_claim)
        if template.choices and served is not None:
            for resource, count in _as_allocated(template, served).items():
                requests[resource] = requests.get(resource, 0) + count
            counted.append(pod_claim)
            continue
        choices.extend(
            DeviceChoice(pod_claim, f"ResourceClaimTemplate {template_name}", request, alternatives)
            for request, alternatives in template.choices
        )
        if template.choices:
            continue
        for device_class, count in template.needs.items():
            resource = class_resource(device_class)
            requests[resource] = requests.get(resource, 0) + count
        counted.append(pod_claim)
    return ClaimNeeds(requests, tuple(counted), None, tuple(choices), tuple(shared), tuple(named))


def _as_allocated(template: ClaimTemplate, served: Sequence[str]) -> dict[str, int]:
    """What a claim with choices holds once allocated: per class, the devices of the
    (sub)request each allocated device serves."""
    names = {a.name: a.resource for _, alternatives in template.choices for a in alternatives}
    held: dict[str, int] = {}
    first = template.choices[0][1][0].resource
    for request in served:
        # A request name not in the template (not expected): its device still counts.
        resource = names.get(request, first)
        held[resource] = held.get(resource, 0) + 1
    return held


def _shared_need(
    pod_claim: str, claim_name: str, namespace: str, claims: Mapping[str, Claim]
) -> SharedClaim | str | None:
    """What a claim named directly asks of its members' gang: None once it is allocated
    (its devices are taken, once), or why it cannot be counted."""
    claim = claims.get(f"{namespace}/{claim_name}")
    if claim is None:
        return f"ResourceClaim {claim_name} not found"
    if claim.allocated or claim.asks is None:
        return None
    if claim.asks.unsupported is not None:
        return (
            f"ResourceClaim {claim_name}: {claim.asks.unsupported}, "
            "which gang-extender cannot count yet (docs/dra.md)"
        )
    return SharedClaim(
        claim.key,
        tuple(sorted((class_resource(c), n) for c, n in claim.asks.needs.items())),
        tuple(
            DeviceChoice(pod_claim, f"ResourceClaim {claim_name}", request, alternatives)
            for request, alternatives in claim.asks.choices
        ),
    )


def with_claim_needs(
    pod: PodInfo,
    spec: Mapping[str, Any],
    templates: Mapping[str, ClaimTemplate],
    held: Collection[str] = (),
    claims: Mapping[str, Claim] | None = None,
    allocated: Mapping[str, Sequence[str]] | None = None,
) -> PodInfo:
    """`pod` with what its claim templates ask added to its requests, and the claims it
    names directly that are not allocated yet (a gang member's group error when a
    template or claim is missing or cannot be counted)."""
    if not spec.get("resourceClaims"):
        return pod
    needs = claim_needs(spec, pod.namespace, templates, held, claims, allocated)
    if needs.error is not None:
        return replace(pod, group_error=pod.group_error or needs.error)
    if needs.named:
        pod = replace(pod, shared_claims=needs.shared, named_claims=needs.named)
    if not needs.requests and not needs.choices and not needs.claims:
        return pod
    requests = dict(pod.requests)
    for name, count in needs.requests.items():
        requests[name] = requests.get(name, 0) + count
    return replace(pod, requests=requests, device_claims=needs.claims, device_choices=needs.choices)


def pin_of(nodes: Collection[str]) -> str | None:
    """The node a pod's left-over claims tie it to: their devices are node-local, so
    kube-scheduler offers the pod that node alone. None when they hold devices on no
    node, or on several (then no node can take the pod, which kube-scheduler's own
    filter reports)."""
    return next(iter(nodes)) if len(nodes) == 1 else None


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
