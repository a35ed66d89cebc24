"""Create gang members behind gang-extender's admission gate (Settings.admission_gate).

With the setting on, the webhook adds the scheduling gate `ADMISSION_GATE` to every
member of a gang that gang-extender places: kube-scheduler leaves the pod alone
until the service has planned its whole gang and lifted the gate with the planned
node (extender/domain/queue/gang_admission.py, docs/design.md#gated-admission).
Another gate the pod brings (Kueue's) is kept beside it. Pure: a function of the
pod, returning JSON-patch ops.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from extender.domain.objects.membership import ADMISSION_GATE, SCHEDULER_NAME
from extender.injection.patch import JsonPatchOp, append_items


def admission_gate_ops(pod: Mapping[str, Any], *, routed: bool = False) -> list[JsonPatchOp]:
    """Ops that put gang-extender's scheduling gate on a member of our scheduler.

    Only on a pod gang-extender places (spec.schedulerName, or `routed` to it by
    this same patch), and only once: a webhook reinvocation finds it there.
    """
    spec: dict[str, Any] = dict(pod.get("spec") or {})
    if spec.get("schedulerName") != SCHEDULER_NAME and not routed:
        return []
    gates = spec.get("schedulingGates") or []
    if any(isinstance(g, Mapping) and g.get("name") == ADMISSION_GATE for g in gates):
        return []
    return append_items(spec, "/spec", "schedulingGates", [{"name": ADMISSION_GATE}])
