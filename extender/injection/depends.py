"""A task that starts only once other tasks are Ready (Volcano's `dependsOn`). Pure.

Declared on the dependent pods (the launcher's template), read by the webhook:

    gang-extender.io/depends-on: "worker"            # every worker Ready
    gang-extender.io/depends-on: "worker=2,ps"       # at least 2 workers, every ps
    gang-extender.io/depends-on-timeout: "600"       # seconds; see below

The webhook gives such a pod a last init container, `wait-for-tasks`, that runs
`wait_for_tasks.sh` from the group's ConfigMap (extender.injection.scripts): it
counts the task's Ready hosts in `ready.hostfile` and exits 0 once there are
enough, or 1 with a message once the timeout has passed. The gang is still
placed whole; the dependent pod only starts its containers later. The timeout,
first match wins: the annotation, the PodGroup's `spec.podsReadyTimeoutSeconds`,
`DEFAULT_WAIT_TIMEOUT_SECONDS`. There is no way to wait forever.

A task cannot depend on itself: its pods would each wait for the others to be
Ready, and none is Ready before its init containers finish.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from extender.domain.objects.limits import MAX_GROUP_SIZE, MAX_SECONDS, MAX_TASKS, quoted
from extender.domain.objects.membership import MembershipError, is_dns_label
from extender.injection import names
from extender.injection.layout import DeclaredLayout
from extender.injection.scripts import DEFAULT_WAIT_TIMEOUT_SECONDS

# requests == limits keeps a Guaranteed pod Guaranteed (QoS counts init containers);
# a shell polling a file needs no more.
WAIT_CONTAINER_RESOURCES = {"cpu": "10m", "memory": "32Mi"}

_ENTRY = re.compile(r"^(?P<task>[^=]+?)(?:=(?P<count>[^=]*))?$")


@dataclass(frozen=True)
class TaskWait:
    task: str
    count: int | None  # None: every member of the task's layout (VC_<TASK>_NUM)

    def arg(self) -> str:
        return self.task if self.count is None else f"{self.task}={self.count}"


@dataclass(frozen=True)
class Dependency:
    waits: tuple[TaskWait, ...]
    timeout_seconds: int

    def script_args(self) -> list[str]:
        return [each.arg() for each in self.waits]


def read_dependency(
    meta: Mapping[str, Any],
    *,
    task: str,
    layout: DeclaredLayout | None,
    podgroup: Mapping[str, Any] | None,
) -> Dependency | None:
    """The pod's declared dependency, None without one; MembershipError saying what to fix."""
    annotations = meta.get("annotations") or {}
    raw = annotations.get(names.DEPENDS_ON_ANNOTATION)
    raw_timeout = annotations.get(names.DEPENDS_ON_TIMEOUT_ANNOTATION)
    if raw is None:
        if raw_timeout is not None:
            raise MembershipError(
                f"annotation {names.DEPENDS_ON_TIMEOUT_ANNOTATION} is set but "
                f"{names.DEPENDS_ON_ANNOTATION} is not; name the tasks to wait for, "
                f"or remove the timeout"
            )
        return None
    waits = _parse_waits(str(raw), task=task, layout=layout)
    return Dependency(waits=waits, timeout_seconds=_timeout(raw_timeout, podgroup))


def _parse_waits(raw: str, *, task: str, layout: DeclaredLayout | None) -> tuple[TaskWait, ...]:
    where = f"annotation {names.DEPENDS_ON_ANNOTATION}={quoted(raw)}"
    entries = [part.strip() for part in raw.split(",")]
    if len(entries) > MAX_TASKS:
        raise MembershipError(f"{where} names {len(entries)} tasks; at most {MAX_TASKS}")
    waits: list[TaskWait] = []
    for entry in entries:
        match = _ENTRY.match(entry)
        if match is None or not is_dns_label(match["task"].strip()):
            raise MembershipError(
                f"{where}: {quoted(entry)} must be a task name, optionally with a count "
                f'("worker" or "worker=2"; several separated by commas)'
            )
        name = match["task"].strip()
        count = _count(match["count"], where, name)
        if name == task:
            raise MembershipError(
                f"{where}: task {task!r} cannot wait for itself (each of its members would "
                f"wait for the others, and none is Ready before it starts); name other tasks"
            )
        if layout is not None and name not in layout.counts:
            raise MembershipError(
                f"{where}: task {name!r} is not in the layout {layout.describe()}; "
                f"name one of {', '.join(layout.counts)}"
            )
        if any(each.task == name for each in waits):
            raise MembershipError(f"{where}: task {name!r} is named twice; name it once")
        waits.append(TaskWait(task=name, count=count))
    return tuple(waits)


def _count(raw: str | None, where: str, task: str) -> int | None:
    if raw is None:
        return None
    text = raw.strip()
    # Length first: int() refuses a text of more than 4,300 digits with a ValueError.
    if not text.isdigit() or (len(text) <= 5 and int(text) < 1):
        raise MembershipError(
            f"{where}: the count of {task!r} must be a whole number >= 1, got {quoted(raw)}"
        )
    if len(text) > 5 or int(text) > MAX_GROUP_SIZE:
        raise MembershipError(
            f"{where}: the count of {task!r} must be at most {MAX_GROUP_SIZE}, got {quoted(raw)}"
        )
    return int(text)


def _timeout(raw: Any, podgroup: Mapping[str, Any] | None) -> int:
    if raw is not None:
        text = str(raw).strip()
        where = f"annotation {names.DEPENDS_ON_TIMEOUT_ANNOTATION}={quoted(raw)}"
        if not text.isdigit() or (len(text) <= 8 and int(text) < 1):
            raise MembershipError(f"{where} must be a whole number of seconds >= 1")
        if len(text) > 8 or int(text) > MAX_SECONDS:
            raise MembershipError(f"{where} must be at most {MAX_SECONDS} seconds (a year)")
        return int(text)
    from_podgroup = ((podgroup or {}).get("spec") or {}).get("podsReadyTimeoutSeconds")
    if isinstance(from_podgroup, int) and not isinstance(from_podgroup, bool) and from_podgroup > 0:
        return from_podgroup
    return DEFAULT_WAIT_TIMEOUT_SECONDS


def wait_container(pod: Mapping[str, Any], dependency: Dependency) -> dict[str, Any]:
    """The `wait-for-tasks` init container (without the group's mounts and env, which
    the webhook adds to it as to every container).

    It runs in the image of the pod's first container, which has the `/bin/sh` the
    member's own scripts use, with that container's pull policy and security
    context, so a namespace that admits the pod admits the wait too.
    """
    first = ((pod.get("spec") or {}).get("containers") or [{}])[0]
    container: dict[str, Any] = {
        "name": names.WAIT_CONTAINER,
        "image": first.get("image"),
        "command": [
            "sh",
            f"{names.VOLCANO_MOUNT_PATH}/{names.WAIT_FOR_TASKS_KEY}",
            *dependency.script_args(),
        ],
        "env": [{"name": names.ENV_WAIT_TIMEOUT, "value": str(dependency.timeout_seconds)}],
        "resources": {
            "requests": dict(WAIT_CONTAINER_RESOURCES),
            "limits": dict(WAIT_CONTAINER_RESOURCES),
        },
    }
    for key in ("imagePullPolicy", "securityContext"):
        if first.get(key) is not None:
            container[key] = first[key]
    return container
