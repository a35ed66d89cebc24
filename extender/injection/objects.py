"""The per-group objects the controller keeps (Service, ConfigMap, Secret), rendered purely.

`desired_*` give the object as we want it; `updated_object` folds that into what
the API server holds, touching only the fields we own, and says whether anything
changed, so a periodic reconcile of an unchanged group writes nothing.
"""

from __future__ import annotations

import base64
import copy
from collections.abc import Mapping, Sequence
from typing import Any

from extender.domain.objects.membership import (
    GROUP_LABEL,
    SSH_PATH_ANNOTATION,
    SSH_PORT_ANNOTATION,
    MembershipError,
)
from extender.injection import names
from extender.injection.patch import JsonPatchOp, add, replace
from extender.injection.ssh import ssh_path_of, ssh_port_of

# Fields we own wholesale: the object's content is exactly what we render.
_REPLACED_FIELDS = ("data",)
# Fields merged key by key: the API server defaults others (clusterIPs, ipFamilies...).
_MERGED_FIELDS = ("spec",)

SSH_PORT_NAME = "ssh"


class ForeignObjectError(ValueError):
    """An object with our name exists but gang-extender does not manage it."""


def managed_labels(group: str) -> dict[str, str]:
    return {GROUP_LABEL: group, names.MANAGED_BY_LABEL: names.MANAGED_BY_VALUE}


def owner_reference(podgroup: Mapping[str, Any]) -> dict[str, Any]:
    """An ownerReference to the PodGroup, so the garbage collector deletes with the group."""
    meta = podgroup.get("metadata") or {}
    name, uid = meta.get("name"), meta.get("uid")
    api_version, kind = podgroup.get("apiVersion"), podgroup.get("kind")
    if not (name and uid and api_version and kind):
        raise ValueError(
            "a PodGroup needs apiVersion, kind, metadata.name and metadata.uid to own objects"
        )
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "uid": uid,
        "controller": True,
    }


def _metadata(name: str, namespace: str, group: str, owner: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": namespace,
        "labels": managed_labels(group),
        "ownerReferences": [dict(owner)],
    }


def desired_service(
    *, namespace: str, group: str, ssh_port: int, owner: Mapping[str, Any]
) -> dict[str, Any]:
    """Headless Service `<group>`: gives every member `<hostname>.<group>` in DNS.

    publishNotReadyAddresses: members must resolve each other while they start
    (mpirun connects before any readiness probe could pass). The ssh port is
    listed so the Service documents what members talk on; DNS needs none.
    """
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(names.service_name(group), namespace, group, owner),
        "spec": {
            "clusterIP": "None",
            "selector": {GROUP_LABEL: group},
            "publishNotReadyAddresses": True,
            "ports": [{"name": SSH_PORT_NAME, "port": ssh_port, "protocol": "TCP"}],
        },
    }


def desired_configmap(
    *, namespace: str, group: str, data: Mapping[str, str], owner: Mapping[str, Any]
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(names.svc_configmap_name(group), namespace, group, owner),
        "data": dict(data),
    }


def desired_secret(
    *, namespace: str, group: str, data: Mapping[str, str], owner: Mapping[str, Any]
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": _metadata(names.ssh_secret_name(group), namespace, group, owner),
        "data": encode_secret_data(data),
    }


def encode_secret_data(data: Mapping[str, str]) -> dict[str, str]:
    return {key: base64.b64encode(value.encode()).decode("ascii") for key, value in data.items()}


def decode_secret_data(data: Mapping[str, str] | None) -> dict[str, str]:
    return {key: base64.b64decode(value).decode() for key, value in (data or {}).items()}


def check_managed(existing: Mapping[str, Any]) -> None:
    """Raise ForeignObjectError unless the object carries our managed-by label."""
    meta = existing.get("metadata") or {}
    if (meta.get("labels") or {}).get(names.MANAGED_BY_LABEL) != names.MANAGED_BY_VALUE:
        raise ForeignObjectError(
            f"{existing.get('kind', 'object')} {meta.get('namespace')}/{meta.get('name')} "
            f"exists but is not managed by gang-extender (no label "
            f"{names.MANAGED_BY_LABEL}={names.MANAGED_BY_VALUE}); delete or rename it, "
            f"or rename the group, so the group's wiring can be created"
        )


def serves_members(service: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> bool:
    """A Service another controller made that already does the group Service's job: not
    labelled ours, headless, and its selector (not empty) selects every member.

    JobSet (and so Kubeflow Trainer) makes one named after the JobSet, which is the
    group's name and the members' subdomain: it is used as it is, not fought over."""
    meta = service.get("metadata") or {}
    if (meta.get("labels") or {}).get(names.MANAGED_BY_LABEL) == names.MANAGED_BY_VALUE:
        return False
    spec = service.get("spec") or {}
    selector = spec.get("selector") or {}
    if spec.get("type", "ClusterIP") != "ClusterIP" or spec.get("clusterIP") != "None":
        return False
    if not isinstance(selector, Mapping) or not selector or not pods:
        return False
    return all(
        all(
            ((pod.get("metadata") or {}).get("labels") or {}).get(k) == v
            for k, v in selector.items()
        )
        for pod in pods
    )


def updated_object(
    existing: Mapping[str, Any], desired: Mapping[str, Any]
) -> dict[str, Any] | None:
    """`existing` with our fields set from `desired`, or None when nothing would change.

    Labels are merged (others' labels stay). Owner references to the same PodGroup
    kind and name are replaced by ours, which also moves ownership to a PodGroup that
    was deleted and re-created under the same name. `data` is replaced; `spec` merged.
    """
    result = copy.deepcopy(dict(existing))
    meta = result.setdefault("metadata", {})
    want_meta = desired["metadata"]
    meta["labels"] = {**(meta.get("labels") or {}), **want_meta["labels"]}
    ours = want_meta["ownerReferences"]
    same_owner = {(ref["apiVersion"], ref["kind"], ref["name"]) for ref in ours}
    others = [
        ref
        for ref in meta.get("ownerReferences") or []
        if (ref.get("apiVersion"), ref.get("kind"), ref.get("name")) not in same_owner
    ]
    meta["ownerReferences"] = others + [dict(ref) for ref in ours]
    for field in _REPLACED_FIELDS:
        if field in desired:
            result[field] = copy.deepcopy(desired[field])
    for field in _MERGED_FIELDS:
        # Compared as "ours is contained in theirs": the API server adds defaults inside
        # what we set (a Service port gains targetPort), which is not drift.
        if field in desired and not contains(result.get(field), desired[field]):
            result[field] = {**(result.get(field) or {}), **copy.deepcopy(desired[field])}
    return None if _normalised(result) == _normalised(existing) else result


def contains(have: Any, want: Any) -> bool:
    """`want` is a part of `have`: maps by key, lists item by item (same length), else equal."""
    if isinstance(want, Mapping):
        return isinstance(have, Mapping) and all(
            key in have and contains(have[key], value) for key, value in want.items()
        )
    if isinstance(want, list):
        return (
            isinstance(have, list)
            and len(have) == len(want)
            and all(contains(h, w) for h, w in zip(have, want, strict=True))
        )
    return bool(have == want)


def update_patch(existing: Mapping[str, Any], desired: Mapping[str, Any]) -> list[JsonPatchOp]:
    """A JSON patch turning `existing` into `updated_object(existing, desired)`; [] if equal.

    A patch (not a PUT of the whole object) sends only our fields, so fields the API
    server knows and this client does not are never dropped. Its first op sets the
    resourceVersion that was read: a concurrent change makes the API server answer 409.
    """
    changed = updated_object(existing, desired)
    if changed is None:
        return []
    meta = changed["metadata"]
    ops: list[JsonPatchOp] = [
        replace("/metadata/resourceVersion", meta["resourceVersion"]),
        add("/metadata/labels", meta["labels"]),
        add("/metadata/ownerReferences", meta["ownerReferences"]),
    ]
    # `add` on an object member sets it whether present or not (RFC 6902 section 4.1).
    ops += [
        add(f"/{field}", changed[field])
        for field in _REPLACED_FIELDS + _MERGED_FIELDS
        if field in desired
    ]
    return ops


def _normalised(obj: Mapping[str, Any]) -> Any:
    # The API server omits an empty map; {} and absent mean the same.
    return {key: value for key, value in obj.items() if value not in (None, {})}


def ssh_settings(pods: Sequence[Mapping[str, Any]]) -> tuple[int, str]:
    """The (port, ssh directory) the group's pods name, from the first pod (by name) naming one.

    A pod with a malformed annotation is passed over: the webhook denies such pods,
    so it can only be one admitted before injection was enabled.
    """
    port, path = names.DEFAULT_SSH_PORT, names.DEFAULT_SSH_PATH
    found_port = found_path = False
    for pod in sorted(pods, key=lambda each: str((each.get("metadata") or {}).get("name"))):
        meta = pod.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        try:
            if not found_port and annotations.get(SSH_PORT_ANNOTATION) is not None:
                port, found_port = ssh_port_of(meta), True
            if not found_path and annotations.get(SSH_PATH_ANNOTATION) is not None:
                path, found_path = ssh_path_of(meta), True
        except MembershipError:
            continue
    return port, path
