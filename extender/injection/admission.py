"""The admission engine for pods of a group: read, validate, patch, respond. No I/O.

The HTTP route (`extender.api.webhook`) does step 1; `extender.admitter.Admitter`
the rest:

1. `parse_review` the body (malformed -> HTTP 400, not a denial: it is our caller's bug);
2. `pod_group` names the group (None: allow untouched);
3. `read_membership` validates what the pod asks for against the declared layout;
4. the Admitter finds an index when the pod has none, or checks that the one it brings
   is not held by another member (`index_owner`, `carries_wiring` and
   `index_taken_message` serve that check; the only stateful step);
5. `check_member_index`, then `render_pod_patch` runs the injectors
   (`extender.injection.injectors`, one per concern) and assembles the JSON patch;
6. `allowed_response` / `denied_response` wrap it in an AdmissionReview.

Every denial says what to change. The patch is idempotent: a pod that already
carries the wiring (webhook reinvocation) gets an empty patch.
"""

from __future__ import annotations

import base64
import math
import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from extender.domain.objects.limits import MAX_GROUP_SIZE, clip, max_task_index, quoted
from extender.domain.objects.membership import (
    JOB_COMPLETION_INDEX_ANNOTATION,
    STATEFULSET_POD_INDEX_LABEL,
    TASK_INDEX_ANNOTATION,
    VOLCANO_TASK_INDEX_ANNOTATION,
    MembershipError,
    explicit_task_index,
    group_name,
    is_dns_label,
    min_available,
    task_name,
)
from extender.injection import names
from extender.injection.depends import read_dependency
from extender.injection.injectors import GroupVolume, Injection, group_volumes, injections
from extender.injection.layout import declared_layout, podgroup_min_member
from extender.injection.member import PodMembership
from extender.injection.patch import (
    JsonPatchOp,
    add,
    append_items,
    pointer,
    prepend_items,
    set_member,
)
from extender.injection.ssh import ssh_path_of, ssh_port_of

ADMISSION_API_VERSION = "admission.k8s.io/v1"
ADMISSION_KIND = "AdmissionReview"
# A denial is the user's input being invalid; 400 makes kubectl print it as BadRequest.
DENIAL_CODE = 400
DENIAL_REASON = "BadRequest"


class ReviewError(ValueError):
    """An AdmissionReview we cannot read: answered with HTTP 400, never a denial."""


class AdmissionDenied(ValueError):
    """The pod asks for something invalid; the message says what to fix."""


@dataclass(frozen=True)
class AdmissionRequest:
    uid: str
    operation: str
    namespace: str
    dry_run: bool
    is_pod: bool
    sub_resource: str | None
    pod: dict[str, Any] | None


def parse_review(body: Any) -> AdmissionRequest:
    """The request of an `admission.k8s.io/v1` AdmissionReview, or ReviewError."""
    if not isinstance(body, dict):
        raise ReviewError("body must be a JSON object (an AdmissionReview)")
    if body.get("apiVersion") != ADMISSION_API_VERSION or body.get("kind") != ADMISSION_KIND:
        raise ReviewError(
            f"expected apiVersion {ADMISSION_API_VERSION} kind {ADMISSION_KIND}, got "
            f"apiVersion {body.get('apiVersion')!r} kind {body.get('kind')!r}"
        )
    request = body.get("request")
    if not isinstance(request, dict):
        raise ReviewError("AdmissionReview has no request object")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise ReviewError("request.uid must be a non-empty string")
    kind = request.get("kind") or {}
    if not isinstance(kind, dict):
        raise ReviewError("request.kind must be an object")
    is_pod = kind.get("group", "") == "" and kind.get("kind") == "Pod"
    pod = request.get("object")
    if pod is not None and not isinstance(pod, dict):
        raise ReviewError("request.object must be an object")
    if is_pod and pod is not None and not _looks_like_pod(pod):
        raise ReviewError("request.object is not a pod: metadata and spec must be objects")
    return AdmissionRequest(
        uid=uid,
        operation=str(request.get("operation") or ""),
        namespace=str(request.get("namespace") or ""),
        dry_run=request.get("dryRun") is True,
        is_pod=is_pod,
        sub_resource=request.get("subResource") or None,
        pod=pod,
    )


def _looks_like_pod(pod: Mapping[str, Any]) -> bool:
    return isinstance(pod.get("metadata", {}), dict) and isinstance(pod.get("spec"), dict)


def wants_wiring(request: AdmissionRequest) -> bool:
    """Only pod CREATE is ours; anything else the API server sends is allowed untouched."""
    return (
        request.is_pod
        and request.operation == "CREATE"
        and request.sub_resource is None
        and request.pod is not None
    )


def pod_group(pod: Mapping[str, Any]) -> str | None:
    """The pod's group, None when it has none; AdmissionDenied when it claims two."""
    try:
        return group_name(pod.get("metadata") or {}, pod.get("spec"))
    except MembershipError as error:
        raise AdmissionDenied(str(error)) from None


def read_membership(
    *,
    pod: Mapping[str, Any],
    namespace: str,
    group: str,
    podgroup: Mapping[str, Any] | None,
) -> PodMembership:
    """Validate what a pod of `group` asks for. Raises AdmissionDenied saying what to fix."""
    meta = pod.get("metadata") or {}
    try:
        return _read_membership(meta, namespace, group, podgroup)
    except MembershipError as error:
        raise AdmissionDenied(str(error)) from None


def _read_membership(
    meta: Mapping[str, Any],
    namespace: str,
    group: str,
    podgroup: Mapping[str, Any] | None,
) -> PodMembership:
    if not names.is_dns_1035_label(group):
        raise AdmissionDenied(
            f"group name {quoted(group)} must be a lower-case DNS label that starts with a letter "
            f"(at most {names.MAX_DNS_LABEL} characters): it names the group's headless "
            f"Service and every member's subdomain; rename the group"
        )
    task = task_name(meta)
    if not is_dns_label(task):
        raise AdmissionDenied(
            f"task name {quoted(task)} (label gang-extender.io/task) must be a lower-case DNS label "
            f"(letters, digits and '-'): it is part of each member's hostname; rename the task"
        )
    min_available(meta)  # raises on a malformed min-available annotation
    layout = declared_layout(podgroup, meta)
    if layout is not None and task not in layout.counts:
        raise AdmissionDenied(
            f"task {task!r} is not in the layout of group {group!r}: {layout.describe()}; "
            f"set label gang-extender.io/task to one of {', '.join(layout.counts)} "
            f"or add {task!r} to the layout"
        )
    index = explicit_task_index(meta)
    membership = PodMembership(
        namespace=namespace,
        group=group,
        task=task,
        explicit_index=index,
        layout=layout,
        ssh_path=ssh_path_of(meta),
        dependency=read_dependency(meta, task=task, layout=layout, podgroup=podgroup),
    )
    ssh_port_of(meta)  # validated here so a bad port is denied; the controller uses it
    if index is not None:
        check_member_index(membership, index)
        if layout is None:
            _check_index_against_size(meta, podgroup, index)
    return membership


def _check_index_against_size(
    meta: Mapping[str, Any], podgroup: Mapping[str, Any] | None, index: int
) -> None:
    """Without a declared layout the wiring counts members up to the highest index:
    an index far past the group's size (minMember, else min-available) is denied,
    naming the limit (extender/domain/objects/limits.py `max_task_index`)."""
    size = podgroup_min_member(podgroup) if podgroup is not None else None
    size = size if size is not None else min_available(meta)
    limit = max_task_index(size) if size is not None else MAX_GROUP_SIZE
    if index >= limit:
        raise AdmissionDenied(
            f"task index {index} is past what the group's size allows: indexes below "
            f"{limit} (4 times its size {size}, or its size + 256, at most "
            f"{MAX_GROUP_SIZE}); lower the index or raise the group's size"
        )


def check_member_index(membership: PodMembership, index: int) -> None:
    """The index fits the declared layout and makes a valid hostname, else AdmissionDenied."""
    layout = membership.layout
    if layout is not None and index >= (limit := layout.counts[membership.task]):
        raise AdmissionDenied(
            f"task index {index} of task {membership.task!r} is out of range: group "
            f"{membership.group!r} has {limit} {membership.task!r} member(s), indexes "
            f"0..{limit - 1}, in the layout {layout.describe()}; raise the count "
            f"of {membership.task!r} in the layout or lower the number of pods or the index"
        )
    host = names.hostname(membership.group, membership.task, index)
    if len(host) > names.MAX_DNS_LABEL:
        excess = len(host) - names.MAX_DNS_LABEL
        raise AdmissionDenied(
            f"hostname {host!r} would be {len(host)} characters, over the "
            f"{names.MAX_DNS_LABEL} allowed for a hostname; shorten the group name "
            f"{membership.group!r} or the task name {membership.task!r} by {excess} "
            f"character(s) in total"
        )


def no_free_index_message(membership: PodMembership, limit: int) -> str:
    layout = membership.layout.describe() if membership.layout is not None else "declared"
    return (
        f"group {membership.group!r} already has {limit} {membership.task!r} member(s) "
        f"(indexes 0..{limit - 1} all taken), the most the layout {layout} allows; "
        f"raise the count of {membership.task!r} in the layout, or delete a member first"
    )


def index_owner(meta: Mapping[str, Any]) -> str:
    """The uid of the Indexed Job whose completion index is the pod's index, else "".

    The Job controller keeps at most one non-terminating pod per completion index, so a
    pod of the same Job with the same index whose create we admitted but which is not
    stored is this pod's earlier attempt (the create failed after us, e.g. on a quota),
    not a rival. Only when the index comes from the Job: a gang-extender.io/task-index
    in a Job's template is the same in every pod, and two of those are rivals.
    """
    annotations = meta.get("annotations") or {}
    if TASK_INDEX_ANNOTATION in annotations or JOB_COMPLETION_INDEX_ANNOTATION not in annotations:
        return ""
    for owner in meta.get("ownerReferences") or []:
        api_version = str(owner.get("apiVersion") or "")
        if (
            owner.get("controller")
            and owner.get("kind") == "Job"
            and api_version.startswith("batch/")
        ):
            return str(owner.get("uid") or "")
    return ""


def carries_wiring(pod: Mapping[str, Any], membership: PodMembership, index: int) -> bool:
    """The pod already carries this webhook's wiring as member `index`.

    So the API server is calling the webhook again for the same create (reinvocation,
    after another webhook changed the pod): the index held for the first call is this
    pod's own. Judged by the task-index annotation and both group volumes, which a pod
    gets from this webhook, not from a workload's template.
    """
    meta = pod.get("metadata") or {}
    if (meta.get("annotations") or {}).get(TASK_INDEX_ANNOTATION) != str(index):
        return False
    volumes = {
        volume.get("name"): volume for volume in (pod.get("spec") or {}).get("volumes") or []
    }
    return all(
        group_volume.used_by(volumes.get(group_volume.name))
        for group_volume in group_volumes(pod, membership, index)
    )


def index_taken_message(
    membership: PodMembership,
    meta: Mapping[str, Any],
    *,
    index: int,
    holder: str,
    stored: bool,
    hold_left: float,
) -> str:
    """The denial for a pod whose own index another live member of its task holds."""
    task, where = membership.task, f"{membership.namespace}/{membership.group}"
    who = f"pod {holder!r}" if holder else "another pod"
    if stored:
        taken = f"task {task!r} index {index} of group {where} is already taken by {who}"
    else:
        taken = (
            f"task {task!r} index {index} of group {where} was given to {who} moments ago, "
            f"which the API server has not stored yet (if that create failed, the index is "
            f"free again in {max(1, math.ceil(hold_left))} s)"
        )
    annotations = meta.get("annotations") or {}
    if TASK_INDEX_ANNOTATION in annotations:
        fix = f"give this pod another {TASK_INDEX_ANNOTATION} or remove it to have one allocated"
    else:
        if JOB_COMPLETION_INDEX_ANNOTATION in annotations:
            source = f"annotation {JOB_COMPLETION_INDEX_ANNOTATION} (Indexed Job)"
        elif VOLCANO_TASK_INDEX_ANNOTATION in annotations:
            source = f"annotation {VOLCANO_TASK_INDEX_ANNOTATION} (Volcano job)"
        else:
            source = f"label {STATEFULSET_POD_INDEX_LABEL} (StatefulSet)"
        fix = (
            f"this pod's index comes from {source}: give each workload of the group its "
            f"own task (label gang-extender.io/task), or set {TASK_INDEX_ANNOTATION} to a "
            f"free index"
        )
    return f"{taken}; {fix}"


def render_pod_patch(
    pod: Mapping[str, Any], membership: PodMembership, index: int
) -> list[JsonPatchOp]:
    """The JSON patch that wires `pod` as member `index` (empty when already wired).

    What the registered injectors want (`extender.injection.injectors.INJECTORS`),
    assembled in their order. Raises AdmissionDenied when the pod's own volumes or
    mounts are in the way.
    """
    return _assemble(pod, injections(pod, membership, index))


def _assemble(pod: Mapping[str, Any], wants: Sequence[Injection]) -> list[JsonPatchOp]:
    """One patch for all `wants`: metadata maps, spec members, volumes, then per
    container its mounts and env, then init containers and tolerations (the order
    the API server applies them in)."""
    meta: dict[str, Any] = dict(pod.get("metadata") or {})
    spec: dict[str, Any] = dict(pod["spec"])
    ops: list[JsonPatchOp] = []
    if "metadata" not in pod:
        ops.append(add("/metadata", {}))
    for field in ("labels", "annotations"):
        entries = {key: value for want in wants for key, value in getattr(want, field).items()}
        ops += _set_map_entries(meta, "/metadata", field, entries)
    for want in wants:
        for key, value in want.spec.items():
            ops += set_member(spec, "/spec", key, value)
    volumes = [want.volume for want in wants if want.volume is not None]
    ops += _volume_ops(spec, volumes)
    env = [item for want in wants for item in want.env]
    for field in ("initContainers", "containers"):
        for position, container in enumerate(spec.get(field) or []):
            path = pointer("spec", field, position)
            ops += _mount_ops(container, path, volumes)
            have = {item.get("name") for item in container.get("env") or []}
            missing = [item for item in env if item["name"] not in have]
            ops += prepend_items(container, path, "env", missing)
    added = _new_init_containers(spec, [c for want in wants for c in want.init_containers])
    # Wired like every container (mounts and env), so a reinvocation finds nothing missing.
    ops += append_items(spec, "/spec", "initContainers", [_wired(c, volumes, env) for c in added])
    present = list(spec.get("tolerations") or [])
    wanted = [dict(t) for want in wants for t in want.tolerations]
    ops += append_items(
        spec,
        "/spec",
        "tolerations",
        [t for i, t in enumerate(wanted) if t not in present + wanted[:i]],
    )
    return ops


def _new_init_containers(
    spec: Mapping[str, Any], wanted: Sequence[Mapping[str, Any]]
) -> list[Mapping[str, Any]]:
    """The wanted init containers the pod does not have yet; AdmissionDenied when one of
    the pod's own has the name of ours (ours is recognised by its command)."""
    present = {c.get("name"): c for c in spec.get("initContainers") or []}
    missing = []
    for container in wanted:
        mine = present.get(container["name"])
        if mine is None:
            missing.append(container)
        elif mine.get("command") != container["command"]:
            raise AdmissionDenied(
                f"the pod already has an init container named {container['name']!r} that "
                f"gang-extender did not add; rename it (gang-extender uses the name "
                f"{container['name']!r} for annotation {names.DEPENDS_ON_ANNOTATION})"
            )
    return missing


def _wired(
    container: Mapping[str, Any], volumes: Sequence[GroupVolume], env: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    own = list(container.get("env") or [])
    have = {item.get("name") for item in own}
    return {
        **container,
        "env": [dict(item) for item in env if item["name"] not in have] + own,
        "volumeMounts": [each.mount() for each in volumes],
    }


def _set_map_entries(
    owner: dict[str, Any], owner_path: str, field: str, entries: Mapping[str, str]
) -> list[JsonPatchOp]:
    """Ops that set `entries` in the map `owner[field]`, creating it when absent.

    A pod without the map gets it whole in one `add`, since RFC 6902 `add` cannot
    create the parent of the member it adds.
    """
    if not entries:
        return []
    current = owner.get(field)
    if current is None:
        return [add(f"{owner_path}/{field}", dict(entries))]
    ops: list[JsonPatchOp] = []
    for key, value in entries.items():
        ops += set_member(current, f"{owner_path}/{field}", key, value)
    return ops


def _volume_ops(spec: dict[str, Any], wanted: Sequence[GroupVolume]) -> list[JsonPatchOp]:
    existing = {volume.get("name"): volume for volume in spec.get("volumes") or []}
    missing = []
    for each in wanted:
        present = existing.get(each.name)
        if present is None:
            missing.append(each.volume)
        elif not each.used_by(present):
            raise AdmissionDenied(
                f"the pod already has a volume named {each.name!r} that is not "
                f"{each.source} {each.target!r}; rename that volume (gang-extender uses "
                f"the name {each.name!r} for the group's {each.source})"
            )
    return append_items(spec, "/spec", "volumes", missing)


def _mount_ops(
    container: Mapping[str, Any], path: str, wanted: Sequence[GroupVolume]
) -> list[JsonPatchOp]:
    mounts = container.get("volumeMounts") or []
    missing = []
    for each in wanted:
        if any(mount.get("name") == each.name for mount in mounts):
            continue
        for mount in mounts:
            if posixpath.normpath(str(mount.get("mountPath") or "/")) == each.mount_path:
                raise AdmissionDenied(
                    f"container {container.get('name')!r} already mounts volume "
                    f"{mount.get('name')!r} at {each.mount_path}, where gang-extender mounts "
                    f"the group's {each.name} volume; {each.mount_fix}"
                )
        missing.append(each.mount())
    return append_items(dict(container), path, "volumeMounts", missing)


def allowed_response(uid: str, patch: list[JsonPatchOp] | None = None) -> dict[str, Any]:
    """An AdmissionReview that allows, with the patch base64-encoded (none when empty)."""
    response: dict[str, Any] = {"uid": uid, "allowed": True}
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(orjson.dumps(patch)).decode("ascii")
    return _review(response)


def denied_response(
    uid: str, message: str, *, code: int = DENIAL_CODE, reason: str = DENIAL_REASON
) -> dict[str, Any]:
    return _review(
        {
            "uid": uid,
            "allowed": False,
            "status": {"code": code, "reason": reason, "message": clip(message)},
        }
    )


def _review(response: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": ADMISSION_API_VERSION, "kind": ADMISSION_KIND, "response": response}
