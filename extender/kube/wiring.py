"""Keeps each group's Secret `<group>-ssh`, headless Service `<group>` and ConfigMap `<group>-svc`.

The renders are pure (`extender.injection`); this module only reads and writes.
Per object: GET; absent -> POST; present -> JSON-patch our fields when something
changed, guarded by the resourceVersion read (a concurrent writer makes the patch
fail with 409, and the caller's retry starts again from a fresh GET). Every
object is owned by the PodGroup, so the garbage collector removes it with the group.

The key pair is made once, when the Secret is first created, and read back from
the Secret ever after: members that already mounted it keep working.

Ownership is proven by a seal, not by the `app.kubernetes.io/managed-by` label
anyone may write (kube/ownership.py): each object is sealed right after this
service creates it. One that carries the label but no valid seal (planted by
someone who may create objects in the namespace, or made by a version before the
seal) is never trusted as it is: a Secret gets a new key pair (a planted key pair
is never used), a ConfigMap gets our data, a Service is adopted only if headless
(else the group's wiring is refused, WiringConflictError), each is then sealed, and
`reconcile` returns a notice for each, which the reconciler makes a Warning Event
(`WiringReplaced`). An object without the label is refused as before, but for a
headless Service another controller made that selects every member (JobSet's, named
after the JobSet: `injection.objects.serves_members`), which is used as it is.

The ConfigMap also lists the Ready members (`extender.injection.ready`), so it is
re-rendered as pods change readiness and patched only when that list changed;
`clear_ready_hosts` empties the list once the group's last member is gone.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Mapping
from typing import Any

from extender.domain.objects.accelerators import DEFAULT_ACCELERATORS, Accelerators
from extender.injection import names
from extender.injection.hostfile import render_svc_data
from extender.injection.layout import resolve_layout
from extender.injection.objects import (
    ForeignObjectError,
    check_managed,
    decode_secret_data,
    desired_configmap,
    desired_secret,
    desired_service,
    owner_reference,
    serves_members,
    ssh_settings,
    update_patch,
)
from extender.injection.patch import add
from extender.injection.ready import render_ready_data
from extender.injection.sizes import check_fits
from extender.injection.ssh import (
    SSHKeyError,
    SSHKeyPair,
    generate_key_pair,
    key_pair_from_secret_data,
    render_secret_data,
)
from extender.kube.ownership import SEAL_ANNOTATION, OwnershipSeal
from extender.kube.rawapi import REQUEST_TIMEOUT_SECONDS, KubeError, RawApi, path_of

log = logging.getLogger(__name__)

HTTP_NOT_FOUND = 404
HTTP_CONFLICT = 409


class WiringConflictError(RuntimeError):
    """The group's wiring cannot be written: a foreign object holds a name, or our
    Secret no longer holds a usable key pair. The message says what to delete."""


# The core/v1 resource (URL path segment) of each kind written.
_RESOURCES = {"Service": "services", "ConfigMap": "configmaps", "Secret": "secrets"}


def _path(kind: str, namespace: str, name: str | None = None) -> str:
    parts = ["api", "v1", "namespaces", namespace, _RESOURCES[kind]]
    return path_of(*parts, name) if name is not None else path_of(*parts)


class WiringController:
    """Makes a group's Secret, Service and ConfigMap match its PodGroup and pods."""

    def __init__(
        self,
        raw: RawApi,
        *,
        field_manager: str = "gang-extender",
        seal: OwnershipSeal | None = None,
        accelerators: Accelerators = DEFAULT_ACCELERATORS,
    ) -> None:
        self.raw = raw
        self._field_manager = field_manager
        self.seal = seal if seal is not None else OwnershipSeal()
        # Which resources count as a member's hostfile slots (Settings.accelerator_resources).
        self.accelerators = accelerators

    def reconcile(
        self,
        *,
        namespace: str,
        group: str,
        podgroup: dict[str, Any] | None,
        pods: list[dict[str, Any]],
    ) -> list[str]:
        """Bring the group's objects in step; idempotent, writes only what changed.

        Returns a notice per object found labelled ours but not sealed, and replaced or
        adopted (see the module docstring); [] normally.
        Does nothing until the PodGroup exists (it is the owner). Raises KubeError
        on API errors, WiringConflictError when a foreign object is in the way, and
        MembershipError when the PodGroup's spec.minTaskMember is malformed.
        The order makes names resolve before files name them: Service, then the
        Secret (its config matches the hosts' names), then the ConfigMap.
        """
        if podgroup is None:
            return []
        notices: list[str] = []
        layout = resolve_layout(
            group=group, podgroup=podgroup, pods=pods, accelerators=self.accelerators
        )
        port, ssh_path = ssh_settings(pods)
        owner = owner_reference(podgroup)
        # Rendered and checked before anything is written: a group too big for one
        # ConfigMap is refused here, not by the API server on every pass.
        data = {
            **render_svc_data(layout),
            **render_ready_data(group, layout, pods, self.accelerators),
        }
        members = sum(task.count for task in layout.tasks)
        check_fits("ConfigMap", names.svc_configmap_name(group), data, members=members)
        self._ensure(
            "Service",
            desired_service(namespace=namespace, group=group, ssh_port=port, owner=owner),
            notices,
            use_foreign=lambda found: serves_members(found, pods),
        )
        self._ensure_secret(
            namespace=namespace,
            group=group,
            render=lambda keys: desired_secret(
                namespace=namespace,
                group=group,
                data=render_secret_data(keys, group, port=port, ssh_path=ssh_path),
                owner=owner,
            ),
            notices=notices,
        )
        # Readiness is part of the data: a member turning Ready (or not) changes the
        # ConfigMap once, and an unchanged render writes nothing (update_patch).
        self._ensure(
            "ConfigMap",
            desired_configmap(namespace=namespace, group=group, data=data, owner=owner),
            notices,
        )
        return notices

    def clear_ready_hosts(self, *, namespace: str, group: str) -> None:
        """The group's last member is gone: empty `ready.hostfile`, touching nothing else.

        The host lists, keys and Service stay as the last members left them, for
        their replacements; only the claim that someone is Ready would be false.
        No ConfigMap, or one already empty, writes nothing.
        """
        name = names.svc_configmap_name(group)
        existing = self._get("ConfigMap", namespace, name)
        if existing is None or not (existing.get("data") or {}).get(names.READY_HOSTFILE_KEY):
            return
        self._check_managed(existing)
        if not self.seal.is_sealed(existing):
            return  # not ours (yet): the next reconcile with members adopts it or refuses
        desired = copy.deepcopy(existing)
        desired["data"][names.READY_HOSTFILE_KEY] = ""
        desired["metadata"] = {
            **desired["metadata"],
            "labels": (existing["metadata"].get("labels") or {}),
            "ownerReferences": existing["metadata"].get("ownerReferences") or [],
        }
        self._update("ConfigMap", existing, desired)

    def _ensure_secret(
        self,
        *,
        namespace: str,
        group: str,
        render: Callable[[SSHKeyPair], dict[str, Any]],
        notices: list[str],
    ) -> None:
        name = names.ssh_secret_name(group)
        existing = self._get("Secret", namespace, name)
        if existing is None:
            keys = generate_key_pair(comment=f"gang-extender@{namespace}/{group}")
            created = self._create("Secret", render(keys))
            if created is not None:
                log.info("created Secret %s/%s with a new key pair", namespace, name)
                self._seal(created)
                return
            # Someone created it between our GET and POST: read it (its seal decides).
            existing = self._get("Secret", namespace, name)
            if existing is None:
                raise WiringConflictError(
                    f"Secret {namespace}/{name} was reported to exist and then was not found; "
                    f"it is being deleted, the next reconcile will create it"
                )
        self._check_managed(existing)
        if not self.seal.is_sealed(existing):
            # Never the key pair of a Secret this service did not make: a new one.
            keys = generate_key_pair(comment=f"gang-extender@{namespace}/{group}")
            self._update("Secret", existing, render(keys))
            self._seal(existing)
            notices.append(
                f"Secret {namespace}/{name} carries the label {names.MANAGED_BY_LABEL}="
                f"{names.MANAGED_BY_VALUE} but was not created by gang-extender: its key pair "
                f"was replaced with a new one; members already running keep the keys they "
                f"started with (the Secret is mounted as a snapshot): restart them"
            )
            return
        try:
            keys = key_pair_from_secret_data(decode_secret_data(existing.get("data")))
        except SSHKeyError as error:
            raise WiringConflictError(
                f"Secret {namespace}/{name} holds no usable key pair ({error}); delete it "
                f"and gang-extender creates a new one (restart the group's pods afterwards)"
            ) from None
        self._update("Secret", existing, render(keys))

    def _ensure(
        self,
        kind: str,
        desired: dict[str, Any],
        notices: list[str],
        *,
        use_foreign: Callable[[dict[str, Any]], bool] = lambda found: False,
    ) -> None:
        meta = desired["metadata"]
        existing = self._get(kind, meta["namespace"], meta["name"])
        if existing is None:
            created = self._create(kind, desired)
            if created is not None:
                log.info("created %s %s/%s", kind, meta["namespace"], meta["name"])
                self._seal(created)
                return
            existing = self._get(kind, meta["namespace"], meta["name"])
            if existing is None:
                raise WiringConflictError(
                    f"{kind} {meta['namespace']}/{meta['name']} was reported to exist and "
                    f"then was not found; it is being deleted, the next reconcile creates it"
                )
        if use_foreign(existing):
            return  # another controller's object does the job: read, never written
        self._check_managed(existing)
        if self.seal.is_sealed(existing):
            self._update(kind, existing, desired)
            return
        where = f"{kind} {meta['namespace']}/{meta['name']}"
        claim = f"carries the label {names.MANAGED_BY_LABEL}={names.MANAGED_BY_VALUE}"
        spec = existing.get("spec") or {}
        if kind == "Service" and (
            spec.get("type", "ClusterIP") != "ClusterIP" or spec.get("clusterIP") != "None"
        ):
            raise WiringConflictError(
                f"{where} {claim} but was not created by gang-extender and is not a headless "
                f"Service; delete it, and gang-extender creates the group's own"
            )
        self._update(kind, existing, desired)
        self._seal(existing)
        notices.append(
            f"{where} {claim} but was not created by gang-extender: adopted, with the "
            f"group's {'data' if kind == 'ConfigMap' else 'selector and ports'} written over it"
        )

    def _seal(self, obj: dict[str, Any]) -> None:
        """Put the seal of `obj`'s uid on it (kube/ownership.py): from now on it is ours."""
        meta = obj["metadata"]
        annotations = {
            **(meta.get("annotations") or {}),
            SEAL_ANNOTATION: self.seal.object_seal(obj),
        }
        self.raw.call(
            "PATCH",
            _path(obj["kind"], meta["namespace"], meta["name"]),
            query={"fieldManager": self._field_manager},
            # The object sealed, not one re-created under its name meanwhile.
            body=[
                {"op": "test", "path": "/metadata/uid", "value": meta["uid"]},
                add("/metadata/annotations", annotations),
            ],
            content_type="application/json-patch+json",
            timeout=REQUEST_TIMEOUT_SECONDS,
        )

    def _check_managed(self, existing: Mapping[str, Any]) -> None:
        try:
            check_managed(existing)
        except ForeignObjectError as error:
            raise WiringConflictError(str(error)) from None

    def _update(self, kind: str, existing: dict[str, Any], desired: dict[str, Any]) -> None:
        patch = update_patch(existing, desired)
        if not patch:
            return
        meta = existing["metadata"]
        self.raw.call(
            "PATCH",
            _path(kind, meta["namespace"], meta["name"]),
            query={"fieldManager": self._field_manager},
            body=patch,
            content_type="application/json-patch+json",
            timeout=REQUEST_TIMEOUT_SECONDS,
        )
        log.info("updated %s %s/%s", kind, meta["namespace"], meta["name"])

    def _get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self.raw.call(
                "GET", _path(kind, namespace, name), timeout=REQUEST_TIMEOUT_SECONDS
            )
        except KubeError as error:
            if error.status == HTTP_NOT_FOUND:
                return None
            raise

    def _create(self, kind: str, body: dict[str, Any]) -> dict[str, Any] | None:
        """POST `body`: the object created; None when it already exists (409), so the
        caller re-reads it."""
        try:
            created = self.raw.call(
                "POST",
                _path(kind, body["metadata"]["namespace"]),
                query={"fieldManager": self._field_manager},
                body=body,
                timeout=REQUEST_TIMEOUT_SECONDS,
            )
        except KubeError as error:
            if error.status == HTTP_CONFLICT:
                return None
            raise
        answer = created if isinstance(created, dict) else {}
        return {
            "kind": kind,
            **answer,
            "metadata": {**body["metadata"], **(answer.get("metadata") or {})},
        }
