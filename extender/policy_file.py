"""Reads a placement policy file (`--policy`, `policies/*.yaml`) for the pure domain.

The file read and the YAML decoding live here, at the edge, so `extender.domain`
stays free of I/O; `domain.objects.policy.policy_from_mapping` validates what was read.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from extender.domain.objects.policy import Policy, PolicyError, policy_from_mapping


def load_policy(path: Path | None) -> Policy:
    """Read a policy file; the default (binpack, no topology) when `path` is None."""
    if path is None:
        return Policy()
    source = f"policy file {path}"
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as err:
        raise PolicyError(f"{source}: cannot read: {err.strerror}") from None
    except yaml.YAMLError as err:
        raise PolicyError(f"{source}: not valid YAML: {err}") from None
    return policy_from_mapping(raw, source=source)
