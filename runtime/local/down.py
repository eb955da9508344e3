"""`invoke down` on the local runtime: stop the model server and any training workers
left running; with --purge also remove the work dir (only one distml made). Functions of
the ``LocalRuntime`` they tear down."""

from __future__ import annotations

import contextlib
import errno
import shutil
from typing import TYPE_CHECKING

from ml import contract
from runtime.local import serving
from runtime.procs import is_alive, stop_pid, stop_pids
from runtime.requests import DownRequest
from runtime.workdir import MARKER

if TYPE_CHECKING:
    from runtime.local import LocalRuntime

TRAIN_TAG = contract.step_mark("train")


def down(rt: LocalRuntime, request: DownRequest) -> int:
    state = rt.wd.state()
    server = state.server
    stopped = [p for p in state.train_pids if is_alive(p, TRAIN_TAG)]
    pid = server.pid if server else 0
    if (
        server
        and rt.ex.act(f"stop the model server (pid {pid})")
        and stop_pid(pid, serving.SERVER_TAG, started=server.started)
    ):
        rt.out(f"stopped the model server (pid {pid})")
    canary = state.canary_server  # left by a `deploy --canary` killed outright
    if (
        canary
        and rt.ex.act(f"stop the canary's model server (pid {canary.pid})")
        and stop_pid(canary.pid, serving.SERVER_TAG, started=canary.started)
    ):
        rt.out(f"stopped the canary's model server (pid {canary.pid})")
    if stopped and rt.ex.act(f"stop {len(stopped)} training worker(s): pids {stopped}"):
        rt.out(f"stopping {len(stopped)} leftover training worker(s)…")
        stop_pids(stopped, TRAIN_TAG)
    if rt.wd.exists() and not rt.ex.dry:
        with contextlib.suppress(OSError):  # a full disk: they are stopped all the same
            rt.wd.update_state(server=None, canary_server=None, train_pids=None)
    if request.purge:
        _purge(rt)
    if not (server or canary or stopped or request.purge):
        rt.out("nothing was running")
    return 0


def _remove_workdir(rt: LocalRuntime) -> None:
    """Remove the work dir; one that is a mount point (a disk of its own) cannot be
    removed, only emptied: its contents go and the directory stays."""
    root = rt.wd.root
    try:
        shutil.rmtree(root)
    except OSError as e:
        if e.errno != errno.EBUSY or not root.is_dir():
            raise
        for child in root.iterdir():  # what rmtree left: the marker, say
            shutil.rmtree(child) if child.is_dir() else child.unlink()
        rt.out(f"emptied {root} (a mount point: the directory itself stays)")
        return
    rt.out(f"removed {root}")


def _purge(rt: LocalRuntime) -> None:
    if rt.wd.exists():
        if rt.ex.act(f"remove {rt.wd.root}"):
            _remove_workdir(rt)
    elif rt.wd.root.exists():
        raise rt.error(
            f"{rt.wd.root} has no {MARKER} marker, so it was not made by distml; not deleting it"
        )
    else:
        rt.out(f"no work dir at {rt.wd.root}; nothing to remove")
