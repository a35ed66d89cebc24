"""Splits a Kubernetes list's JSON answer into its items while the answer is still arriving.

Why: one list request served from the API server's watch cache brings 50,000 pods in
~1.0-1.5 s, where the same list streamed as a watch (WatchList) takes 3.0-3.3 s, and
pages of 1,000 longer still (docs/benchmarks.md, round 9). Parsed whole, that answer
(~100 MB at 50,000 pods) would be held at once; split as it arrives, the cache holds
one page of items at a time, as with the other ways of listing.

How: kube-apiserver writes a list as `{"kind":..,"apiVersion":..,"metadata":{..},
"items":[{..},{..},..]}`, compact, every item an object whose first field is the same
one (`metadata` for built-in kinds, `apiVersion` for custom resources, whose keys come
sorted). So items are cut at `},{"<that field>":`. The same bytes can occur inside an
item (a custom resource's ownerReferences); there the piece from the item's start
does not parse (its braces are unbalanced), so the cut is not taken and the item goes
on. Anything else (no items array where expected, an item that never parses, an
item larger than `max_item_bytes`) is a ListSplitError, and the caller lists another
way: nothing is guessed.
"""

from __future__ import annotations

from typing import Any

import orjson

__all__ = ["ListSplitError", "ListSplitter"]

ITEMS_START = b'"items":['
# The longest a single item may get before the split is given up: an object in etcd is
# at most ~1.5 MiB by default, so this is only reached when items cannot be told apart.
MAX_ITEM_BYTES = 16 * 1024 * 1024


class ListSplitError(ValueError):
    """The answer is not a list whose items can be cut apart: list another way."""


class ListSplitter:
    """Feed the answer's bytes in order (`feed`), then `finish`; each returns the items
    completed by then. `envelope` is the list without its items (kind, apiVersion,
    metadata), known once the items have begun."""

    def __init__(self, max_item_bytes: int = MAX_ITEM_BYTES) -> None:
        self.max_item_bytes = max_item_bytes
        self.envelope: dict[str, Any] | None = None
        self._pending = b""  # the bytes not yet handed out as items
        self._separator: bytes | None = None  # b'},{"<first field>":', once seen
        self._scan_from = 0  # in _pending: where the search for the next cut resumes

    def feed(self, chunk: bytes) -> list[Any]:
        pending = self._pending + chunk
        if self.envelope is None:
            at = pending.find(ITEMS_START)
            if at < 0:
                self._pending = pending
                return []
            self.envelope = _envelope(pending[:at])
            pending = pending[at + len(ITEMS_START) :]
        if self._separator is None:
            self._separator = _separator_of(pending)
            if self._separator is None:  # the first item's first field has not all come
                self._pending = pending
                self._check_size()
                return []
        items: list[Any] = []
        separator, start, scan = self._separator, 0, self._scan_from
        while (at := pending.find(separator, scan)) >= 0:
            try:
                items.append(orjson.loads(pending[start : at + 1]))
            except orjson.JSONDecodeError:
                scan = at + 1  # the same bytes inside an item: it goes on
                continue
            start = scan = at + 2
        self._pending = pending[start:]
        # A cut may straddle this chunk's end: look again from just before it.
        self._scan_from = max(scan, len(pending) - len(separator) + 1, start) - start
        self._check_size()
        return items

    def finish(self) -> list[Any]:
        """The last item, once the whole answer was fed, and the envelope's fields that
        follow the items (a custom resource's list has its keys sorted: kind and
        metadata come after); ListSplitError if it was not a list whose items could be
        cut apart."""
        if self.envelope is None:
            raise ListSplitError("the answer has no items array")
        rest = self._pending.rstrip()
        items: list[Any] = []
        if rest[:1] == b"]":
            tail = rest[1:]
        else:
            last, tail = _last_item(rest)
            items.append(last)
        self.envelope.update(_envelope_tail(tail))
        return items

    def _check_size(self) -> None:
        if len(self._pending) > self.max_item_bytes:
            raise ListSplitError(
                f"no item boundary in {len(self._pending)} bytes: items cannot be told apart"
            )


def _envelope(head: bytes) -> dict[str, Any]:
    try:
        envelope = orjson.loads(head + b'"items":[]}')
    except orjson.JSONDecodeError:
        raise ListSplitError("the answer does not begin like a list") from None
    # Valid only as the object that holds the appended member: always a dict.
    assert isinstance(envelope, dict)
    del envelope["items"]
    return envelope


def _last_item(rest: bytes) -> tuple[Any, bytes]:
    """The one item `rest` begins with, ended by the items array's `]`; and what follows."""
    scan = 0
    while (at := rest.find(b"}]", scan)) >= 0:
        try:
            return orjson.loads(rest[: at + 1]), rest[at + 2 :]
        except orjson.JSONDecodeError:
            scan = at + 1  # an array inside the item ends here
    raise ListSplitError("the answer's items could not be cut apart")


def _envelope_tail(tail: bytes) -> dict[str, Any]:
    """The list's fields after its items array: `}` alone, or `,"kind":..}`."""
    if tail == b"}":
        return {}
    try:
        fields = orjson.loads(b"{" + tail[1:]) if tail[:1] == b"," else None
    except orjson.JSONDecodeError:
        fields = None
    if not isinstance(fields, dict):
        raise ListSplitError("the answer does not end like a list")
    return fields


def _separator_of(items: bytes) -> bytes | None:
    """`},{"<first field>":` from the start of the items array; None until it has come
    (or the array is empty: `finish` tells)."""
    if items[:1] in (b"", b"]"):
        return None
    if items[:2] != b'{"'[: len(items)]:
        raise ListSplitError("the list's items are not objects written compactly")
    end = items.find(b'"', 2)
    if end < 0:
        return None
    return b'},{"' + items[2:end] + b'":'
