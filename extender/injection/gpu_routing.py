"""Route plain GPU pods to the gang scheduler, so they respect gang reservations.

The default scheduler does not see this service's reservations: a GPU pod it places
may take the room a gang waiting in its bind barrier was planned on. With
`Settings.route_gpu_pods`, the webhook gives every pod that requests an
accelerator resource (`nvidia.com/gpu`, `amd.com/gpu`, ...: `Settings.accelerator_resources`)
in an opted-in namespace `spec.schedulerName: gang-extender`;
kube-scheduler's gang-extender profile then places it like any other pod, except
never onto capacity reserved for a gang (filter decision order, step 1).

Only pods left to the default scheduler are routed (no schedulerName, or
`default-scheduler`): a pod that names another scheduler chose it on purpose.
Pure: a function of the pod, returning JSON-patch ops.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from extender.domain.objects.accelerators import DEFAULT_ACCELERATORS, Accelerators
from extender.domain.objects.membership import DEFAULT_SCHEDULER_NAME, SCHEDULER_NAME
from extender.domain.objects.quantity import pod_gpus
from extender.injection.patch import JsonPatchOp, pointer, set_member


def wants_routing(
    pod: Mapping[str, Any], accelerators: Accelerators = DEFAULT_ACCELERATORS
) -> bool:
    """The pod requests an accelerator and is left to the default scheduler."""
    spec = pod.get("spec") or {}
    if spec.get("schedulerName") not in (None, "", DEFAULT_SCHEDULER_NAME):
        return False
    return pod_gpus(spec, accelerators) > 0


def route_to_gang_scheduler(
    pod: Mapping[str, Any], accelerators: Accelerators = DEFAULT_ACCELERATORS
) -> list[JsonPatchOp]:
    """Ops that set the pod's schedulerName to gang-extender; none when it is not wanted."""
    if not wants_routing(pod, accelerators):
        return []
    return set_member(dict(pod.get("spec") or {}), pointer("spec"), "schedulerName", SCHEDULER_NAME)
