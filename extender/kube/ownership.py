"""Which objects this service created: a seal only it can compute, kept on the object.

A label (`app.kubernetes.io/managed-by`, `gang-extender.io/placeholder`) says what an
object claims to be, and anyone who may create objects in a namespace can write it.
So what the service creates carries the annotation `gang-extender.io/seal`: an
HMAC-SHA256, under a key only the service holds, of what identifies the object.

- Placeholder pods: namespace, name, group and node (a pod's name and node cannot
  change; a relabelled placeholder no longer matches). Sealed in the create itself,
  so the watch never sees one of ours unsealed. Only a sealed pod counts as a gang's
  room, and only a sealed pod is ever deleted as a placeholder.
- The group's Secret, Service and ConfigMap: kind, namespace, name and the object's
  own uid, which the API server gives at creation and nobody can choose; sealed
  right after the create. A copy of a seal on another object does not match.

The key is derived from the webhook's path token (Secret `webhook_path_secret`,
shared by every replica, readable by cluster administrators only), so every
replica and every restart computes the same seals. Without that Secret
(`webhook_path_secret` unset) the key is a fixed public value: seals are then
consistent but forgeable, and the checks are as weak as the label was
(docs/deploy.md#trust-model).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from typing import Any

SEAL_ANNOTATION = "gang-extender.io/seal"
_CONTEXT = b"gang-extender object ownership seal v1"
# The key without a token: public, so a seal proves nothing (see the module docstring).
_PUBLIC_KEY = hashlib.sha256(b"gang-extender public seal key").digest()


class OwnershipSeal:
    """Seals and checks objects; `use_token` sets the key once the token is read."""

    def __init__(self, token: str | None = None) -> None:
        self._key = _PUBLIC_KEY
        if token is not None:
            self.use_token(token)

    def use_token(self, token: str) -> None:
        self._key = hmac.new(token.encode(), _CONTEXT, hashlib.sha256).digest()

    def _mac(self, *parts: str) -> str:
        return hmac.new(self._key, "\0".join(parts).encode(), hashlib.sha256).hexdigest()

    def _matches(self, meta: Mapping[str, Any], expected: str) -> bool:
        found = (meta.get("annotations") or {}).get(SEAL_ANNOTATION)
        return isinstance(found, str) and hmac.compare_digest(found, expected)

    # ---- placeholder pods
    def placeholder(self, *, namespace: str, name: str, group: str, node: str) -> str:
        return self._mac("placeholder", namespace, name, group, node)

    def is_our_placeholder(self, pod: Mapping[str, Any], group: str) -> bool:
        """`pod` (labelled a placeholder of `group`) is one this service created."""
        meta = pod.get("metadata") or {}
        node = (pod.get("spec") or {}).get("nodeName")
        if not isinstance(node, str):
            return False
        expected = self.placeholder(
            namespace=str(meta.get("namespace") or "default"),
            name=str(meta.get("name") or ""),
            group=group,
            node=node,
        )
        return self._matches(meta, expected)

    # ---- the group's Secret, Service and ConfigMap
    def object_seal(self, obj: Mapping[str, Any]) -> str:
        meta = obj.get("metadata") or {}
        return self._mac(
            "object",
            str(obj.get("kind") or ""),
            str(meta.get("namespace") or ""),
            str(meta.get("name") or ""),
            str(meta.get("uid") or ""),
        )

    def is_sealed(self, obj: Mapping[str, Any]) -> bool:
        """`obj` carries the seal of its own uid: this service created (or adopted) it."""
        meta = obj.get("metadata") or {}
        return bool(meta.get("uid")) and self._matches(meta, self.object_seal(obj))
