"""`invoke tensorboard` on the local runtime: TensorBoard as a process on 127.0.0.1 over
``<workdir>/volume/tensorboard``, in the foreground until Ctrl-C; its process group is
stopped on the way out, whatever ends the task."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from common.process_group import stop_group
from ml import contract
from runtime import tensorboard as tb
from runtime.procs import port_is_free, tail
from runtime.requests import TensorboardRequest

if TYPE_CHECKING:
    from runtime.local import LocalRuntime

LOG = "tensorboard.log"


def tensorboard(rt: LocalRuntime, request: TensorboardRequest) -> int:
    cmd = contract.tensorboard(rt.wd.volume, host=tb.HOST, port=request.port, python=rt.python)
    log = rt.wd.logs / LOG
    if not rt.ex.dry and not contract.has_event_files(rt.wd.volume):
        raise tb.nothing_to_show(contract.tensorboard_root(rt.wd.volume))
    if not rt.ex.dry and not port_is_free(request.port, tb.HOST):
        raise tb.port_in_use(request.port)
    started: list[subprocess.Popen] = []

    def start() -> str:
        proc = rt.ex.background("TensorBoard", cmd, log)
        if proc is not None:  # None: a dry run, which printed the command
            started.append(proc)
            tb.wait_answering(tb.url(request.port), lambda: _ended(proc, log))
        return tb.url(request.port)

    def block() -> int:
        started[0].wait()  # until Ctrl-C, or TensorBoard ends by itself: an error
        raise rt.error(str(_ended(started[0], log)))

    def stop() -> str:
        if rt.ex.dry:
            return "would then stop TensorBoard (its process group)"
        for proc in started:
            stop_group(proc, grace=5.0)
        return f"TensorBoard stopped (log: {log})" if started else "TensorBoard was not started"

    return tb.serve(rt.out, start=start, block=block, stop=stop, dry=rt.ex.dry)


def _ended(proc: subprocess.Popen, log: Path) -> str | None:
    """Why TensorBoard is not running (its exit code and log tail), or None while it runs."""
    if proc.poll() is None:
        return None
    return f"TensorBoard exited with code {proc.returncode}; last lines of {log}:\n{tail(log, 15)}"
