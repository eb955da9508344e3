"""The PVC from this machine: a short-lived loader pod mounts it, ``kubectl cp`` copies
files in (offline datasets) or out (training metrics); the pod is always deleted."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from common.poll import Done, Failed, Pending, poll
from k8s import manifests
from k8s.settings import Settings
from runtime.cluster.context import ClusterContext, ClusterError
from runtime.cluster.objects import delete_and_wait

LOADER_POD = manifests.LOADER_POD
POD_POLL_S = 2


class Volume:
    """Copies in and out of the deployment's volume ``s.volume``."""

    def __init__(self, cx: ClusterContext, s: Settings) -> None:
        self.cx, self.s = cx, s

    def copy_in(self, files: Sequence[Path], target: str, *, timeout: float) -> None:
        """Put local ``files`` into the directory ``target`` (a path in the pod)."""
        with self._loader(timeout) as k:
            self.cx.c.run(k(f"exec {LOADER_POD} -- mkdir -p {target}"))
            for path in files:
                src = shlex.quote(str(path))
                self.cx.c.run(k(f"cp {src} {LOADER_POD}:{target}/{path.name}"))

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
                self._wait_running(timeout)
            ns = shlex.quote(cx.namespace)
            yield lambda args: cx.provider.kubectl(f"-n {ns} {args}")
        finally:
            cx.kube.delete("v1", "Pod", LOADER_POD, cx.namespace)

    def _wait_running(self, timeout: float) -> None:
        cx = self.cx
        verdict = poll(
            lambda: cx.get("v1", "Pod", LOADER_POD),
            _judge_pod,
            timeout=timeout,
            interval=POD_POLL_S,
            clock=cx.clock,
        )
        if isinstance(verdict, Done):
            return
        phase = (
            f"{verdict.reason} (it will not run)"
            if isinstance(verdict, Failed)
            else f"{verdict.status} after {timeout:.0f} s"
        )
        events = cx.kube.events(cx.namespace, LOADER_POD)
        last = "; ".join(f"{e.get('reason')}: {e.get('message')}" for e in events[-5:])
        raise ClusterError(
            f"pod {LOADER_POD} is {phase}"
            + (f" (events: {last})" if last else "")
            + f"; check `kubectl --context {cx.provider.context} -n {cx.namespace} "
            f"describe pod {LOADER_POD}`"
        )


def _judge_pod(pod: dict[str, Any] | None) -> Done | Failed | Pending:
    """Running: done; Failed or Succeeded: it will not run; else its phase so far."""
    phase = ((pod or {}).get("status") or {}).get("phase")
    if phase == "Running":
        return Done()
    if phase in ("Failed", "Succeeded"):
        return Failed(phase)
    return Pending(phase or "not created")
