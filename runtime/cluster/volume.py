"""The PVC from this machine: a short-lived loader pod mounts it, ``kubectl cp`` copies
files in (offline datasets) or out (training metrics); the pod is always deleted, and
waited for until it is gone."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from k8s import manifests
from k8s.providers.settings import Settings
from runtime.cluster.apply import delete_and_wait, wait_pod
from runtime.cluster.context import ClusterContext

LOADER_POD = manifests.LOADER_POD


class Volume:
    """Copies in and out of the deployment's volume ``s.volume``."""

    def __init__(self, cx: ClusterContext, s: Settings) -> None:
        self.cx, self.s = cx, s

    def copy_in(
        self, files: Sequence[Path], target: str, *, timeout: float, replace: bool = False
    ) -> None:
        """Put local ``files`` (or folders) into the directory ``target`` (a path in the pod);
        ``replace``: what ``target`` holds under each one's name is removed first (``kubectl
        cp`` copies a folder into a folder already there, not over it)."""
        with self._loader(timeout) as k:
            self.cx.c.run(k(f"exec {LOADER_POD} -- mkdir -p {target}"))
            for path in files:
                src, dest = shlex.quote(str(path)), shlex.quote(f"{target}/{path.name}")
                if replace:
                    self.cx.c.run(k(f"exec {LOADER_POD} -- rm -rf {dest}"))
                self.cx.c.run(k(f"cp {src} {LOADER_POD}:{dest}"))

    def copy_out(self, files: Sequence[tuple[str, Path]], *, timeout: float) -> None:
        """Copy each (path in the pod, local path) pair here, making local folders."""
        with self._loader(timeout) as k:
            for remote, local in files:
                local.parent.mkdir(parents=True, exist_ok=True)
                self.cx.c.run(k(f"cp {LOADER_POD}:{remote} {shlex.quote(str(local))}"), hide=True)

    @contextmanager
    def _loader(self, timeout: float) -> Iterator[Callable[[str], str]]:
        """The loader pod, running; yields ``kubectl -n <ns> ...`` for commands against it."""
        cx = self.cx
        delete_and_wait(cx, "v1", "Pod", LOADER_POD)
        try:
            cx.apply(manifests.loader_pod(self.s))
            if not cx.dry:
                wait_pod(cx, LOADER_POD, timeout=timeout)
            ns = shlex.quote(cx.namespace)
            yield lambda args: cx.provider.kubectl(f"-n {ns} {args}")
        finally:  # gone before the task ends: a later `down` must not find it half-deleted
            delete_and_wait(cx, "v1", "Pod", LOADER_POD, timeout=timeout)
