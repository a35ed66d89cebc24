"""What the service knows about the cluster, fed by the watch cache.

`ClusterState` is the watch cache's sink: it applies list pages and watch events
to the pure core (nodes, pods, PodGroups) and keeps the raw objects the group
reconciler and the effect writer need (each group's pod JSON, PodGroups,
namespace labels), plus the set of groups that changed since the reconciler last
looked. It runs on the event loop thread only, so nothing here is locked.

One unreadable object (a poisoned quantity, a field of the wrong JSON type) is
logged, counted in gang_extender_cache_rejected_objects_total{kind} and skipped:
the rest of its list page is applied, so the cache still syncs and the replica
still becomes Ready. A rejected object still counts as present in a relist, so
what this replica knew of it is not dropped because of it.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from extender.domain.cluster.claim_holds import claim_held
from extender.domain.cluster.foreign_podgroups import (
    SOURCE_COSCHEDULING,
    SOURCE_OURS,
    SOURCE_VOLCANO,
    volcano_group_spec,
)
from extender.domain.devices.claims import pin_of, with_claim_needs
from extender.domain.devices.inventory import DeviceInventory
from extender.domain.devices.nodes import with_devices
from extender.domain.devices.objects import Claim, ClaimTemplate, DeviceClass, Slice
from extender.domain.gang.core_api import SchedulingCore
from extender.domain.objects.membership import (
    INJECT_NAMESPACE_LABEL,
    GroupKey,
    MembershipError,
    WorkloadRef,
    workload_ref,
)
from extender.domain.objects.model import (
    UPSTREAM_PODGROUP_SOURCE,
    UPSTREAM_WORKLOAD_SOURCE,
    GroupSpec,
    NodeInfo,
    PodInfo,
    upstream_podgroup_spec,
    upstream_workload_spec,
)
from extender.kube.cache import CacheSink
from extender.kube.ownership import OwnershipSeal
from extender.kube.resources import (
    DEVICE_CLASSES,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    UPSTREAM_PODGROUPS,
    UPSTREAM_WORKLOADS,
)
from extender.metrics import Metrics

log = logging.getLogger(__name__)

UPSTREAM_KIND = UPSTREAM_PODGROUPS.kind
# Namespaces remembered as deleted, oldest forgotten first: a member's bind that the
# API server refused while its namespace was terminating is reported seconds later,
# often after the namespace's DELETED event.
DELETED_NAMESPACE_MEMORY = 4096
WORKLOAD_KIND = UPSTREAM_WORKLOADS.kind


class ClusterState(CacheSink):
    """Applies cache traffic to the core and remembers what the reconciler needs.

    `flush_effects` is called after every page and event, so what the core emitted
    on the way (a plan dropped because a member was deleted) is carried out.
    """

    def __init__(
        self,
        core: SchedulingCore,
        flush_effects: Callable[[], None],
        metrics: Metrics | None = None,
        on_member_deleted: Callable[[GroupKey, dict[str, Any]], None] | None = None,
        seal: OwnershipSeal | None = None,
    ) -> None:
        self.core = core
        # Only placeholder pods this service created (sealed: kube/ownership.py) are a
        # gang's room; a pod that merely carries the label is any other pod.
        self.seal = seal if seal is not None else OwnershipSeal()
        # The lifecycle controller: a deleted member's last object (its eviction mark).
        self.on_member_deleted = on_member_deleted
        self.flush_effects = flush_effects
        self.metrics = metrics
        self.rejected = 0  # objects skipped as unreadable, since start
        self.group_pods: dict[GroupKey, dict[str, dict[str, Any]]] = defaultdict(dict)
        self.podgroups: dict[GroupKey, dict[str, Any]] = {}
        self.coscheduling_podgroups: dict[GroupKey, dict[str, Any]] = {}
        self.volcano_podgroups: dict[GroupKey, dict[str, Any]] = {}
        # Kubernetes' own scheduling.k8s.io PodGroups (the Workload API), when served.
        self.upstream_podgroups: dict[GroupKey, dict[str, Any]] = {}
        # Kubernetes 1.35's Workloads (namespace/name), when served. A Workload sizes
        # one gang per pod group entry and replica key its pods name (`workload_groups`:
        # each gang seen in a member's spec.workloadRef, by its Workload).
        self.workloads: dict[GroupKey, dict[str, Any]] = {}
        self.workload_groups: dict[GroupKey, dict[GroupKey, WorkloadRef]] = defaultdict(dict)
        self._workload_of: dict[GroupKey, GroupKey] = {}
        self.namespace_labels: dict[str, dict[str, str]] = {}
        # Namespaces being deleted: the API server refuses every create in them (403),
        # so nothing is recreated there (controller/lifecycle.py).
        self.terminating_namespaces: set[str] = set()
        # ... and namespaces deleted since (bounded; a namespace made again leaves it).
        self.deleted_namespaces: dict[str, None] = {}
        self.dirty: set[GroupKey] = set()
        self._relisting: dict[str, set[str]] = {}
        # DRA (docs/dra.md): the devices, and each node as its Node object says; the
        # core gets the node with its DRA-served resources added (`_apply_node`).
        self.devices = DeviceInventory()
        self.api_nodes: dict[str, NodeInfo] = {}
        # ResourceClaimTemplates (namespace/name): what a member's own claims ask.
        self.claim_templates: dict[str, ClaimTemplate] = {}

    # ---- CacheSink ----
    def on_page(self, kind: str, items: list[dict[str, Any]], first: bool, last: bool) -> None:
        seen = self._relisting.setdefault(kind, set()) if not first else set()
        self._relisting[kind] = seen
        for obj in items:
            # No readable identity: rejected below, nothing to keep for it.
            with contextlib.suppress(Exception):
                seen.add(self._identity(kind, obj))
            self._apply_or_reject(kind, "ADDED", obj)
        if last:
            self._forget_missing(kind, self._relisting.pop(kind))
        self.flush_effects()

    def on_event(self, kind: str, event_type: str, obj: dict[str, Any]) -> None:
        self._apply_or_reject(kind, event_type, obj)
        self.flush_effects()

    def _apply_or_reject(self, kind: str, event_type: str, obj: Any) -> None:
        try:
            if not isinstance(obj, dict):
                raise TypeError(f"expected an object, got {type(obj).__name__}")
            self._apply(kind, event_type, obj)
        except Exception as err:
            self.rejected += 1
            if self.metrics is not None:
                self.metrics.cache_rejected_objects.labels(kind=kind).inc()
            log.warning(
                "skipped an unreadable %s object (%s) from %s: %s: %s",
                kind,
                _describe(obj),
                event_type,
                type(err).__name__,
                err,
            )

    @staticmethod
    def _identity(kind: str, obj: dict[str, Any]) -> str:
        meta = obj.get("metadata") or {}
        if kind == "pods":
            return str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}")
        return f"{meta.get('namespace', '')}/{meta.get('name')}"

    def _forget_missing(self, kind: str, seen: set[str]) -> None:
        """After a relist, drop what the list no longer has (deleted while unwatched)."""
        now = time.time()
        if kind == "pods":
            for uid in [u for u in self.core.snapshot.pods if u not in seen]:
                pod = self.core.snapshot.pods[uid]
                self._drop_pod_json(pod)
                self.core.forget_pod(uid, now)
        elif kind == "nodes":
            for name in [n for n in self.core.snapshot.nodes if f"/{n}" not in seen]:
                self.api_nodes.pop(name, None)
                self.core.forget_node(name)
        elif kind == RESOURCE_CLAIM_TEMPLATES.kind:
            for template in [k for k in self.claim_templates if k not in seen]:
                self._template_change(template, None)
        elif kind in _DEVICE_KINDS:
            names: list[str] = list(
                self.devices.classes
                if kind == DEVICE_CLASSES.kind
                else self.devices.slices
                if kind == RESOURCE_SLICES.kind
                else self.devices.claims
            )
            prefix = "/" if kind != RESOURCE_CLAIMS.kind else ""
            for name in [n for n in names if f"{prefix}{n}" not in seen]:
                self._device_change(kind, name, None)
        elif kind in _PODGROUP_KINDS:
            store = self._podgroup_store(kind)
            for key in [k for k in store if f"{k.namespace}/{k.name}" not in seen]:
                self._apply(kind, "DELETED", store[key])
        elif kind == WORKLOAD_KIND:
            for key in [k for k in self.workloads if f"{k.namespace}/{k.name}" not in seen]:
                self._apply(kind, "DELETED", self.workloads[key])
        elif kind == "namespaces":
            for name in [n for n in self.namespace_labels if f"/{n}" not in seen]:
                self._namespace_deleted(name)

    def _drop_pod_json(self, pod: PodInfo) -> None:
        if pod.group is not None:
            self.group_pods[pod.group].pop(pod.uid, None)
            self.dirty.add(pod.group)
            if not self.group_pods[pod.group]:
                self._forget_workload_group(pod.group)

    # ---- Kubernetes 1.35 Workloads: a gang per pod group entry (and replica) ----
    def _note_workload_ref(self, obj: dict[str, Any], group: GroupKey) -> None:
        """Remember which Workload sizes `group`, when a member names it in spec.workloadRef."""
        try:
            ref = workload_ref(obj.get("spec"))
        except MembershipError:  # the pod's group_error says so; nothing to size
            return
        if ref is None or ref.group != group.name:
            return  # named by another source (which then agreed on a name, or not)
        workload = GroupKey(group.namespace, ref.workload)
        if self.workload_groups[workload].get(group) == ref:
            return
        self.workload_groups[workload][group] = ref
        self._workload_of[group] = workload
        self._size_from_workload(workload, group, ref)

    def _size_from_workload(self, workload: GroupKey, group: GroupKey, ref: WorkloadRef) -> None:
        obj = self.workloads.get(workload)
        if obj is None:
            self.core.forget_group_spec(UPSTREAM_WORKLOAD_SOURCE, group)
        else:
            self.core.apply_group_spec(upstream_workload_spec(obj, ref))
            self.core.group_changed(group, time.time())
        self.dirty.add(group)

    def _forget_workload_group(self, group: GroupKey) -> None:
        workload = self._workload_of.pop(group, None)
        if workload is None:
            return
        self.workload_groups[workload].pop(group, None)
        if not self.workload_groups[workload]:
            del self.workload_groups[workload]
        self.core.forget_group_spec(UPSTREAM_WORKLOAD_SOURCE, group)

    def _apply_workload(self, event_type: str, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        workload = GroupKey(meta.get("namespace") or "default", meta["name"])
        if event_type == "DELETED":
            self.workloads.pop(workload, None)
        else:
            self.workloads[workload] = obj
        for group, ref in list(self.workload_groups.get(workload, {}).items()):
            self._size_from_workload(workload, group, ref)

    def _apply(self, kind: str, event_type: str, obj: dict[str, Any]) -> None:
        now = time.time()
        deleted = event_type == "DELETED"
        if kind == "nodes":
            if deleted:
                self.api_nodes.pop(obj["metadata"]["name"], None)
                self.core.forget_node(obj["metadata"]["name"])
            else:
                node = NodeInfo.from_api(obj)
                self.api_nodes[node.name] = node
                self._apply_node(node.name)
        elif kind == RESOURCE_CLAIM_TEMPLATES.kind:
            self._template_change(self._identity(kind, obj), None if deleted else obj)
        elif kind in _DEVICE_KINDS:
            meta = obj["metadata"]
            name = meta["name"] if kind != RESOURCE_CLAIMS.kind else self._identity(kind, obj)
            self._device_change(kind, name, None if deleted else obj)
        elif kind == "pods":
            pod = PodInfo.from_api(obj)
            if pod.group is not None:  # a member's devices, asked by claim templates
                held = self.devices.left_over(pod.uid)
                pod = with_claim_needs(
                    pod,
                    obj.get("spec") or {},
                    self.claim_templates,
                    held,
                    self.devices.claims,
                    self.devices.allocated_to(pod.uid),
                )
                if held:
                    pod.claims_pin = pin_of(self.devices.nodes_of_pod(pod.uid))
            placeholder = pod.placeholder_for
            if placeholder is not None and not self.seal.is_our_placeholder(obj, placeholder.name):
                if pod.uid not in self.core.snapshot.pods:
                    log.info(
                        "pod %s is labelled a placeholder of %s but was not created by "
                        "gang-extender: counted as any other pod, never deleted",
                        pod.ref,
                        placeholder,
                    )
                pod.placeholder_for = None
            old = self.core.snapshot.pods.get(pod.uid)
            if old is not None and old.group != pod.group:
                self._drop_pod_json(old)
            if deleted:
                self._drop_pod_json(pod)
                self.core.forget_pod(pod.uid, now)
                self._reapply_nodes(
                    self.devices.nodes_of_pod(pod.uid)
                    | self.devices.nodes_of_claims(pod.named_claims)
                )
                if pod.group is not None and self.on_member_deleted is not None:
                    self.on_member_deleted(pod.group, obj)
                return
            self.core.observe_pod(pod, now)
            # Bound or gone, the pod's DRA claims count as its request or as taken.
            self._reapply_nodes(
                self.devices.nodes_of_pod(pod.uid) | self.devices.nodes_of_claims(pod.named_claims)
            )
            if pod.group is not None:
                self.group_pods[pod.group][pod.uid] = obj
                self.dirty.add(pod.group)
                self._note_workload_ref(obj, pod.group)
        elif kind == WORKLOAD_KIND:
            self._apply_workload(event_type, obj)
        elif kind in _PODGROUP_KINDS:
            source = _PODGROUP_KINDS[kind]
            store = self._podgroup_store(kind)
            if source == SOURCE_VOLCANO:
                spec = volcano_group_spec(obj)
            elif source == UPSTREAM_PODGROUP_SOURCE:
                spec = upstream_podgroup_spec(obj)
            else:
                spec = GroupSpec.from_podgroup(obj, source=source)
            if deleted:
                store.pop(spec.key, None)
                self.core.forget_group_spec(spec.source, spec.key)
                self.core.forget_group_if_gone(spec.key)
            else:
                store[spec.key] = obj
                if self.core.apply_group_spec(spec):
                    self.core.group_changed(spec.key, now)
            self.dirty.add(spec.key)
        elif kind == "namespaces":
            name = obj["metadata"]["name"]
            was = self.injected(name)
            if deleted:
                self._namespace_deleted(name)
            else:
                self.deleted_namespaces.pop(name, None)
                self.namespace_labels[name] = dict(obj["metadata"].get("labels") or {})
                if _terminating(obj):
                    self.terminating_namespaces.add(name)
                else:
                    self.terminating_namespaces.discard(name)
            if self.injected(name) != was:
                # Its groups' wiring depends on the label: a namespace seen (or labelled)
                # after its pods must not wait for a resync to be wired.
                self.dirty.update(k for k in self.core.snapshot.group_keys() if k.namespace == name)

    # ---- DRA: devices folded into the nodes the core sees ----
    def _device_change(self, kind: str, name: str, obj: dict[str, Any] | None) -> None:
        """Apply one DeviceClass, ResourceSlice or ResourceClaim (None: deleted)."""
        if kind == DEVICE_CLASSES.kind:
            touched = (
                self.devices.delete_class(name)
                if obj is None
                else self.devices.upsert_class(DeviceClass.from_api(obj))
            )
        elif kind == RESOURCE_SLICES.kind:
            slice_ = Slice.from_api(obj) if obj is not None else None
            if slice_ is not None and slice_.unsupported and name not in self.devices.slices:
                log.info("%s: its devices are not counted (docs/dra.md)", slice_.unsupported)
            touched = (
                self.devices.delete_slice(name)
                if slice_ is None
                else self.devices.upsert_slice(slice_)
            )
        else:
            old = self.devices.claims.get(name)
            claim = Claim.from_api(obj) if obj is not None else None
            touched = (
                self.devices.delete_claim(name)
                if claim is None
                else self.devices.upsert_claim(claim)
            )
            # A member whose claim stays allocated after a failed bind needs its
            # devices no more (domain/devices/claims.py): read it again; so is one
            # whose claim was allocated for it, which asks what kube-scheduler chose.
            if _allocation_of(old) != _allocation_of(claim):
                self._reread_owner(old or claim)
            # Members naming the claim directly need it until it is allocated.
            either = old or claim
            moved = old is None or claim is None or old.allocated != claim.allocated
            if either is not None and either.owner_pod is None and moved:
                namespace, _, claim_name = name.partition("/")
                self._reread_users(namespace, "resourceClaimName", claim_name)
        self._reapply_nodes(touched)

    def _template_change(self, key: str, obj: dict[str, Any] | None) -> None:
        """Store a ResourceClaimTemplate (None: deleted); members that use it are read
        again, since their requests count what it asks."""
        if obj is None:
            if self.claim_templates.pop(key, None) is None:
                return
        else:
            template = ClaimTemplate.from_api(obj)
            if self.claim_templates.get(key) == template:
                return
            self.claim_templates[key] = template
        namespace, _, name = key.partition("/")
        self._reread_users(namespace, "resourceClaimTemplateName", name)

    def _reread_users(self, namespace: str, field: str, name: str) -> None:
        """Read again the members whose spec.resourceClaims name `name` in `field`."""
        users = [
            pod
            for group, pods in self.group_pods.items()
            if group.namespace == namespace
            for pod in pods.values()
            if any(
                isinstance(entry, dict) and entry.get(field) == name
                for entry in (pod.get("spec") or {}).get("resourceClaims") or []
            )
        ]
        for pod in users:
            self._apply("pods", "MODIFIED", pod)

    def _reread_owner(self, claim: Claim | None) -> None:
        pod = self.core.snapshot.pods.get(claim.owner_pod or "") if claim is not None else None
        if pod is not None and pod.group is not None:
            obj = self.group_pods.get(pod.group, {}).get(pod.uid)
            if obj is not None:
                self._apply("pods", "MODIFIED", obj)

    def _reapply_nodes(self, names: set[str]) -> None:
        for name in names:
            if name in self.api_nodes:
                self._apply_node(name)

    def _apply_node(self, name: str) -> None:
        self.core.apply_node(with_devices(self.api_nodes[name], self.devices, self._holds))

    def _holds(self, claim: Claim, node: str) -> bool:
        return claim_held(self.core.snapshot.pods, self.core.ledger.plans, claim, node)

    def _podgroup_store(self, kind: str) -> dict[GroupKey, dict[str, Any]]:
        return {
            "podgroups": self.podgroups,
            "coscheduling-podgroups": self.coscheduling_podgroups,
            "volcano-podgroups": self.volcano_podgroups,
            UPSTREAM_KIND: self.upstream_podgroups,
        }[kind]

    def podgroup_object(self, key: GroupKey) -> dict[str, Any] | None:
        """The group's PodGroup object, in foreign_podgroups.PODGROUP_SOURCES order (a
        Kubernetes 1.35 Workload for a gang its pods name in spec.workloadRef)."""
        found = self.podgroup_typed(key)
        return found[0] if found is not None else None

    def podgroup_typed(self, key: GroupKey) -> tuple[dict[str, Any], str, str] | None:
        """`podgroup_object(key)` with the apiVersion and kind to name it by where the
        object does not carry them (items of a list of a built-in kind do not)."""
        stores = (
            (self.podgroups, "scheduling.gang-extender.io/v1alpha1", "PodGroup"),
            (self.volcano_podgroups, "scheduling.volcano.sh/v1beta1", "PodGroup"),
            (self.coscheduling_podgroups, "scheduling.x-k8s.io/v1alpha1", "PodGroup"),
            (self.upstream_podgroups, "scheduling.k8s.io/v1beta1", "PodGroup"),
        )
        for store, api_version, kind in stores:
            obj = store.get(key)
            if obj:
                return obj, api_version, kind
        workload = self._workload_object(key)
        if workload:
            return workload, "scheduling.k8s.io/v1alpha1", "Workload"
        return None

    def _workload_object(self, key: GroupKey) -> dict[str, Any] | None:
        """The Workload whose pod group `key` is a gang of (its members' spec.workloadRef)."""
        workload = self._workload_of.get(key)
        return self.workloads.get(workload) if workload is not None else None

    def terminating(self, namespace: str) -> bool:
        """The namespace is being deleted (deletionTimestamp set, phase Terminating), or
        was deleted since the service started watching (the last DELETED_NAMESPACE_MEMORY)."""
        return namespace in self.terminating_namespaces or namespace in self.deleted_namespaces

    def _namespace_deleted(self, name: str) -> None:
        self.namespace_labels.pop(name, None)
        self.terminating_namespaces.discard(name)
        self.deleted_namespaces.pop(name, None)
        self.deleted_namespaces[name] = None
        while len(self.deleted_namespaces) > DELETED_NAMESPACE_MEMORY:
            del self.deleted_namespaces[next(iter(self.deleted_namespaces))]

    def injected(self, namespace: str) -> bool:
        labels = self.namespace_labels.get(namespace, {})
        return labels.get(INJECT_NAMESPACE_LABEL) == "enabled"


_DEVICE_KINDS = frozenset({DEVICE_CLASSES.kind, RESOURCE_SLICES.kind, RESOURCE_CLAIMS.kind})

# Watch cache kind -> GroupSpec.source of the PodGroups it lists.
_PODGROUP_KINDS = {
    "podgroups": SOURCE_OURS,
    "coscheduling-podgroups": SOURCE_COSCHEDULING,
    "volcano-podgroups": SOURCE_VOLCANO,
    UPSTREAM_KIND: UPSTREAM_PODGROUP_SOURCE,
}


def _terminating(namespace: dict[str, Any]) -> bool:
    return bool(namespace["metadata"].get("deletionTimestamp")) or (
        (namespace.get("status") or {}).get("phase") == "Terminating"
    )


def _describe(obj: Any) -> str:
    """namespace/name of an object for a log line, whatever its shape."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    if not isinstance(meta, dict):
        return "no metadata"
    return f"{meta.get('namespace', '')}/{meta.get('name', '?')}"[:253]


def _allocation_of(claim: Claim | None) -> tuple[object, ...]:
    """What of a claim its owner's needs depend on (domain/devices/claims.py)."""
    if claim is None:
        return ()
    return (claim.left_over, claim.served if claim.allocated else ())
