"""Stopping a child and everything it started: the child runs in a process group of its own
(``start_new_session=True``), and the whole group is signalled, so no grandchild outlives
it. SIGTERM first, SIGKILL for what is left after a grace period. Where there are no
process groups (not POSIX), the child alone is killed. A leaf: it imports nothing of ours.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time


def signal_groups(pids: list[int], sig: int) -> None:
    """Send ``sig`` to the process groups led by ``pids``; a group already gone is fine."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, sig)


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL what is left of ``proc``'s group: its leader may have exited, its children
    not. Not on POSIX: kill ``proc`` if it still runs."""
    if os.name == "posix":
        signal_groups([proc.pid], signal.SIGKILL)
    elif proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            proc.kill()


def stop_group(proc: subprocess.Popen, grace: float = 10.0) -> None:
    """SIGTERM the process group of ``proc``, then SIGKILL what is left after ``grace``
    seconds; reap it."""
    stop_groups([proc], grace)


def stop_groups(procs: list[subprocess.Popen], grace: float = 5.0) -> None:
    """SIGTERM the process groups of all ``procs`` at once, wait for them on one shared
    deadline of ``grace`` seconds, then SIGKILL every group that is left; reap them. The
    SIGKILL comes also when the wait is interrupted (a second Ctrl-C during the grace)."""
    try:
        running = [proc for proc in procs if proc.poll() is None]
        if os.name == "posix":
            signal_groups([proc.pid for proc in running], signal.SIGTERM)
        else:
            for proc in running:
                kill_group(proc)
        deadline = time.monotonic() + grace
        for proc in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    finally:
        # Children of a group may outlive its leader: kill every group.
        for proc in procs:
            kill_group(proc)
        for proc in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=grace)
