"""Whether a group's rendered ConfigMap fits in one API object.

The API server refuses a ConfigMap whose data (keys and values) exceeds 1 MiB (a
Secret's decoded data too); the wiring lists every member in the ConfigMap, so a
large group with long group and task names can render more than that. Such a
group is refused with a message here (`MembershipError`: the reconciler reports it
as `InvalidSpec`) before anything is sent, instead of a POST the API server
refuses again on every pass.
"""

from __future__ import annotations

from collections.abc import Mapping

from extender.domain.objects.membership import MembershipError

# The API server's limit on a ConfigMap's data (and a Secret's decoded data).
MAX_OBJECT_DATA_BYTES = 1 << 20


def data_bytes(data: Mapping[str, str]) -> int:
    """The size the API server counts: every key and value, in UTF-8 bytes."""
    return sum(len(key.encode()) + len(value.encode()) for key, value in data.items())


def check_fits(kind: str, name: str, data: Mapping[str, str], *, members: int) -> None:
    """Raise MembershipError naming the limit when `data` is more than one object holds."""
    size = data_bytes(data)
    if size > MAX_OBJECT_DATA_BYTES:
        raise MembershipError(
            f"{kind} {name} would hold {size:,} bytes for {members} members; the API "
            f"server stores at most {MAX_OBJECT_DATA_BYTES:,}: shorten the group or task "
            f"names, or lower the group's size"
        )
