"""The environment every container and init container of a member gets (DESIGN section 4).

The index and task are literal values (they are this pod's own); host lists and
counts come from ConfigMap `<group>-svc` through configMapKeyRef, so they are
whatever the controller last wrote when the container starts, and one source of
truth serves both the env and the files under /etc/volcano.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from extender.injection import names

EnvVar = dict[str, Any]


def member_env(*, group: str, task: str, index: int, tasks: Sequence[str]) -> list[EnvVar]:
    """Env for one member, in the order it is prepended to each container's env.

    `tasks` are the tasks whose VC_<TASK>_HOSTS / VC_<TASK>_NUM to give: every task
    of the declared layout, or only the pod's own task when none is declared (the
    webhook cannot know the others; the ConfigMap then lists what the pods show).
    """
    configmap = names.svc_configmap_name(group)
    env: list[EnvVar] = [
        {"name": names.ENV_TASK_INDEX, "value": str(index)},
        {"name": names.ENV_TASK_INDEX_LEGACY, "value": str(index)},
        {"name": names.ENV_TASK_NAME, "value": task},
    ]
    keys: list[str] = []
    for each in tasks:
        keys += [names.task_hosts_env(each), names.task_num_env(each)]
    keys += [names.HOROVOD_HOSTS_KEY, names.NUM_SLOTS_KEY]
    env += [_from_configmap(key, configmap) for key in keys]
    return env


def _from_configmap(key: str, configmap: str) -> EnvVar:
    # Not optional: a container must not start with an empty host list. The kubelet
    # retries until the controller has written the key, which it does as soon as
    # the group's PodGroup exists.
    return {"name": key, "valueFrom": {"configMapKeyRef": {"name": configmap, "key": key}}}
