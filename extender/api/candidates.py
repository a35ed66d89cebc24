"""kube-scheduler's candidate node names, parsed once per distinct list.

kube-scheduler (with `nodeCacheCapable`) sends its candidates as `NodeNames`, the
last member of every filter and prioritize request: up to every node of the cluster
(5,000 names: ~80 KB, ~110 us to parse and ~60 us to validate), and the same list
pod after pod. `CandidateMemo` keeps the last list with the bytes it came in; a
request whose body ends with those same bytes has only its head (the pod) parsed,
and gets the kept names.

Why that is the answer a full parse gives, whoever sent the body:
- kept: only a body whose end, from `"NodeNames":`, is exactly `"NodeNames":` + the
  names as compact JSON + `}`: the `}` that ends the body closes the top-level
  object, so that member is the object's own (a `,"NodeNames":[` cannot be inside a
  string, where quotes are escaped);
- recalled: only when the body is `head` + `,` + those bytes and `head` + `}` parses
  as a JSON object with at least one member: then `head` is that object's text
  without its `}`, the body is the same object with the kept member added last, and
  a JSON object's last member of a name wins (orjson, Go and the plain path alike).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

__all__ = ["CandidateMemo"]

NAMES_KEY = "NodeNames"
_MEMBER = b'"NodeNames":'


@dataclass(frozen=True)
class _Kept:
    tail: bytes  # `"NodeNames":[...]}`, as the body ended
    names: tuple[str, ...]


class CandidateMemo:
    """The last `NodeNames` a verb was sent, with the bytes it came in."""

    def __init__(self) -> None:
        self._kept: _Kept | None = None

    def recall(self, body: bytes) -> tuple[dict[str, Any], list[str]] | None:
        """(the body's other members, its names) when it ends with the kept bytes;
        None: parse it whole (then `remember`)."""
        kept = self._kept
        if kept is None or not body.endswith(kept.tail):
            return None
        cut = len(body) - len(kept.tail) - 1
        if cut < 1 or body[cut] != ord(","):
            return None
        try:
            head = orjson.loads(body[:cut] + b"}")
        except orjson.JSONDecodeError:
            return None
        if not isinstance(head, dict) or not head:
            return None
        head.pop(NAMES_KEY, None)  # an earlier member of the name: the last one wins
        return head, list(kept.names)

    def remember(self, body: bytes, names: list[str] | None) -> None:
        """After a full parse of `body` that gave `names`: keep them if the body ends
        with them in the form `recall` checks for; else keep nothing."""
        self._kept = None
        if names is None:
            return
        tail = _MEMBER + orjson.dumps(names) + b"}"
        if body.endswith(tail):  # `recall` checks what comes before it
            self._kept = _Kept(tail, tuple(names))
