"""What the tests of the manifest builders share (tests/k8s/test_manifests*.py,
tests/k8s/manifests/): the image tag and settings they build with, every object of the
lifecycle, and the pod specs and containers inside an object."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from k8s import manifests as m
from k8s.providers.settings import Settings
from ml.contract import MODEL_TYPES

IMAGE = "distml:0123456789ab"


def settings(**overrides: Any) -> Settings:
    return Settings(image=IMAGE, **overrides)


def all_objects(s: Settings, **kwargs: Any) -> list[dict[str, Any]]:
    kwargs.setdefault("models", MODEL_TYPES)
    return [obj for _, obj in m.cluster_objects(s, **kwargs)]


def by_kind(objs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == kind]


def one(objs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (obj,) = by_kind(objs, kind)
    return obj


def pod_specs(obj: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every pod spec in an object (Pod, Job/Deployment templates, TFJob replicas)."""
    kind, spec = obj["kind"], obj.get("spec", {})
    if kind == "Pod":
        yield spec
    elif kind in ("Job", "Deployment"):
        yield spec["template"]["spec"]
    elif kind == "TFJob":
        for replica in spec["tfReplicaSpecs"].values():
            yield replica["template"]["spec"]


def containers(obj: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every container an object will run (ServingRuntime and ISVC model included)."""
    for spec in pod_specs(obj):
        yield from spec.get("containers", [])
    if obj["kind"] == "ServingRuntime":
        yield from obj["spec"]["containers"]


def _worker(obj: dict[str, Any]) -> dict[str, Any]:
    return obj["spec"]["tfReplicaSpecs"]["Worker"]
