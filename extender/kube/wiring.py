"""Keeps each group's Secret `<group>-ssh`, headless Service `<group>` and ConfigMap `<group>-svc`.

The renders are pure (`extender.injection`); this module only reads and writes.
Per object: GET; absent -> POST; present -> JSON-patch our fields when something
changed, guarded by the resourceVersion read (a concurrent writer makes the patch
fail with 409, and the caller's retry starts again from a fresh GET). Every
object is owned by the PodGroup, so the garbage collector removes it with the group.

The key pair is made once, when the Secret is first created, and read back from
the Secret ever after: members that already mounted it keep working.

The ConfigMap also lists the Ready members (`extender.injection.ready`), so it is
re-rendered as pods change readiness and patched only when that list changed;
`clear_ready_hosts` empties the list once the group's last member is gone.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Mapping
from typing import Any

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
    ssh_settings,
    update_patch,
)
from extender.injection.ready import render_ready_data
from extender.injection.ssh import (
    SSHKeyError,
    SSHKeyPair,
    generate_key_pair,
    key_pair_from_secret_data,
    render_secret_data,
)
from extender.kube.rawapi import KubeError, RawApi, path_of

log = logging.getLogger(__name__)

HTTP_NOT_FOUND = 404
HTTP_CONFLICT = 409
# Each call is one small object; a slow API server should fail the reconcile (the
# caller retries) rather than hold the worker thread.
REQUEST_TIMEOUT_SECONDS = 10.0


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

    def __init__(self, raw: RawApi, *, field_manager: str = "gang-extender") -> None:
        self.raw = raw
        self._field_manager = field_manager

    def reconcile(
        self,
        *,
        namespace: str,
        group: str,
        podgroup: dict[str, Any] | None,
        pods: list[dict[str, Any]],
    ) -> None:
        """Bring the group's objects in step; idempotent, writes only what changed.

        Does nothing until the PodGroup exists (it is the owner). Raises KubeError
        on API errors, WiringConflictError when a foreign object is in the way, and
        MembershipError when the PodGroup's spec.minTaskMember is malformed.
        The order makes names resolve before files name them: Service, then the
        Secret (its config matches the hosts' names), then the ConfigMap.
        """
        if podgroup is None:
            return
        layout = resolve_layout(group=group, podgroup=podgroup, pods=pods)
        port, ssh_path = ssh_settings(pods)
        owner = owner_reference(podgroup)
        self._ensure(
            "Service",
            desired_service(namespace=namespace, group=group, ssh_port=port, owner=owner),
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
        )
        # Readiness is part of the data: a member turning Ready (or not) changes the
        # ConfigMap once, and an unchanged render writes nothing (update_patch).
        data = {**render_svc_data(layout), **render_ready_data(group, layout, pods)}
        self._ensure(
            "ConfigMap",
            desired_configmap(namespace=namespace, group=group, data=data, owner=owner),
        )

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
    ) -> None:
        name = names.ssh_secret_name(group)
        existing = self._get("Secret", namespace, name)
        if existing is None:
            keys = generate_key_pair(comment=f"gang-extender@{namespace}/{group}")
            if self._create("Secret", render(keys)):
                log.info("created Secret %s/%s with a new key pair", namespace, name)
                return
            # Someone created it between our GET and POST: use their keys.
            existing = self._get("Secret", namespace, name)
            if existing is None:
                raise WiringConflictError(
                    f"Secret {namespace}/{name} was reported to exist and then was not found; "
                    f"it is being deleted, the next reconcile will create it"
                )
        self._check_managed(existing)
        try:
            keys = key_pair_from_secret_data(decode_secret_data(existing.get("data")))
        except SSHKeyError as error:
            raise WiringConflictError(
                f"Secret {namespace}/{name} holds no usable key pair ({error}); delete it "
                f"and gang-extender creates a new one (restart the group's pods afterwards)"
            ) from None
        self._update("Secret", existing, render(keys))

    def _ensure(self, kind: str, desired: dict[str, Any]) -> None:
        meta = desired["metadata"]
        existing = self._get(kind, meta["namespace"], meta["name"])
        if existing is None:
            if self._create(kind, desired):
                log.info("created %s %s/%s", kind, meta["namespace"], meta["name"])
                return
            existing = self._get(kind, meta["namespace"], meta["name"])
            if existing is None:
                raise WiringConflictError(
                    f"{kind} {meta['namespace']}/{meta['name']} was reported to exist and "
                    f"then was not found; it is being deleted, the next reconcile creates it"
                )
        self._check_managed(existing)
        self._update(kind, existing, desired)

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

    def _create(self, kind: str, body: dict[str, Any]) -> bool:
        """POST `body`; False when it already exists (409), so the caller re-reads it."""
        try:
            self.raw.call(
                "POST",
                _path(kind, body["metadata"]["namespace"]),
                query={"fieldManager": self._field_manager},
                body=body,
                timeout=REQUEST_TIMEOUT_SECONDS,
            )
        except KubeError as error:
            if error.status == HTTP_CONFLICT:
                return False
            raise
        return True
