"""Live progress: training jobs redrawn in place on a terminal (local runtime), and a
line per changed row with the seconds since the start (cluster jobs and workflow steps)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO


def job_line(job: Any, workers_total: int | None = None) -> str:
    """``cnn  running  2/2 workers  epoch 2/3  step 40/70  loss 0.512  (1 restart)``."""
    total = workers_total if workers_total is not None else len(job.workers)
    parts = [f"{job.name:<14}", f"{job.state:<9}"]
    if job.state == "running":
        parts.append(f"{job.running_workers()}/{total} workers")
        p = job.progress
        if "epoch" in p and "epochs" in p:
            epoch = p["epoch"] + 1 if p.get("event") == "step" else p["epoch"]
            parts.append(f"epoch {epoch}/{p['epochs']}")
        if "step" in p and "steps" in p:
            parts.append(f"step {p['step']}/{p['steps']}")
        if "loss" in p:
            parts.append(f"loss {p['loss']:.3f}")
    if job.preemptions:
        parts.append(f"(stopped and resumed {job.preemptions}x)")
    if job.restarts:
        parts.append(f"({job.restarts} restart{'s' if job.restarts > 1 else ''}: {job.failure})")
    elif job.state == "failed":
        parts.append(job.failure)
    return "  ".join(parts)


class JobDisplay:
    """On a TTY: redraws a block of lines. Otherwise: prints a job's line when it changes,
    at most every ``interval`` seconds per job (state changes always print)."""

    def __init__(
        self,
        out: Callable[[str], None] = print,
        stream: TextIO | None = None,
        interval: float = 5.0,
    ) -> None:
        self.out = out
        self.stream = stream or sys.stdout
        self.tty = self.stream.isatty()
        self.interval = interval
        self._drawn = 0
        self._last: dict[str, tuple[str, float, str]] = {}
        self._t0 = time.monotonic()

    def update(self, jobs: Sequence[Any]) -> None:
        elapsed = f"[{time.monotonic() - self._t0:5.0f}s]"
        lines = [f"{elapsed} {job_line(job)}" for job in jobs]
        if self.tty:
            if self._drawn:
                self.stream.write(f"\x1b[{self._drawn}F")
            for line in lines:
                self.stream.write("\x1b[2K" + line + "\n")
            self.stream.flush()
            self._drawn = len(lines)
            return
        now = time.monotonic()
        for job, line in zip(jobs, lines, strict=True):
            text = job_line(job)
            prev = self._last.get(job.name)
            if prev and prev[0] == text:
                continue
            if prev and prev[2] == job.state and now - prev[1] < self.interval:
                continue
            self._last[job.name] = (text, now, job.state)
            self.out(line)

    def close(self) -> None:
        self._drawn = 0


@dataclass
class ChangedRows:
    """Prints ``[  12s] <describe(row)>`` for each row (keyed by its ``name``) that differs
    from the last one shown; ``clock`` has ``monotonic()``."""

    out: Callable[[str], Any]
    clock: Any
    describe: Callable[[Any], str]
    started: float = field(default=0.0)
    shown: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.started = self.clock.monotonic()

    def elapsed(self) -> float:
        return self.clock.monotonic() - self.started

    def __call__(self, rows: Sequence[Any]) -> None:
        elapsed = self.elapsed()
        for row in rows:
            if self.shown.get(row.name) != row:
                self.shown[row.name] = row
                self.out(f"[{elapsed:6.0f}s] {self.describe(row)}")
