"""The DRA devices of every node, and how many of each class remain for pods.

Pure. Kept incrementally from the watch (`upsert_*`/`delete_*`, each returning the
nodes whose count may have moved). `capacity(node, ...)` is what a node offers for
each DRA-served extended resource it does not advertise itself: the devices of its
slices (a pool's newest generation) that match the class's selectors, less those
allocated to claims.

Counting a device once: kube-scheduler creates a claim for a pod whose extended
resource DRA serves (annotation resource.kubernetes.io/extended-resource-claim,
the pod its controlling owner) and allocates it before it binds the pod. Once that
pod is bound to the node, the snapshot counts its request as used; while it waits
in the bind barrier, its gang's plan reserves it. Either way its claim is not
subtracted again (`holds`). Otherwise (a pod in neither state) the claim's devices
are subtracted: they are taken. The same holds for a gang member's claim made from
a ResourceClaimTemplate, whose devices the member's requests carry as the class's
resource (domain/devices/claims.py).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from extender.domain.devices.objects import Claim, DeviceClass, DeviceId, Slice
from extender.domain.devices.selectors import SelectorError, matches

# (claim, node) -> the claim's devices are its owner pod's requests, counted on the node
# already: used (the pod is bound there) or reserved (a gang member planned there).
Holds = Callable[[Claim, str], bool]


@dataclass
class _SliceMatches:
    """Per class, the slice's devices that match it, and why some could not be told."""

    matched: dict[str, frozenset[DeviceId]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)


class DeviceInventory:
    def __init__(self) -> None:
        self.classes: dict[str, DeviceClass] = {}
        self.slices: dict[str, Slice] = {}
        self.claims: dict[str, Claim] = {}
        self._newest: dict[tuple[str, str], int] = {}  # (driver, pool) -> generation
        self._node_slices: dict[str, set[str]] = defaultdict(set)
        self._device_node: dict[DeviceId, str] = {}
        self._owned: dict[str, set[str]] = defaultdict(set)  # pod uid -> claim keys
        self._pools: dict[tuple[str, str], set[str]] = defaultdict(set)  # -> slice names
        self._allocated: dict[DeviceId, str] = {}  # device -> the claim (key) allocated it
        self._matches: dict[str, _SliceMatches] = {}  # slice name -> its matches

    # ---- changes: each returns the nodes whose count may have moved ----
    def upsert_class(self, device_class: DeviceClass) -> set[str]:
        if self.classes.get(device_class.name) == device_class:
            return set()
        self.classes[device_class.name] = device_class
        self._matches.clear()
        return set(self._node_slices)

    def delete_class(self, name: str) -> set[str]:
        if self.classes.pop(name, None) is None:
            return set()
        self._matches.clear()
        return set(self._node_slices)

    def upsert_slice(self, slice_: Slice) -> set[str]:
        old = self.slices.get(slice_.name)
        if old == slice_:
            return set()
        touched = self._drop_slice(slice_.name)
        self.slices[slice_.name] = slice_
        self._pools[(slice_.driver, slice_.pool)].add(slice_.name)
        if slice_.node is not None:
            self._node_slices[slice_.node].add(slice_.name)
            touched.add(slice_.node)
        touched |= self._renew_pool(slice_.driver, slice_.pool)
        return touched

    def delete_slice(self, name: str) -> set[str]:
        old = self.slices.get(name)
        touched = self._drop_slice(name)
        if old is not None:
            touched |= self._renew_pool(old.driver, old.pool)
        return touched

    def upsert_claim(self, claim: Claim) -> set[str]:
        old = self.claims.get(claim.key)
        if old == claim:
            return set()
        touched = self._claim_nodes(old) if old is not None else set()
        self.claims[claim.key] = claim
        if old is not None:
            self._unallocate(old)
        for device in claim.allocated:
            self._allocated[device] = claim.key
        if old is not None and old.owner_pod is not None:
            self._owned[old.owner_pod].discard(claim.key)
        if claim.owner_pod is not None:
            self._owned[claim.owner_pod].add(claim.key)
        return touched | self._claim_nodes(claim)

    def delete_claim(self, key: str) -> set[str]:
        old = self.claims.pop(key, None)
        if old is None:
            return set()
        self._unallocate(old)
        if old.owner_pod is not None:
            owned = self._owned.get(old.owner_pod)
            if owned is not None:
                owned.discard(key)
                if not owned:
                    del self._owned[old.owner_pod]
        return self._claim_nodes(old)

    def nodes_of_pod(self, pod_uid: str) -> set[str]:
        """Nodes holding devices of claims the pod owns (its binding moves their count)."""
        nodes: set[str] = set()
        for uid in self._owned.get(pod_uid, ()):
            nodes |= self._claim_nodes(self.claims[uid])
        return nodes

    def nodes_of_claims(self, keys: Iterable[str]) -> set[str]:
        """Nodes holding devices of these claims (a pod naming them directly)."""
        nodes: set[str] = set()
        for key in keys:
            claim = self.claims.get(key)
            if claim is not None:
                nodes |= self._claim_nodes(claim)
        return nodes

    def allocated_to(self, pod_uid: str) -> dict[str, tuple[str, ...]]:
        """The pod's claims (by its names for them) allocated and reserved for it, with
        the request each device serves: kube-scheduler chose them (PreBind)."""
        return {
            claim.pod_claim_name: claim.served
            for key in self._owned.get(pod_uid, ())
            if (claim := self.claims[key]).allocated
            and not claim.left_over
            and claim.pod_claim_name is not None
        }

    def left_over(self, pod_uid: str) -> set[str]:
        """The pod's claims (by its names for them) that stay allocated after a failed
        bind: the pod has those devices already, it does not need them again."""
        return {
            claim.pod_claim_name
            for key in self._owned.get(pod_uid, ())
            if (claim := self.claims[key]).left_over and claim.pod_claim_name is not None
        }

    # ---- reads ----
    def served(self) -> dict[str, DeviceClass]:
        """Extended resource name -> the class serving it (the first by name, if several)."""
        served: dict[str, DeviceClass] = {}
        for name in sorted(self.classes):
            for resource in self.classes[name].resources:
                served.setdefault(resource, self.classes[name])
        return served

    def capacity(
        self, node: str, advertised: Mapping[str, int], holds: Holds
    ) -> tuple[dict[str, int], dict[str, str]]:
        """What `node` offers of each DRA-served resource it does not advertise, and why
        some of its devices were not counted (resource -> message).

        `holds(claim, node)`: the claim's devices count there already as its pod's
        requests (used or reserved).
        """
        offered: dict[str, int] = {}
        unreadable: dict[str, str] = {}
        slices = [self.slices[n] for n in sorted(self._node_slices.get(node, ()))]
        current = [s for s in slices if self._newest.get((s.driver, s.pool)) == s.generation]
        taken = self._taken_on(current, node, holds)
        for resource, device_class in self.served().items():
            if resource in advertised:
                continue  # a device plugin serves it there: kube-scheduler does not use DRA
            count = 0
            for slice_ in current:
                found = self._matching(slice_, device_class)
                count += len(found.matched[device_class.name] - taken)
                if device_class.name in found.errors:
                    unreadable[resource] = found.errors[device_class.name]
            if count or slices:
                offered[resource] = count
        return offered, unreadable

    def totals(self, node: str, advertised: Mapping[str, int]) -> dict[str, int]:
        """Per DRA-served resource `node` does not advertise, every device of its slices
        that matches the class, free or taken (what allocationMode All asks there)."""
        totals: dict[str, int] = {}
        slices = [self.slices[n] for n in sorted(self._node_slices.get(node, ()))]
        current = [s for s in slices if self._newest.get((s.driver, s.pool)) == s.generation]
        if not current:
            return totals
        for resource, device_class in self.served().items():
            if resource not in advertised:
                totals[resource] = sum(
                    len(self._matching(s, device_class).matched[device_class.name]) for s in current
                )
        return totals

    # ---- helpers ----
    def _taken_on(self, current: list[Slice], node: str, holds: Holds) -> set[DeviceId]:
        """Devices of `current` slices allocated to claims whose devices the snapshot does
        not count already as a bound pod's request."""
        taken: set[DeviceId] = set()
        for slice_ in current:
            for device in slice_.devices:
                uid = self._allocated.get(device.id)
                if uid is None:
                    continue
                claim = self.claims[uid]
                if holds(claim, node):
                    continue
                taken.add(device.id)
        return taken

    def _unallocate(self, claim: Claim) -> None:
        for device in claim.allocated:
            if self._allocated.get(device) == claim.key:
                del self._allocated[device]

    def _matching(self, slice_: Slice, device_class: DeviceClass) -> _SliceMatches:
        found = self._matches.setdefault(slice_.name, _SliceMatches())
        if device_class.name not in found.matched:
            matched: set[DeviceId] = set()
            for device in slice_.devices:
                try:
                    if matches(device_class.selectors, device):
                        matched.add(device.id)
                except SelectorError as err:
                    found.errors[device_class.name] = f"DeviceClass {device_class.name}: {err}"
            found.matched[device_class.name] = frozenset(matched)
        return found

    def _drop_slice(self, name: str) -> set[str]:
        old = self.slices.pop(name, None)
        self._matches.pop(name, None)
        if old is not None:
            pool = self._pools.get((old.driver, old.pool))
            if pool is not None:
                pool.discard(name)
                if not pool:
                    del self._pools[(old.driver, old.pool)]
        if old is None or old.node is None:
            return set()
        names = self._node_slices.get(old.node)
        if names is not None:
            names.discard(name)
            if not names:
                del self._node_slices[old.node]
        for device in old.devices:
            if self._device_node.get(device.id) == old.node:
                del self._device_node[device.id]
        return {old.node}

    def _renew_pool(self, driver: str, pool: str) -> set[str]:
        """Recompute the pool's newest generation and where its devices are."""
        members = [self.slices[n] for n in self._pools.get((driver, pool), ())]
        touched = {s.node for s in members if s.node is not None}
        if not members:
            self._newest.pop((driver, pool), None)
            return touched
        newest = max(s.generation for s in members)
        self._newest[(driver, pool)] = newest
        for s in members:
            for device in s.devices:
                if s.generation == newest and s.node is not None:
                    self._device_node[device.id] = s.node
        return touched

    def _claim_nodes(self, claim: Claim) -> set[str]:
        return {n for d in claim.allocated if (n := self._device_node.get(d)) is not None}
