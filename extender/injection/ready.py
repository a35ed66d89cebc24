"""Which members of a group are Ready, and the ConfigMap keys that list them. Pure.

`hostfile` names every member the layout plans; `ready.hostfile` names only the
members that are placed and Ready now, so an elastic launcher (Horovod's
`--host-discovery-script`) grows and shrinks with them, and a dependent task's
`wait-for-tasks` init container (extender.injection.depends) can count them.
A member beyond the layout (an elastic group with more pods than minMember)
joins once it is placed and Ready: the list follows the pods, not the layout.

The controller (extender.kube.wiring) renders these with the rest of the
ConfigMap and writes only when the text changed, so a status update that does
not change readiness writes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from extender.domain.objects.accelerators import DEFAULT_ACCELERATORS, Accelerators
from extender.domain.objects.membership import task_name
from extender.domain.objects.quantity import pod_gpus
from extender.injection import names
from extender.injection.layout import GroupLayout, is_deleting, is_finished, member_index
from extender.injection.scripts import discover_hosts_script, wait_for_tasks_script


@dataclass(frozen=True)
class ReadyHost:
    task: str
    index: int
    fqdn: str
    slots: int


def is_ready(pod: Mapping[str, Any]) -> bool:
    """Placed, running on, not going away, and its Ready condition is True.

    A terminating pod still reports Ready until its containers stop; it is left
    out at once, since its host is about to leave the job.
    """
    if is_finished(pod) or is_deleting(pod) or not (pod.get("spec") or {}).get("nodeName"):
        return False
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(
        isinstance(each, Mapping) and each.get("type") == "Ready" and each.get("status") == "True"
        for each in conditions
    )


def ready_hosts(
    group: str,
    layout: GroupLayout,
    pods: Sequence[Mapping[str, Any]],
    accelerators: Accelerators = DEFAULT_ACCELERATORS,
) -> list[ReadyHost]:
    """The Ready members, tasks in layout order (then by name), indexes ascending.

    A member's host is `<group>-<task>-<index>.<group>`, as `hostfile` names it;
    its slots are the GPUs it requests, at least 1 (the `hostfile` rule, taken
    per pod). A pod without a task index (admitted before injection was enabled)
    has no such host and is left out; two Ready pods with one index (a
    replacement racing its predecessor) give one line.
    """
    order = {task: position for position, task in enumerate(layout.task_names())}
    hosts: dict[tuple[str, int], ReadyHost] = {}
    for pod in sorted(pods, key=lambda each: str((each.get("metadata") or {}).get("name"))):
        meta = pod.get("metadata") or {}
        index = member_index(meta)
        if index is None or not is_ready(pod):
            continue
        task = task_name(meta)
        hosts.setdefault(
            (task, index),
            ReadyHost(
                task=task,
                index=index,
                fqdn=names.fqdn(group, task, index),
                slots=max(1, pod_gpus(pod.get("spec") or {}, accelerators)),
            ),
        )
    return sorted(
        hosts.values(), key=lambda host: (order.get(host.task, len(order)), host.task, host.index)
    )


def render_ready_hostfile(hosts: Sequence[ReadyHost]) -> str:
    """`<fqdn> slots=<n>` per Ready member, each line ending in a newline ("" for none)."""
    return "".join(f"{host.fqdn} slots={host.slots}\n" for host in hosts)


def render_ready_data(
    group: str,
    layout: GroupLayout,
    pods: Sequence[Mapping[str, Any]],
    accelerators: Accelerators = DEFAULT_ACCELERATORS,
) -> dict[str, str]:
    """The ConfigMap keys about readiness: the ready hostfile and the two scripts."""
    hosts = ready_hosts(group, layout, pods, accelerators)
    return {
        names.READY_HOSTFILE_KEY: render_ready_hostfile(hosts),
        names.DISCOVER_HOSTS_KEY: discover_hosts_script(group),
        names.WAIT_FOR_TASKS_KEY: wait_for_tasks_script(group),
    }
