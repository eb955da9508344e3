"""Locust as a child process: started headless in a process group of its own, watched with
a progress line every few seconds, stopped (the whole group) on timeout or Ctrl-C.

gevent must never share a process with TensorFlow/kserve or with the caller, so Locust is
never imported here: it runs as ``python -m locust`` (``loadtest.plan.Plan.command``).
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common.poll import Done, Pending, Verdict, poll
from common.process_group import kill_group, stop_group
from loadtest.plan import Plan
from loadtest.replica_watch import ReplicaWatcher
from loadtest.summary import LOG_FILE, history, num

PROGRESS_EVERY_S = 5.0
STOP_GRACE_S = 5.0


def tail(path: Path, lines: int = 20) -> str:
    """The last ``lines`` lines of Locust's log, or ``(no log)``."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _progress_line(
    out_dir: Path, elapsed: float, seconds: int, prev: tuple[float, float] | None, replicas: str
) -> tuple[str, tuple[float, float] | None]:
    rows = history(out_dir)
    if not rows:
        return f"loadtest: {elapsed:5.0f}s/{seconds}s  starting Locust...", prev
    last = rows[-1]
    ts = num(last.get("Timestamp")) or 0.0
    count = num(last.get("Total Request Count")) or 0.0
    failures = int(num(last.get("Total Failure Count")) or 0)
    base = prev or (num(rows[0].get("Timestamp")) or ts, num(rows[0].get("Total Request Count")))
    dt = ts - base[0]
    rps = (count - (base[1] or 0.0)) / dt if dt > 0 else 0.0
    users = int(num(last.get("User Count")) or 0)
    line = (
        f"loadtest: {elapsed:5.0f}s/{seconds}s  users {users}  requests {int(count)}  "
        f"failures {failures}  rps {rps:.1f}{replicas}"
    )
    return line, (ts, count)


def run_locust(
    plan: Plan,
    watcher: ReplicaWatcher | None,
    log: Callable[[str], Any],
    timeout_margin_s: float,
    settle_s: float,
) -> tuple[int, float]:
    """Locust's exit code and run time (s); with ``settle_s``, the replicas watched after the
    load. Locust's whole process group is stopped on any exception, then re-raised."""
    with open(plan.out / LOG_FILE, "wb") as log_file:
        if watcher:
            watcher.start()
        mono0 = time.monotonic()
        proc: subprocess.Popen | None = None
        try:
            proc = subprocess.Popen(
                plan.command(),
                cwd=plan.out,  # not the caller's cwd: nothing there may shadow Locust's imports
                env=plan.env(),
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=os.name == "posix",
                creationflags=getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0),
            )
            rc = _wait_for_locust(proc, plan, mono0, watcher, log, timeout_margin_s)
            elapsed = time.monotonic() - mono0
            if watcher and settle_s > 0 and rc == 0 and not watcher.wait_for_scale_out(0):
                log(
                    f"loadtest: load done; watching ready replicas up to {settle_s:.0f} s more "
                    "(pods the autoscaler asked for may still be starting)"
                )
                watcher.wait_for_scale_out(settle_s)
        except BaseException:
            if proc is not None:
                stop_group(proc, grace=STOP_GRACE_S)
            raise
        finally:
            if watcher:
                watcher.stop()
        kill_group(proc)  # what Locust's group left behind
    return rc, elapsed


class _Progress:
    """Judges Locust's exit code: Done(code), else a progress line every PROGRESS_EVERY_S."""

    def __init__(self, plan: Plan, mono0: float, deadline: float, watcher: Any) -> None:
        self.plan, self.mono0, self.deadline, self.watcher = plan, mono0, deadline, watcher
        self.next = mono0 + PROGRESS_EVERY_S
        self.line = ""
        self.prev: tuple[float, float] | None = None

    def __call__(self, rc: int | None) -> Verdict:
        if rc is not None:
            return Done(rc)
        now = time.monotonic()
        if self.next <= now < self.deadline:
            self.next += PROGRESS_EVERY_S
            samples = self.watcher.samples if self.watcher else []
            replicas = f"  ready replicas {samples[-1]['ready']}" if samples else ""
            self.line, self.prev = _progress_line(
                self.plan.out, now - self.mono0, self.plan.seconds, self.prev, replicas
            )
        return Pending(self.line)


def _wait_for_locust(
    proc: subprocess.Popen,
    plan: Plan,
    mono0: float,
    watcher: ReplicaWatcher | None,
    log: Callable[[str], Any],
    timeout_margin_s: float,
) -> int:
    """Locust's exit code; TimeoutError when it runs past its run time + the margin."""
    deadline = mono0 + plan.seconds + timeout_margin_s
    verdict = poll(
        proc.poll,
        _Progress(plan, mono0, deadline, watcher),
        timeout=max(0.0, deadline - time.monotonic()),
        interval=0.2,
        on_change=log,
    )
    if isinstance(verdict, Done):
        return verdict.value
    raise TimeoutError(
        f"Locust still running {time.monotonic() - mono0:.0f}s after start "
        f"(run time {plan.seconds}s + margin {timeout_margin_s:g}s); stopped it. "
        f"Log: {plan.out / LOG_FILE}"
    )
