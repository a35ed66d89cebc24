"""Placement policy: how the planner orders nodes, validated from a decoded mapping.

A policy is validated strictly (unknown fields are errors) so a typo stops
start-up with a message that names the field, instead of silently binpacking.
Reading and decoding `policies/*.yaml` is `extender.policy_file`'s job: the
domain does no I/O.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError


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
