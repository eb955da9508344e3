"""`invoke tensorboard` on a cluster: TensorBoard from the project image as a pod that
mounts the PVC read-only, reached through ``kubectl port-forward`` on 127.0.0.1 until
Ctrl-C; the port-forward is stopped and the pod deleted on the way out, whatever ends it."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from typing import Any

from invoke import Result

from k8s import manifests
from ml import contract
from runtime import tensorboard as tb
from runtime.cluster.apply import delete_and_wait, wait_pod
from runtime.cluster.context import ClusterContext, ClusterError
from runtime.requests import TensorboardRequest

POD = manifests.TENSORBOARD_POD
POD_READY_TIMEOUT_S = 300.0  # the image is on the node (`up`); TensorBoard starts in ~10 s


class PortForward:
    """A ``kubectl port-forward`` started with ``c.run(asynchronous=True)``."""

    def __init__(self, promise: Any) -> None:
        self.promise = promise
        self.result: Result | None = None

    def ended(self) -> str | None:
        """Why it is not forwarding (it exited), or None while it runs."""
        if self.result is None and not self.promise.runner.process_is_finished:
            return None
        result = self.wait()
        return f"kubectl port-forward exited with code {result.exited}: {result.stderr.strip()}"

    def wait(self) -> Result:
        """Until it exits (Ctrl-C reaches it too: kubectl then exits 0)."""
        if self.result is None:
            self.result = self.promise.join()
        return self.result

    def stop(self) -> None:
        if self.result is None:
            if not self.promise.runner.process_is_finished:
                self.promise.runner.kill()
            self.wait()


def tensorboard(
    cx: ClusterContext, request: TensorboardRequest, port_free: Callable[[int], bool]
) -> int:
    state = cx.require_up()
    s = cx.settings()
    cx.check_image(state, s)
    if not cx.dry and not port_free(request.port):
        raise tb.port_in_use(request.port)
    ns = shlex.quote(cx.namespace)
    check = cx.provider.kubectl(
        f"-n {ns} exec {POD} -- {shlex.join(contract.has_event_files_check(s.mount_path))}"
    )
    forward = cx.provider.kubectl(
        f"-n {ns} port-forward --address {tb.HOST} pod/{POD} "
        f"{request.port}:{contract.TENSORBOARD_PORT}"
    )
    forwards: list[PortForward] = []

    def start() -> str:
        delete_and_wait(cx, "v1", "Pod", POD)  # one left by a task that was killed
        cx.apply(manifests.tensorboard_pod(s))
        if not cx.dry:
            wait_pod(cx, POD, timeout=POD_READY_TIMEOUT_S, ready=True)
            cx.out(f"pod {POD}: Ready")
        _check_runs(cx, check, f"{contract.tensorboard_root(s.mount_path)} in PVC {s.volume}")
        forwards.append(PortForward(cx.c.run(forward, asynchronous=True, hide=True, warn=True)))
        if not cx.dry:
            tb.wait_answering(tb.url(request.port), forwards[0].ended, clock=cx.clock)
        return tb.url(request.port)

    def block() -> int:
        result = forwards[0].wait()
        if result.exited == 0:
            return 0  # Ctrl-C reached kubectl (same terminal) before it reached us
        raise ClusterError(f"{forwards[0].ended()}; the pod was deleted, run the task again")

    def stop() -> str:
        if cx.dry:  # the port-forward was only printed
            cx.out("on Ctrl-C it would stop the port-forward and delete the pod:")
        else:
            for pf in forwards:
                pf.stop()
        cx.delete_ours("v1", "Pod", POD)
        return "" if cx.dry else f"TensorBoard stopped: port-forward ended, pod {POD} deleted"

    return tb.serve(cx.out, start=start, block=block, stop=stop, dry=cx.dry)


def _check_runs(cx: ClusterContext, check: str, where: str) -> None:
    """Refuse to show an empty TensorBoard: no training run wrote event files yet."""
    found = cx.c.run(check, hide=True, warn=True)
    if found.exited == contract.NO_EVENT_FILES_EXIT:
        raise tb.nothing_to_show(where)
    if found.exited:
        raise ClusterError(
            f"could not look for TensorBoard event files in pod {POD} (exit {found.exited}): "
            f"{found.stderr.strip()}"
        )
