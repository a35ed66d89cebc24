"""Wire types of `k8s.io/kube-scheduler/extender/v1`: JSON keys are the Go field names.

Pinned by golden files in tests/golden/extender/. kube-scheduler treats any
non-200 reply as a hard error, so logical refusals travel in 200 bodies
(`FailedNodes`, `FailedAndUnresolvableNodes`, `Error`); only requests that are
not this wire format at all get a 4xx.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from extender.domain.objects.quantity import QuantityError, to_units


class _Wire(BaseModel):
    # Unknown keys are ignored: newer schedulers may add fields.
    model_config = ConfigDict(extra="ignore", populate_by_name=True)


class _Resources(_Wire):
    requests: dict[str, str | int | float] | None = None
    limits: dict[str, str | int | float] | None = None


class _Container(_Wire):
    resources: _Resources | None = None
    restartPolicy: str | None = None


class _Toleration(_Wire):
    key: str | None = None
    operator: str | None = None
    value: str | None = None
    effect: str | None = None


class _PodMeta(_Wire):
    name: str = Field(min_length=1)
    namespace: str | None = None
    uid: str = Field(min_length=1)
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    creationTimestamp: str | None = None
    deletionTimestamp: str | None = None


class _PodSpec(_Wire):
    containers: list[_Container] | None = None
    initContainers: list[_Container] | None = None
    overhead: dict[str, str | int | float] | None = None
    nodeName: str | None = None
    schedulerName: str | None = None
    nodeSelector: dict[str, str] | None = None
    tolerations: list[_Toleration] | None = None


class _PodStatus(_Wire):
    phase: str | None = None
    nominatedNodeName: str | None = None


class PodShape(_Wire):
    """The parts of a Pod the scheduling core reads, with their types.

    Checked on every request so that a pod of the wrong shape is a 400 naming the
    field, not a crash deep in the core; the pod itself stays a plain dict.
    """

    metadata: _PodMeta
    spec: _PodSpec | None = None
    status: _PodStatus | None = None


class NodeList(_Wire):
    items: list[dict[str, Any]] = Field(default_factory=list)


class ExtenderArgs(_Wire):
    Pod: dict[str, Any]
    Nodes: NodeList | None = None
    NodeNames: list[str] | None = None

    @field_validator("Pod")
    @classmethod
    def _pod_has_a_readable_shape(cls, pod: dict[str, Any]) -> dict[str, Any]:
        return readable_pod(pod)

    def candidate_names(self) -> list[str]:
        """Candidates as names: NodeNames when sent, else the names of Nodes.items."""
        if self.NodeNames is not None:
            return self.NodeNames
        if self.Nodes is not None:
            return [node_name(n) for n in self.Nodes.items]
        return []


def readable_pod(pod: dict[str, Any]) -> dict[str, Any]:
    """`pod` itself when the core can read it; else a ValueError naming the field."""
    try:
        PodShape.model_validate(pod)
    except ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: "
            + ("should be an object" if e["type"] == "model_type" else e["msg"])
            for e in err.errors()
        )
        raise ValueError(f"not a Pod this extender can read: {problems}") from None
    problem = quantity_problem(pod)
    if problem:
        raise ValueError(problem)
    return pod


def node_name(node: dict[str, Any]) -> str:
    """metadata.name of a Node in the request ("" when it has none)."""
    meta = node.get("metadata")
    return str(meta.get("name", "")) if isinstance(meta, dict) else ""


def quantity_problem(pod: dict[str, Any]) -> str:
    """The first resource quantity of `pod` that cannot be read, with its field path; or "".

    E.g. "Pod.spec.containers[0].resources.requests.nvidia.com/gpu: invalid quantity
    '1e1000000': too large". Runs after `PodShape`, so the containers are objects.
    """
    spec = pod.get("spec") or {}
    places: list[tuple[str, Any]] = [("Pod.spec.overhead", spec.get("overhead"))]
    for field_name in ("containers", "initContainers"):
        for i, container in enumerate(spec.get(field_name) or []):
            resources = (container or {}).get("resources") or {}
            for kind in ("requests", "limits"):
                places.append((f"Pod.spec.{field_name}[{i}].resources.{kind}", resources.get(kind)))
    for path, mapping in places:
        for name, value in (mapping or {}).items():
            try:
                to_units(name, value)
            except QuantityError as err:
                return f"{path}.{name}: {err}"
    return ""


class ExtenderFilterResult(_Wire):
    Nodes: NodeList | None = None
    NodeNames: list[str] | None = None
    FailedNodes: dict[str, str] = Field(default_factory=dict)
    FailedAndUnresolvableNodes: dict[str, str] = Field(default_factory=dict)
    Error: str = ""


class HostPriority(_Wire):
    Host: str
    Score: int


class ExtenderBindingArgs(_Wire):
    PodName: str = Field(min_length=1)
    PodNamespace: str = Field(min_length=1)
    PodUID: str = Field(min_length=1)
    Node: str = Field(min_length=1)


class ExtenderBindingResult(_Wire):
    Error: str = ""


# ---- preemption (preemptVerb): ExtenderPreemptionArgs / ExtenderPreemptionResult ----
class MetaPod(_Wire):
    UID: str = Field(min_length=1)


class MetaVictims(_Wire):
    # Go sends a nil slice as null.
    Pods: list[MetaPod] | None = None
    NumPDBViolations: int = 0


class _VictimPodMeta(_Wire):
    uid: str = Field(min_length=1)


class _VictimPod(_Wire):
    metadata: _VictimPodMeta


class Victims(_Wire):
    """Victims on one node as whole Pods (sent when the extender is not nodeCacheCapable)."""

    Pods: list[dict[str, Any]] | None = None
    NumPDBViolations: int = 0

    @field_validator("Pods")
    @classmethod
    def _victims_have_uids(cls, pods: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
        for i, pod in enumerate(pods or []):
            try:
                _VictimPod.model_validate(pod)
            except ValidationError:
                raise ValueError(f"victim {i} has no metadata.uid") from None
        return pods


class ExtenderPreemptionArgs(_Wire):
    Pod: dict[str, Any]
    NodeNameToVictims: dict[str, Victims | None] | None = None
    NodeNameToMetaVictims: dict[str, MetaVictims | None] | None = None

    @field_validator("Pod")
    @classmethod
    def _pod_has_a_readable_shape(cls, pod: dict[str, Any]) -> dict[str, Any]:
        return readable_pod(pod)

    def proposed(self) -> dict[str, tuple[list[str], int]]:
        """Victim uids and PDB violations per node: the meta form when sent, else the pods'."""
        if self.NodeNameToMetaVictims is not None:
            return {
                node: (
                    [p.UID for p in (v.Pods or [])] if v is not None else [],
                    v.NumPDBViolations if v is not None else 0,
                )
                for node, v in self.NodeNameToMetaVictims.items()
            }
        return {
            node: (
                [str(p["metadata"]["uid"]) for p in (v.Pods or [])] if v is not None else [],
                v.NumPDBViolations if v is not None else 0,
            )
            for node, v in (self.NodeNameToVictims or {}).items()
        }


class ExtenderPreemptionResult(_Wire):
    NodeNameToMetaVictims: dict[str, MetaVictims] = Field(default_factory=dict)
