"""Strict validation of Kubernetes objects, offline, as ``kubectl apply --validate=strict``
would do it on the pinned cluster version.

- Custom resources (TFJob, ServingRuntime, InferenceService, Argo Workflow): the upstream
  CRDs pinned in ``k8s/install/upstream.lock.json`` (had through ``k8s.install.upstream_files``:
  ``$DISTML_CRD_DIR``, the cache or a download; a test skips when one cannot be had). The served
  version's ``openAPIV3Schema`` is made strict (``additionalProperties: false`` wherever
  an object lists its ``properties`` and does not say it keeps unknown fields) and checked
  with ``jsonschema.Draft202012Validator``; kind and group must be the CRD's.
- Core kinds: ``kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)``.
- Every object: ObjectMeta rules neither schema checks (name, label keys and values).

``validate(obj)`` returns a list of error strings (empty when valid). The CRD files are
loaded once per process (``functools.cache``): the big YAMLs take seconds. Objects of other
groups are validated without the CRD files (the lock names the CRDs' groups).
"""

from __future__ import annotations

import copy
import functools
import re
from typing import Any

import jsonschema
import kubernetes_validate
import yaml
from kubernetes_validate.utils import SchemaNotFoundError, ValidationError

from k8s.install import upstream_files
from k8s.install.versions import KUBERNETES_VERSION
from tests.support.upstream import have

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def _split_api_version(api_version: str) -> tuple[str, str]:
    """``"kubeflow.org/v1"`` -> ``("kubeflow.org", "v1")``; core ``"v1"`` -> ``("", "v1")``."""
    group, _, version = api_version.rpartition("/")
    return group, version


def _crd_pins() -> list[upstream_files.Pin]:
    return [pin for pin in upstream_files.pins() if pin.mirror == "crd"]


@functools.cache
def _load(pin: upstream_files.Pin) -> dict[str, Any]:
    path = have(pin)
    with path.open("rb") as f:
        doc = yaml.load(f, Loader=_Loader)
    if doc.get("kind") != "CustomResourceDefinition":
        raise ValueError(f"{path} is not a CustomResourceDefinition")
    key = (doc["spec"]["group"], doc["spec"]["names"]["kind"])
    if key != (pin.group, pin.kind):
        raise ValueError(f"{path} defines {key}, its pin says {(pin.group, pin.kind)}")
    return doc


def crd(group: str, kind: str) -> dict[str, Any]:
    """The pinned CRD of ``kind`` in ``group``; skips the test when it cannot be had."""
    return _load(next(p for p in _crd_pins() if (p.group, p.kind) == (group, kind)))


def crds() -> dict[tuple[str, str], dict[str, Any]]:
    """Every pinned CRD, by (group, kind); skips the test when one cannot be had."""
    return {(pin.group, pin.kind): _load(pin) for pin in _crd_pins()}


def crd_groups() -> set[str]:
    """The pinned CRDs' groups (from the lock: no file needed)."""
    return {pin.group for pin in _crd_pins()}


def strict_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A copy of an OpenAPI v3 schema that rejects unknown fields: wherever a node lists
    ``properties``, has no ``additionalProperties`` and does not set
    ``x-kubernetes-preserve-unknown-fields: true``, add ``additionalProperties: false``."""

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if (
                "properties" in node
                and "additionalProperties" not in node
                and not node.get("x-kubernetes-preserve-unknown-fields")
            ):
                node["additionalProperties"] = False
            for key, value in node.items():
                if key in ("properties", "patternProperties", "definitions", "$defs"):
                    for sub in value.values():
                        walk(sub)
                elif key in ("enum", "default", "example", "required"):
                    continue  # data, not schemas
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    out = copy.deepcopy(schema)
    walk(out)
    return out


@functools.cache
def _crd_validator(group: str, version: str, kind: str) -> jsonschema.Draft202012Validator:
    versions = crd(group, kind)["spec"]["versions"]
    for entry in versions:
        if entry["name"] == version and entry.get("served"):
            schema = strict_schema(entry["schema"]["openAPIV3Schema"])
            return jsonschema.Draft202012Validator(schema)
    served = [v["name"] for v in versions if v.get("served")]
    raise LookupError(f"{group}/{version} {kind}: version not served (served: {served})")


def _path(parts: Any) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts) or "."


def _metadata_errors(obj: dict[str, Any]) -> list[str]:
    """ObjectMeta rules the API server enforces and neither schema does."""
    errors: list[str] = []
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return ["metadata: missing"]
    name = meta.get("name")
    if not isinstance(name, str) or len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
        errors.append(f"metadata.name: {name!r} is not a DNS-1123 subdomain")
    for where, labels in _all_labels(obj):
        for key, value in labels.items():
            prefix, _, label_name = key.rpartition("/")
            if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
                errors.append(f"{where}: label key {key!r}: prefix is not a DNS-1123 subdomain")
            if len(label_name) > 63 or not _LABEL_NAME.match(label_name):
                errors.append(f"{where}: label key {key!r} is not a valid label name")
            if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.match(value):
                errors.append(f"{where}: label {key}={value!r}: not a valid label value")
    return errors


def _all_labels(node: Any, where: str = "") -> list[tuple[str, dict[str, Any]]]:
    """Every ``labels`` map under any ``metadata`` in the object (pod templates too)."""
    found: list[tuple[str, dict[str, Any]]] = []
    if isinstance(node, dict):
        for key, value in node.items():
            here = f"{where}.{key}"
            if key == "metadata" and isinstance(value, dict):
                labels = value.get("labels")
                if isinstance(labels, dict):
                    found.append((f"{here}.labels", labels))
            found += _all_labels(value, here)
    elif isinstance(node, list):
        for i, item in enumerate(node):
            found += _all_labels(item, f"{where}[{i}]")
    return found


def _crd_errors(obj: dict[str, Any], group: str, version: str) -> list[str]:
    kind = obj.get("kind")
    known = sorted(pin.kind for pin in _crd_pins() if pin.group == group)
    if kind not in known:
        return [f"kind: {kind!r} is not a kind of group {group} (known: {', '.join(known)})"]
    try:
        validator = _crd_validator(group, version, kind)
    except LookupError as e:
        return [f"apiVersion: {e}"]
    return [
        f"{_path(e.absolute_path)}: {e.message}"
        for e in sorted(validator.iter_errors(obj), key=lambda e: list(map(str, e.path)))
    ]


def _core_errors(obj: dict[str, Any]) -> list[str]:
    try:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    except SchemaNotFoundError as e:
        return [f"no Kubernetes {KUBERNETES_VERSION} schema: {e}"]
    except ValidationError as e:
        return [f"{_path(e.absolute_path)}: {e.message}"]
    return []


def validate(obj: dict[str, Any]) -> list[str]:
    """Errors in ``obj`` (empty when the API server would accept it in strict mode)."""
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str):
        return ["apiVersion and kind must both be strings"]
    group, version = _split_api_version(api_version)
    errors = _crd_errors(obj, group, version) if group in crd_groups() else _core_errors(obj)
    return errors + _metadata_errors(obj)
