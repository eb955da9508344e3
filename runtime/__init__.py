"""Runtimes: where the pod contract runs: local processes, a k3d/kind/minikube cluster
distml makes, or an existing cluster (a kubeconfig context).

Nothing here imports TensorFlow or ``ml`` at import time: ``invoke --list`` stays fast.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable

from common.errors import DistmlError
from k8s.providers.settings import CLUSTER_RUNTIMES

RUNTIMES = ("auto", "local", *CLUSTER_RUNTIMES)
# A switch kept for forks that want to ship without the cluster path: when False, ``auto``
# never picks a cluster and asking for one is refused with a clear message.
CLUSTER_RUNTIMES_READY = True


def docker_answers(docker: str = "docker", timeout: float = 5.0) -> bool:
    """True when a Docker daemon answers ``docker info`` within ``timeout`` seconds."""
    try:
        result = subprocess.run([docker, "info"], capture_output=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return result.returncode == 0


def select_runtime(
    requested: str,
    *,
    which: Callable[[str], str | None] = shutil.which,
    docker_ok: Callable[[], bool] = docker_answers,
    cluster_ready: bool | None = None,
) -> tuple[str, str]:
    """Return ``(runtime, reason)`` for a requested runtime name.

    ``auto`` picks k3d when a Docker daemon answers and ``k3d`` is on PATH, else ``local``.
    """
    ready = CLUSTER_RUNTIMES_READY if cluster_ready is None else cluster_ready
    if requested not in RUNTIMES:
        raise DistmlError(f"unknown runtime {requested!r}; valid: {', '.join(RUNTIMES)}")
    if requested in CLUSTER_RUNTIMES:
        if not ready:
            raise DistmlError(
                f"the {requested} runtime is not available in this version of distml yet; "
                "use --runtime local (the default when no cluster is available)"
            )
        return requested, f"--runtime {requested} was asked for"
    if requested == "local":
        return "local", "--runtime local was asked for"
    if not ready:
        return "local", "the cluster runtimes are not in this version yet"
    if which("k3d") is None:
        return "local", "k3d is not on PATH"
    if not docker_ok():
        return "local", "no Docker daemon answers (docker info failed)"
    return "k3d", "a Docker daemon answers and k3d is on PATH"
