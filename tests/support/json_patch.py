"""A JSON Patch (RFC 6902) applied as the API server applies one (its json-patch library:
all ops or none; a ``test`` on a value that differs or a path that is missing, an ``add``
under a missing parent, a ``replace`` or ``remove`` of a missing member: the whole patch
is rejected, 422). Objects only (no arrays in paths): what k8s.manifests.guarded writes.
No jsonpatch library is installed here; this is the part distml relies on."""

from __future__ import annotations

import copy
from typing import Any

NOT_APPLIED = "the server rejected our request due to an error in our request"


class PatchRejected(Exception):
    """The patch was not applied (HTTP 422); ``why`` is the failing op's reason."""

    def __init__(self, why: str) -> None:
        super().__init__(NOT_APPLIED)
        self.why = why


def _keys(path: str) -> list[str]:
    if not path.startswith("/"):
        raise PatchRejected(f"path {path!r} is not a JSON Pointer")
    return [k.replace("~1", "/").replace("~0", "~") for k in path[1:].split("/")]


def _parent(doc: dict[str, Any], path: str) -> tuple[dict[str, Any], str]:
    *parents, last = _keys(path)
    node: Any = doc
    for key in parents:
        if not isinstance(node, dict) or key not in node:
            raise PatchRejected(f"doc is missing path: {path}")
        node = node[key]
    if not isinstance(node, dict):
        raise PatchRejected(f"doc is missing path: {path}")
    return node, last


def apply(doc: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """``doc`` with ``ops`` applied (a new object; ``doc`` is left as it was), or
    PatchRejected with nothing applied."""
    out = copy.deepcopy(doc)
    for op in ops:
        parent, key = _parent(out, op["path"])
        kind = op["op"]
        if kind == "test":
            if key not in parent or parent[key] != op["value"]:
                raise PatchRejected(f"testing value {op['path']} failed: test failed")
        elif kind == "add":
            parent[key] = copy.deepcopy(op["value"])
        elif kind in ("replace", "remove"):
            if key not in parent:
                raise PatchRejected(f"{kind} operation does not apply: doc is missing path")
            if kind == "replace":
                parent[key] = copy.deepcopy(op["value"])
            else:
                del parent[key]
        else:
            raise PatchRejected(f"unexpected op {kind!r}")
    return out
