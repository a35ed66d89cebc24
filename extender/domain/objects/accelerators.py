"""Which resources are accelerators: the setting's patterns, as a small pure matcher.

Every GPU figure of the core (the planner's fewest-nodes fill and its node order,
holds, reservations, starvation placeholders, scores, gauges, hostfile slots)
keys on a gang's *accelerator resource*: the accelerator its members ask most of
(`Accelerators.main`). Which names are accelerators is the
`GANG_ACCELERATOR_RESOURCES` setting (docs/deploy.md): exact names, or a prefix
ending in `*` (`nvidia.com/mig-*`). DRA-served class resources
(`deviceclass.resource.kubernetes.io/<class>`, domain/devices/objects.py) are
accelerators whatever the setting says: a class's devices are what its members
wait for.

A pod asking two accelerator resources has each counted on its own: fitting
checks every resource, and the gang's fill keys on the one asked most.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

DEFAULT_ACCELERATOR_PATTERNS = (
    "nvidia.com/gpu",
    "nvidia.com/mig-*",
    "amd.com/gpu",
    "gpu.intel.com/*",
    "habana.ai/gaudi",
    "google.com/tpu",
    "aws.amazon.com/neuron*",
)
# The implicit extended resource of a DRA DeviceClass: always an accelerator.
DEVICE_CLASS_PREFIX = "deviceclass.resource.kubernetes.io/"

# An extended resource name (a DNS-subdomain prefix, a slash, a name), with an
# optional trailing `*`: the prefix pattern. Kubernetes' own checks are looser on
# the name part; this refuses only what can never name a resource.
_PATTERN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
    r"/([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?\*?|[A-Za-z0-9][-A-Za-z0-9_.]*\*|\*)$"
)


class AcceleratorPatternError(ValueError):
    """A setting that names no resource (its message says which entry and why)."""


@dataclass(frozen=True)
class Accelerators:
    """The accelerator resources: exact names and name prefixes (patterns ending in `*`)."""

    exact: frozenset[str]
    prefixes: tuple[str, ...]
    # The resource a gang asking none is keyed on (the setting's first exact name).
    default: str

    @classmethod
    def parse(cls, patterns: Iterable[str]) -> Accelerators:
        """From the setting's entries; AcceleratorPatternError names the bad one."""
        exact: list[str] = []
        prefixes: list[str] = []
        for raw in patterns:
            entry = raw.strip()
            if not entry:
                continue
            if not _PATTERN.match(entry):
                raise AcceleratorPatternError(
                    f"{entry!r} is not an extended resource name (vendor.example/name) "
                    "nor such a name ending in '*' (a prefix pattern)"
                )
            if entry.endswith("*"):
                prefixes.append(entry[:-1])
            else:
                exact.append(entry)
        if not exact and not prefixes:
            raise AcceleratorPatternError("names no resource; e.g. nvidia.com/gpu,amd.com/gpu")
        return cls(
            exact=frozenset(exact),
            prefixes=tuple(prefixes),
            default=exact[0] if exact else "nvidia.com/gpu",
        )

    @classmethod
    def from_setting(cls, text: str) -> Accelerators:
        """From the comma-separated setting (GANG_ACCELERATOR_RESOURCES)."""
        return cls.parse(text.split(","))

    def matches(self, resource: str) -> bool:
        return _matches(self, resource)

    def asked(self, requests: Mapping[str, int]) -> dict[str, int]:
        """The accelerator resources in `requests` with their (positive) amounts."""
        return {r: n for r, n in requests.items() if n > 0 and _matches(self, r)}

    def amount(self, requests: Mapping[str, int]) -> int:
        """Accelerators asked in all (every accelerator resource, each counted)."""
        return sum(self.asked(requests).values())

    def main(self, requests: Iterable[Mapping[str, int]]) -> str:
        """The accelerator resource asked most over `requests` (ties: by name); the
        default when none is asked."""
        totals: dict[str, int] = {}
        for one in requests:
            for resource, amount in self.asked(one).items():
                totals[resource] = totals.get(resource, 0) + amount
        if not totals:
            return self.default
        return min(totals, key=lambda r: (-totals[r], r))

    def offered(self, allocatable: Mapping[str, int]) -> list[str]:
        """The accelerator resources a node offers (sorted)."""
        return sorted(r for r, n in allocatable.items() if n > 0 and _matches(self, r))


# The matcher is frozen and hashable: a resource name is looked at once per matcher.
@functools.lru_cache(maxsize=4096)
def _matches(accelerators: Accelerators, resource: str) -> bool:
    return (
        resource in accelerators.exact
        or resource.startswith(DEVICE_CLASS_PREFIX)
        or any(resource.startswith(p) for p in accelerators.prefixes)
    )


DEFAULT_ACCELERATORS = Accelerators.parse(DEFAULT_ACCELERATOR_PATTERNS)
