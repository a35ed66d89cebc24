"""Placement policy and per-group topology: how the planner orders nodes and domains.

A policy is validated strictly (unknown fields are errors) so a typo stops
start-up with a message that names the field, instead of silently binpacking.
Reading and decoding `policies/*.yaml` is `extender.policy_file`'s job: the
domain does no I/O.

`GroupTopology` is one group's ordered topology: a required node label (the gang
never spans two of its values) and preferred labels, coarsest first (as few
values of each as possible). It is parsed here, purely, from a PodGroup's
`spec.topology` or Kueue's pod annotations; the policy's cluster-wide topology is
the default for a group that sets none.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from extender.domain.objects.limits import MAX_TOPOLOGY_LABELS, listing, quoted


class Strategy(StrEnum):
    BINPACK = "binpack"  # fill GPUs onto the fewest nodes; keep whole nodes free
    SPREAD = "spread"  # most free GPUs first; fewest gang members per node


class TopologyMode(StrEnum):
    PREFERRED = "preferred"  # one domain when it fits, else anywhere
    REQUIRED = "required"  # one domain or wait


class Topology(BaseModel):
    model_config = ConfigDict(extra="forbid")

    key: str = Field(min_length=1, description="node label whose value names a domain")
    mode: TopologyMode = TopologyMode.PREFERRED


class Policy(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = "binpack"
    strategy: Strategy = Strategy.BINPACK
    topology: Topology | None = None


@dataclass(frozen=True)
class GroupTopology:
    """Where a gang may and should go: see the module docstring."""

    required: str | None = None
    preferred: tuple[str, ...] = ()

    def describe(self) -> str:
        parts = [f"required {self.required}"] if self.required else []
        if self.preferred:
            parts.append(f"preferred {', '.join(self.preferred)}")
        return "; ".join(parts)


def default_topology(policy: Policy) -> GroupTopology:
    """The cluster-wide policy's topology, as a group's (none: no topology at all)."""
    if policy.topology is None:
        return GroupTopology()
    if policy.topology.mode is TopologyMode.REQUIRED:
        return GroupTopology(required=policy.topology.key)
    return GroupTopology(preferred=(policy.topology.key,))


# Kueue's TAS pod annotations (one label each; Kueue allows only one of them per pod set).
KUEUE_REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
KUEUE_PREFERRED_TOPOLOGY = "kueue.x-k8s.io/podset-preferred-topology"

# A Kubernetes label key: an optional DNS-subdomain prefix and '/', then a name of
# at most 63 alphanumerics, '-', '_' or '.', starting and ending alphanumeric.
_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_LABEL_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def is_label_key(value: object) -> bool:
    if not isinstance(value, str):
        return False
    prefix, slash, name = value.rpartition("/")
    if slash and (len(prefix) > 253 or not _LABEL_PREFIX.match(prefix)):
        return False
    return bool(_LABEL_NAME.match(name))


def topology_from_spec(raw: object, *, where: str) -> tuple[GroupTopology | None, str | None]:
    """A PodGroup's `spec.topology` ({required: label, preferred: [label, ...]}).

    Returns the topology (None when unset) and an error that names the field, `where`
    being its path ("PodGroup spec.topology"). Never raises: bad input is a message.
    """
    if raw is None:
        return None, None
    if not isinstance(raw, Mapping):
        return None, (
            f"{where} must be a mapping with 'required' and/or 'preferred', got {quoted(raw)}"
        )
    unknown = sorted(str(k) for k in raw if k not in ("required", "preferred"))
    if unknown:
        return None, (
            f"{where} has unknown field(s) {listing(k if len(k) <= 63 else quoted(k) for k in unknown)}; "
            "use required, preferred"
        )
    required = raw.get("required")
    if required is not None and not is_label_key(required):
        return None, f"{where}.required={quoted(required)} is not a node label key"
    preferred = raw.get("preferred")
    if preferred is None:
        preferred = []
    if not isinstance(preferred, list):
        return None, f"{where}.preferred must be a list of node label keys, coarsest first"
    if len(preferred) > MAX_TOPOLOGY_LABELS:
        return None, (
            f"{where}.preferred lists {len(preferred)} labels; at most {MAX_TOPOLOGY_LABELS} "
            "are accepted (one per level of the cluster's topology, coarsest first)"
        )
    for i, label in enumerate(preferred):
        if not is_label_key(label):
            return None, f"{where}.preferred[{i}]={quoted(label)} is not a node label key"
    if len(set(preferred)) != len(preferred):
        return None, f"{where}.preferred names a label twice: {', '.join(preferred)}"
    if required is not None and required in preferred:
        return None, f"{where}: {required} is both required and preferred; list it once"
    if required is None and not preferred:
        return None, None
    return GroupTopology(required=required, preferred=tuple(preferred)), None


def topology_from_annotations(
    annotations: Mapping[str, str],
) -> tuple[GroupTopology | None, str | None]:
    """Kueue's podset topology annotations on a pod, read the way Kueue reads them."""
    required = annotations.get(KUEUE_REQUIRED_TOPOLOGY)
    preferred = annotations.get(KUEUE_PREFERRED_TOPOLOGY)
    if required is None and preferred is None:
        return None, None
    if required is not None and preferred is not None:
        return None, (
            f"annotations {KUEUE_REQUIRED_TOPOLOGY} and {KUEUE_PREFERRED_TOPOLOGY} are both set; "
            "Kueue allows one of them, set only one"
        )
    name, value = (
        (KUEUE_REQUIRED_TOPOLOGY, required)
        if required is not None
        else (KUEUE_PREFERRED_TOPOLOGY, preferred)
    )
    if not is_label_key(value):
        return None, f"annotation {name}={quoted(value)} is not a node label key"
    if required is not None:
        return GroupTopology(required=required), None
    assert preferred is not None
    return GroupTopology(preferred=(preferred,)), None


class PolicyError(ValueError):
    """A policy file that cannot be used; the message names the file and field."""


def policy_from_mapping(raw: Any, *, source: str) -> Policy:
    """Validate a decoded policy document; `source` names it in errors ("policy file x.yaml")."""
    if not isinstance(raw, dict):
        raise PolicyError(f"{source}: expected a mapping at the top level")
    try:
        return Policy.model_validate(raw)
    except ValidationError as err:
        problems = "; ".join(
            f"field '{'.'.join(str(p) for p in e['loc'])}': {e['msg']}" for e in err.errors()
        )
        raise PolicyError(f"{source}: {problems}") from None
