"""Wire types of `k8s.io/kube-scheduler/extender/v1`: JSON keys are the Go field names.

Pinned by golden files in tests/golden/extender/. kube-scheduler treats any
non-200 reply as a hard error, so logical refusals travel in 200 bodies
(`FailedNodes`, `FailedAndUnresolvableNodes`, `Error`); only requests that are
not this wire format at all get a 4xx.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator


class _Wire(BaseModel):
    # Unknown keys are ignored: newer schedulers may add fields.
    model_config = ConfigDict(extra="ignore", populate_by_name=True)


class NodeList(_Wire):
    items: list[dict[str, Any]] = Field(default_factory=list)


class ExtenderArgs(_Wire):
    Pod: dict[str, Any]
    Nodes: NodeList | None = None
    NodeNames: list[str] | None = None

    @field_validator("Pod")
    @classmethod
    def _pod_has_identity(cls, pod: dict[str, Any]) -> dict[str, Any]:
        meta = pod.get("metadata")
        if not isinstance(meta, dict) or not meta.get("name"):
            raise ValueError("Pod.metadata.name is required")
        return pod

    def candidate_names(self) -> list[str]:
        """Candidates as names: NodeNames when sent, else the names of Nodes.items."""
        if self.NodeNames is not None:
            return self.NodeNames
        if self.Nodes is not None:
            return [str((n.get("metadata") or {}).get("name", "")) for n in self.Nodes.items]
        return []


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
