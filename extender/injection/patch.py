"""RFC 6902 JSON Patch: typed operations, RFC 6901 pointers, and a reference `apply_patch`.

The API server applies our patch to the pod it sent, so every path must exist in
that pod (`add` creates one missing member, never a missing parent), and a value
that is already present is changed with `replace`, which fails if it is absent.
`apply_patch` implements exactly those rules so tests can check a patch against
the pod it was made for, the way the API server will.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any, Literal, NotRequired, TypedDict


class JsonPatchOp(TypedDict):
    op: Literal["add", "replace", "remove", "test"]
    path: str
    value: NotRequired[Any]


class PatchError(ValueError):
    """A patch that does not apply to its document (a bug in whoever built it)."""


def escape_token(token: str) -> str:
    """RFC 6901: '~' becomes '~0' and '/' becomes '~1' (in that order)."""
    return token.replace("~", "~0").replace("/", "~1")


def unescape_token(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def pointer(*tokens: str | int) -> str:
    """A JSON pointer from unescaped tokens: pointer("metadata", "labels", "a/b")."""
    return "".join(f"/{escape_token(str(token))}" for token in tokens)


def add(path: str, value: Any) -> JsonPatchOp:
    return {"op": "add", "path": path, "value": value}


def replace(path: str, value: Any) -> JsonPatchOp:
    return {"op": "replace", "path": path, "value": value}


def set_member(parent: dict[str, Any], parent_path: str, key: str, value: Any) -> list[JsonPatchOp]:
    """Ops that make `parent[key] == value`: none, `add`, or `replace`."""
    if key not in parent:
        return [add(f"{parent_path}/{escape_token(key)}", value)]
    if parent[key] == value:
        return []
    return [replace(f"{parent_path}/{escape_token(key)}", value)]


def set_map_entry(
    owner: dict[str, Any], owner_path: str, field: str, key: str, value: str
) -> list[JsonPatchOp]:
    """Ops that make `owner[field][key] == value`, creating `owner[field]` when absent.

    For labels and annotations: a pod without any gets the whole map in one `add`,
    since RFC 6902 `add` cannot create the parent of the member it adds.
    """
    current = owner.get(field)
    if current is None:
        return [add(f"{owner_path}/{field}", {key: value})]
    return set_member(current, f"{owner_path}/{field}", key, value)


def append_items(
    owner: dict[str, Any], owner_path: str, field: str, items: Sequence[Any]
) -> list[JsonPatchOp]:
    """Ops that append `items` to the list `owner[field]`, creating it when absent."""
    if not items:
        return []
    if owner.get(field) is None:
        return [add(f"{owner_path}/{field}", list(items))]
    return [add(f"{owner_path}/{field}/-", item) for item in items]


def prepend_items(
    owner: dict[str, Any], owner_path: str, field: str, items: Sequence[Any]
) -> list[JsonPatchOp]:
    """Ops that insert `items`, in order, before the existing items of `owner[field]`."""
    if not items:
        return []
    if owner.get(field) is None:
        return [add(f"{owner_path}/{field}", list(items))]
    return [add(f"{owner_path}/{field}/{position}", item) for position, item in enumerate(items)]


def apply_patch(document: Any, ops: Sequence[JsonPatchOp]) -> Any:
    """Apply `ops` to a copy of `document` with RFC 6902 semantics (add/replace/remove/test)."""
    result = copy.deepcopy(document)
    for op in ops:
        result = _apply_one(result, op)
    return result


def _apply_one(document: Any, op: JsonPatchOp) -> Any:
    path = op["path"]
    if path == "":
        if op["op"] in ("add", "replace"):
            return copy.deepcopy(op["value"])
        raise PatchError(f"{op['op']} on the whole document is not supported")
    if not path.startswith("/"):
        raise PatchError(f"path {path!r} does not start with '/'")
    tokens = [unescape_token(token) for token in path[1:].split("/")]
    parent = document
    for token in tokens[:-1]:
        parent = _child(parent, token, path)
    last = tokens[-1]
    kind = op["op"]
    if isinstance(parent, dict):
        if kind == "add":
            parent[last] = copy.deepcopy(op["value"])
        elif last not in parent:
            raise PatchError(f"{kind} {path}: member {last!r} does not exist")
        elif kind == "replace":
            parent[last] = copy.deepcopy(op["value"])
        elif kind == "remove":
            del parent[last]
        elif parent[last] != op["value"]:
            raise PatchError(f"test {path} failed")
    elif isinstance(parent, list):
        if kind == "add":
            position = len(parent) if last == "-" else _list_index(last, len(parent) + 1, path)
            parent.insert(position, copy.deepcopy(op["value"]))
        else:
            position = _list_index(last, len(parent), path)
            if kind == "replace":
                parent[position] = copy.deepcopy(op["value"])
            elif kind == "remove":
                del parent[position]
            elif parent[position] != op["value"]:
                raise PatchError(f"test {path} failed")
    else:
        raise PatchError(f"{kind} {path}: parent is neither an object nor an array")
    return document


def _child(node: Any, token: str, path: str) -> Any:
    if isinstance(node, dict):
        if token not in node:
            raise PatchError(f"path {path}: member {token!r} does not exist")
        return node[token]
    if isinstance(node, list):
        return node[_list_index(token, len(node), path)]
    raise PatchError(f"path {path}: cannot descend into a scalar at {token!r}")


def _list_index(token: str, size: int, path: str) -> int:
    if not token.isdigit() or (len(token) > 1 and token.startswith("0")):
        raise PatchError(f"path {path}: {token!r} is not an array index")
    position = int(token)
    if position >= size:
        raise PatchError(f"path {path}: index {position} out of range (size {size})")
    return position
