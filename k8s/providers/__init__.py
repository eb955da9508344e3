"""Where the cluster lives: a provider by name (``provider``), the lab's k3d, kind and
minikube (``lab``), a cluster distml did not create (``existing``), what they share
(``base``), which StorageClass the volume gets (``storage``) and what a deployment is
(``settings``)."""

from __future__ import annotations

from typing import Any

from k8s.providers.base import Provider
from k8s.providers.existing import Existing
from k8s.providers.lab import K3d, Kind, Minikube
from k8s.providers.settings import EXISTING

PROVIDERS: dict[str, type[Provider]] = {"k3d": K3d, "kind": Kind, "minikube": Minikube}


def provider(name: str, **kwargs: Any) -> Provider:
    """The provider ``name``; ``existing`` takes ``kube_context``."""
    kinds: dict[str, type[Provider]] = {**PROVIDERS, EXISTING: Existing}
    if name not in kinds:
        valid = ", ".join(kinds)
        raise ValueError(f"unknown cluster provider {name!r}; valid: {valid}")
    if name != EXISTING:
        kwargs.pop("kube_context", None)
    return kinds[name](name=name, **kwargs)
