"""``invoke --dry``'s ``Kube``: prints each object it would apply or delete, touches nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from k8s.client.kube import KubeError, Objects, describe, meta_of


class DryKube:
    """``invoke --dry``: prints what it would apply or delete; touches nothing."""

    def __init__(self, out: Callable[[str], Any] = print) -> None:
        self.out = out

    def server(self) -> str:
        return ""

    def ca(self) -> str:
        return ""

    def apply(
        self, obj: dict[str, Any], *, dry_run: bool = False, force: bool = True
    ) -> dict[str, Any]:
        """Print ``would apply Kind ns/name`` and the object as YAML; return it unchanged.

        A ``dry_run`` apply (a readiness probe, e.g. for a webhook) prints nothing: the
        object it probes with is printed when it is really applied.
        """
        import yaml

        if dry_run:
            return obj
        _, kind, name, namespace = meta_of(obj)
        self.out(f"would apply {describe(kind, name, namespace)}")
        self.out(yaml.safe_dump(obj, sort_keys=False).rstrip("\n"))
        return obj

    def get(
        self, api_version: str, kind: str, name: str, namespace: str | None = None
    ) -> dict[str, Any] | None:
        return None

    def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        label_selector: str | None = None,
    ) -> Objects:
        return []

    def delete(
        self,
        api_version: str,
        kind: str,
        name: str,
        namespace: str | None = None,
        *,
        uid: str | None = None,
    ) -> bool:
        self.out(f"would delete {describe(kind, name, namespace)}")
        return False

    def create(self, obj: dict[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
        """Nothing is sent under --dry: a review gets no answer (no ``status``)."""
        return obj

    def served(self, api_version: str, kind: str) -> bool:
        return False  # nothing is asked under --dry

    def logs(
        self,
        pod: str,
        namespace: str,
        container: str | None = None,
        tail: int = 40,
        *,
        previous: bool = False,
    ) -> str:
        return ""

    def events(self, namespace: str, name: str | None = None) -> Objects:
        return []

    def proxy_get(
        self, namespace: str, service: str, port: int, path: str, params: dict[str, str]
    ) -> bytes:
        """Nothing is sent under --dry: a reader says it did not read."""
        raise KubeError(f"--dry: GET {path} on Service {namespace}/{service}:{port} not sent")
