"""A write that happens only if the object is this work dir's, in one request: a JSON
Patch (RFC 6902) whose first ops ``test`` the labels that say whose the object is.

The API server reads the stored object, applies the whole patch to it and stores the
result as one update (retried on a conflict against the newer object, so the tests hold
for the object actually written); a failed ``test``, or a path missing, rejects the whole
patch with 422 Invalid, whose message says only "the server rejected our request due to
an error in our request" (k8s.io/apiserver endpoints/handlers/patch.go, jsonPatcher
applyJSPatch: NewGenericServerResponse(422, ...)). The Workflow's serving steps use it
(k8s.manifests.argo_workflow), where a check at submit time would be hours old.
"""

from __future__ import annotations

from typing import Any

from k8s.manifests.names import COMMON_LABELS, INSTANCE_LABEL

# What the API server answers a JSON patch it did not apply (a failed test among them),
# as kubectl prints it.
NOT_APPLIED = "the server rejected our request due to an error in our request"
# The kinds whose plural is the kind, lower-cased, with an "s" (kubectl_resource).
PLURAL_IS_KIND_S = frozenset({"InferenceService", "ServingRuntime", "Service"})


def pointer(*keys: str) -> str:
    """A JSON Pointer (RFC 6901) to ``keys``: ``~`` and ``/`` in a key escaped."""
    return "".join("/" + k.replace("~", "~0").replace("/", "~1") for k in keys)


def guarded_patch(obj: dict[str, Any], instance: str | None) -> list[dict[str, Any]]:
    """A JSON Patch writing ``obj`` over the object of its name only if that one is this
    work dir's: ``test`` ops first, on the labels every distml object carries and, when
    ``instance`` is given, on this work dir's instance label (``names.is_ours``); then
    each of ``obj``'s labels (others' labels stay), its annotations (the whole map: one
    distml no longer sets goes) and its spec. All of it applies, or none."""
    meta = obj["metadata"]
    mine = {INSTANCE_LABEL: instance} if instance else {}
    ops: list[dict[str, Any]] = [
        {"op": "test", "path": pointer("metadata", "labels", k), "value": v}
        for k, v in {**COMMON_LABELS, **mine}.items()
    ]
    ops += [
        {"op": "add", "path": pointer("metadata", "labels", k), "value": v}
        for k, v in {**(meta.get("labels") or {}), **mine}.items()
    ]
    if meta.get("annotations"):
        ops.append({"op": "add", "path": "/metadata/annotations", "value": meta["annotations"]})
    ops.append({"op": "replace", "path": "/spec", "value": obj["spec"]})
    return ops


def kubectl_resource(obj: dict[str, Any]) -> str:
    """``obj``'s resource as ``kubectl patch`` names it: ``<plural>.<version>.<group>``
    (no other group's resource of that plural can be meant), ``services`` for the core
    Service (kubectl's RESTMapper ranks the core group first: Knative's ``services`` is
    not meant). The plural is the kind lower-cased with an ``s``: true of the kinds the
    Workflow writes so (InferenceService, ServingRuntime, Service); another is refused."""
    if obj["kind"] not in PLURAL_IS_KIND_S:
        raise ValueError(f"no known plural for kind {obj['kind']!r}: add it with care")
    plural = f"{obj['kind'].lower()}s"
    group, _, version = obj["apiVersion"].rpartition("/")
    return f"{plural}.{version}.{group}" if group else plural
