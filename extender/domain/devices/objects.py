"""DeviceClasses, ResourceSlices and ResourceClaims read from resource.k8s.io/v1 JSON.

Only what counting devices needs: a class's selectors and the resource names that
request it, a slice's node and devices, a claim's allocated devices and its owner.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from extender.domain.objects.device_choice import DeviceAlternative

# The implicit extended resource name of a DeviceClass (KEP-5004): a pod may ask for
# `deviceclass.resource.kubernetes.io/<class>: N` whatever its extendedResourceName.
CLASS_RESOURCE_PREFIX = "deviceclass.resource.kubernetes.io/"
# kube-scheduler's mark on the claim it creates for a pod whose extended resource is
# served by DRA (resourceapi.ExtendedResourceClaimAnnotation); the pod owns the claim.
EXTENDED_RESOURCE_CLAIM_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"

# On a claim made from a pod's ResourceClaimTemplate: the pod's name for the claim
# (spec.resourceClaims[].name) (resourceapi.PodResourceClaimAnnotation).
POD_CLAIM_NAME_ANNOTATION = "resource.kubernetes.io/pod-claim-name"

# A device is named by its driver, its pool and its name (as a claim's allocation names it).
DeviceId = tuple[str, str, str]


def class_resource(class_name: str) -> str:
    """The implicit extended resource name of a DeviceClass."""
    return f"{CLASS_RESOURCE_PREFIX}{class_name}"


@dataclass(frozen=True)
class DeviceClass:
    name: str
    selectors: tuple[str, ...]  # CEL expressions, all of which a device must match
    extended_resource: str | None  # spec.extendedResourceName

    @property
    def resources(self) -> tuple[str, ...]:
        """The extended resource names a pod may request this class by."""
        implicit = class_resource(self.name)
        if self.extended_resource and self.extended_resource != implicit:
            return (self.extended_resource, implicit)
        return (implicit,)

    @classmethod
    def from_api(cls, obj: Mapping[str, Any]) -> DeviceClass:
        spec = obj.get("spec") or {}
        selectors = tuple(
            str(expr)
            for selector in spec.get("selectors") or []
            if isinstance(selector, dict)
            and (expr := (selector.get("cel") or {}).get("expression"))
        )
        extended = spec.get("extendedResourceName")
        return cls(
            name=str(obj["metadata"]["name"]),
            selectors=selectors,
            extended_resource=str(extended) if extended else None,
        )


@dataclass(frozen=True)
class Device:
    driver: str
    pool: str
    name: str
    # Attributes by domain, then by name (`device.attributes["gpu.nvidia.com"].model`):
    # an unqualified attribute name belongs to the driver's domain.
    attributes: Mapping[str, Mapping[str, Any]]
    # Capacities by domain, then by name, as quantity strings.
    capacity: Mapping[str, Mapping[str, str]]
    # (driver, attributes, capacity) as sorted tuples: the CEL memo's key
    # (selectors.py), computed once when the slice is read.
    content: tuple[Any, ...] = field(default=(), compare=False, repr=False)

    @property
    def id(self) -> DeviceId:
        return (self.driver, self.pool, self.name)


@dataclass(frozen=True)
class Slice:
    name: str
    driver: str
    pool: str
    generation: int  # of the pool: only a pool's newest slices count
    node: str | None  # spec.nodeName; None: devices not bound to one node (not counted)
    devices: tuple[Device, ...]
    # Why the slice's devices are not counted (allNodes, a node selector), or None.
    unsupported: str | None = None

    @classmethod
    def from_api(cls, obj: Mapping[str, Any]) -> Slice:
        spec = obj.get("spec") or {}
        driver = str(spec.get("driver") or "")
        pool = spec.get("pool") or {}
        pool_name = str(pool.get("name") or "")
        node = spec.get("nodeName") or None
        unsupported = None
        if node is None:
            how = next(
                (k for k in ("allNodes", "nodeSelector", "perDeviceNodeSelection") if spec.get(k)),
                "no nodeName",
            )
            unsupported = f"ResourceSlice {obj['metadata']['name']} ({how}) is not per node"
        devices = tuple(
            _device(driver, pool_name, raw)
            for raw in spec.get("devices") or []
            if isinstance(raw, dict)
        )
        return cls(
            name=str(obj["metadata"]["name"]),
            driver=driver,
            pool=pool_name,
            generation=int(pool.get("generation") or 0),
            node=str(node) if node else None,
            devices=devices,
            unsupported=unsupported,
        )


def _device(driver: str, pool: str, raw: Mapping[str, Any]) -> Device:
    attributes: dict[str, dict[str, Any]] = {}
    for name, value in (raw.get("attributes") or {}).items():
        domain, _, short = str(name).rpartition("/")
        attributes.setdefault(domain or driver, {})[short] = _attribute_value(value)
    capacity: dict[str, dict[str, str]] = {}
    for name, value in (raw.get("capacity") or {}).items():
        domain, _, short = str(name).rpartition("/")
        quantity = value.get("value") if isinstance(value, dict) else value
        capacity.setdefault(domain or driver, {})[short] = str(quantity)
    content = (
        driver,
        tuple((d, tuple(sorted(v.items()))) for d, v in sorted(attributes.items())),
        tuple((d, tuple(sorted(v.items()))) for d, v in sorted(capacity.items())),
    )
    return Device(driver, pool, str(raw.get("name") or ""), attributes, capacity, content)


def _attribute_value(value: Any) -> Any:
    """A DeviceAttribute ({"int": 1} / {"bool": ..} / {"string": ..} / {"version": ..})."""
    if not isinstance(value, dict):
        return value
    for kind in ("int", "bool", "string", "version"):
        if kind in value:
            return value[kind]
    return None


@dataclass(frozen=True)
class Claim:
    key: str  # namespace/name
    namespace: str
    name: str
    # The Pod that controls the claim (a claim from a template, or kube-scheduler's
    # extended-resource claim), by uid; None for a claim made by hand.
    owner_pod: str | None
    extended: bool  # kube-scheduler's claim for a pod's DRA-served extended resources
    allocated: tuple[DeviceId, ...]  # status.allocation.devices.results
    # Made from a template for the owner pod's claim of this name (None: not from one).
    pod_claim_name: str | None = None
    # status.reservedFor, the uids of the pods: kube-scheduler reserves the claim for
    # the pod as it allocates it, and takes the pod out when the pod's bind fails.
    reserved_for: tuple[str, ...] = ()
    # The request each allocated device serves ("r", or "r/s0" for a firstAvailable
    # subrequest), in the order of `allocated`.
    served: tuple[str, ...] = ()
    # What its spec.devices asks (a claim named directly by pods, not allocated yet,
    # is a need of their gang: domain/devices/claims.py).
    asks: ClaimTemplate | None = None

    @property
    def left_over(self) -> bool:
        """Allocated, its owner pod not among its consumers: what kube-scheduler leaves
        of a pod's claim when its bind failed (the allocation stays, the pod's
        reservation goes). The pod keeps the devices when it is scheduled again."""
        return bool(self.allocated) and self.owner_pod not in self.reserved_for

    @classmethod
    def from_api(cls, obj: Mapping[str, Any]) -> Claim:
        meta = obj["metadata"]
        owner = next(
            (
                str(ref.get("uid"))
                for ref in meta.get("ownerReferences") or []
                if isinstance(ref, dict) and ref.get("kind") == "Pod" and ref.get("controller")
            ),
            None,
        )
        annotations = meta.get("annotations") or {}
        allocation = (obj.get("status") or {}).get("allocation") or {}
        results = (allocation.get("devices") or {}).get("results") or []
        allocated = tuple(
            (str(r.get("driver")), str(r.get("pool")), str(r.get("device")))
            for r in results
            if isinstance(r, dict)
        )
        return cls(
            key=f"{meta.get('namespace') or 'default'}/{meta['name']}",
            namespace=str(meta.get("namespace") or "default"),
            name=str(meta["name"]),
            owner_pod=owner,
            extended=annotations.get(EXTENDED_RESOURCE_CLAIM_ANNOTATION) == "true",
            allocated=allocated,
            pod_claim_name=annotations.get(POD_CLAIM_NAME_ANNOTATION),
            served=tuple(str(r.get("request") or "") for r in results if isinstance(r, dict)),
            reserved_for=tuple(
                str(ref.get("uid"))
                for ref in (obj.get("status") or {}).get("reservedFor") or []
                if isinstance(ref, dict)
            ),
            asks=None
            if owner is not None or allocated
            else ClaimTemplate.of_devices(
                f"{meta.get('namespace') or 'default'}/{meta['name']}",
                ((obj.get("spec") or {}).get("devices")) or {},
            ),
        )


@dataclass(frozen=True)
class ClaimTemplate:
    """A ResourceClaimTemplate: the devices each claim made from it asks, per class.

    Requests of `exactly` N devices (ExactCount) are `needs`. When one request's
    devices depend on the node (`firstAvailable`, `allocationMode: All`), every
    request of the template is a choice instead (`choices`, in the template's
    order): the claim is then served on a node as a whole, first fit per request.
    """

    key: str  # namespace/name
    needs: Mapping[str, int]  # DeviceClass name -> devices, exactly
    # Why its requests cannot be counted as devices of a class, or None.
    unsupported: str | None = None
    # (request name, its alternatives), when a request depends on the node.
    choices: tuple[tuple[str, tuple[DeviceAlternative, ...]], ...] = ()

    @classmethod
    def from_api(cls, obj: Mapping[str, Any]) -> ClaimTemplate:
        meta = obj["metadata"]
        key = f"{meta.get('namespace') or 'default'}/{meta['name']}"
        devices = (((obj.get("spec") or {}).get("spec") or {}).get("devices")) or {}
        return cls.of_devices(key, devices)

    @classmethod
    def of_devices(cls, key: str, devices: Mapping[str, Any]) -> ClaimTemplate:
        """What a claim's `spec.devices` asks (a template's, or a claim's own)."""
        requests: list[tuple[str, tuple[DeviceAlternative, ...]]] = []
        for request in devices.get("requests") or []:
            if not isinstance(request, dict):
                continue
            name = str(request.get("name") or "")
            exactly = request.get("exactly")
            if isinstance(exactly, dict):
                alternative = _alternative(name, exactly)
                if isinstance(alternative, str):
                    return cls(key, {}, f"request {name!r} {alternative}")
                requests.append((name, (alternative,)))
                continue
            subrequests = request.get("firstAvailable")
            if not isinstance(subrequests, list) or not subrequests:
                return cls(key, {}, f"request {name!r} has neither exactly nor firstAvailable")
            alternatives: list[DeviceAlternative] = []
            for sub in subrequests:
                if not isinstance(sub, dict):
                    continue
                sub_name = f"{name}/{sub.get('name') or ''}"
                alternative = _alternative(sub_name, sub)
                if isinstance(alternative, str):
                    return cls(key, {}, f"subrequest {sub_name!r} {alternative}")
                alternatives.append(alternative)
            requests.append((name, tuple(alternatives)))
        if any(len(alts) != 1 or alts[0].count is None for _, alts in requests):
            return cls(key, {}, choices=tuple(requests))
        needs: dict[str, int] = {}
        for _, (alternative,) in requests:
            class_name = alternative.resource[len(CLASS_RESOURCE_PREFIX) :]
            needs[class_name] = needs.get(class_name, 0) + (alternative.count or 0)
        return cls(key, needs)


def _alternative(name: str, request: Mapping[str, Any]) -> DeviceAlternative | str:
    """One (sub)request as devices of a class, or why it cannot be counted."""
    mode = request.get("allocationMode") or "ExactCount"
    class_name = str(request.get("deviceClassName") or "")
    if mode == "All":
        return DeviceAlternative(class_resource(class_name), None, name)
    if mode != "ExactCount":
        return f"uses allocationMode {mode}"
    count = request.get("count", 1)
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        return f"has count {count!r}"
    return DeviceAlternative(class_resource(class_name), count, name)
