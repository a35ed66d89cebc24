"""Placement policy: how the planner orders nodes, loaded from `policies/*.yaml`.

A policy file is validated strictly (unknown fields are errors) so a typo stops
start-up with a message that names the field, instead of silently binpacking.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path

import yaml
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


def load_policy(path: Path | None) -> Policy:
    """Read a policy file; the default (binpack, no topology) when `path` is None."""
    if path is None:
        return Policy()
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as err:
        raise PolicyError(f"policy file {path}: cannot read: {err.strerror}") from None
    except yaml.YAMLError as err:
        raise PolicyError(f"policy file {path}: not valid YAML: {err}") from None
    if not isinstance(raw, dict):
        raise PolicyError(f"policy file {path}: expected a mapping at the top level")
    try:
        return Policy.model_validate(raw)
    except ValidationError as err:
        problems = "; ".join(
            f"field '{'.'.join(str(p) for p in e['loc'])}': {e['msg']}" for e in err.errors()
        )
        raise PolicyError(f"policy file {path}: {problems}") from None
