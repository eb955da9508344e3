"""Training jobs on the local runtime: N worker processes per job, as a TFJob's pods.

Each worker gets the TF_CONFIG the training operator would give it (distinct 127.0.0.1
ports instead of pod DNS names), its own log file and a thread budget sized to the cores
it shares. When one worker of a job dies, the others would block in their collectives,
so the whole job is stopped and restarted together (up to ``max_restarts`` times); the
restarted workers resume from BackupAndRestore state on the volume.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from common.process_group import stop_groups
from ml import contract
from ml.contract.training_metrics import ADDRESS_ENV, JOB_ENV
from runtime.procs import free_ports, tail

STOP_GRACE_S = 5.0  # SIGTERM, then SIGKILL for what is left: one deadline for all workers


def tf_config(ports: Sequence[int], index: int, host: str = "127.0.0.1") -> str:
    """The TF_CONFIG of worker ``index`` in a job whose workers listen on ``ports``."""
    return json.dumps(
        {
            "cluster": {"worker": [f"{host}:{p}" for p in ports]},
            "task": {"type": "worker", "index": index},
        }
    )


def threads_per_worker(concurrent_workers: int, cores: int | None = None) -> int:
    """Cores divided among the worker processes that run at once (at least 1)."""
    cores = cores or os.cpu_count() or 1
    return max(1, cores // max(1, concurrent_workers))


@dataclass
class Worker:
    index: int
    port: int
    proc: subprocess.Popen
    log_path: Path
    reader: threading.Thread
    metrics_port: int = 0  # where it serves /metrics on 127.0.0.1 (ml/training/train_metrics.py)

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"


@dataclass
class Job:
    """One job (one model variant) and what is known about it."""

    name: str
    command: list[str]
    state: str = "pending"  # pending | running | succeeded | failed
    attempt: int = 0  # 1 on the first start; restarts = attempt - 1
    workers: list[Worker] = field(default_factory=list)
    progress: dict[str, Any] = field(default_factory=dict)
    resumed_from: tuple[int, int] | None = None  # (epoch, step) of a restored backup
    preemptions: int = 0  # restarts after a save on SIGTERM: not counted as failures
    failure: str = ""
    failed_log: Path | None = None
    started: float = 0.0
    finished: float = 0.0

    @property
    def restarts(self) -> int:
        """Restarts after a failure (what --max-restarts bounds)."""
        return max(0, self.attempt - 1 - self.preemptions)

    def running_workers(self) -> int:
        return sum(1 for w in self.workers if w.proc.poll() is None)


class JobRunner:
    """Runs jobs with a parallelism limit, a restart policy and one deadline."""

    def __init__(
        self,
        jobs: Sequence[Job],
        *,
        workers: int,
        parallel: int,
        max_restarts: int,
        log_dir: Path,
        env: dict[str, str] | None = None,
        deadline_s: float = 6 * 3600,
        on_change: Callable[[Sequence[Job]], None] | None = None,
        on_pids: Callable[[list[int]], object] | None = None,  # its return is ignored
        # (job, worker index, /metrics URL) of every running worker, whenever they change
        on_metrics: Callable[[list[tuple[str, int, str]]], object] | None = None,
        cores: int | None = None,
        log: Callable[[str], None] = print,
    ) -> None:
        if workers < 1 or parallel < 1 or max_restarts < 0:
            raise ValueError("workers and parallel must be >= 1, max_restarts >= 0")
        self.jobs = list(jobs)
        self.num_workers = workers
        self.parallel = parallel
        self.max_restarts = max_restarts
        self.log_dir = log_dir
        self.env = dict(os.environ if env is None else env)
        self.deadline_s = deadline_s
        self.on_change = on_change or (lambda jobs: None)
        self.on_pids = on_pids or (lambda pids: None)
        self.on_metrics = on_metrics or (lambda urls: None)
        self.log = log
        concurrent = min(parallel, len(self.jobs)) * workers
        self.threads = threads_per_worker(concurrent, cores)
        self._wake = threading.Event()

    # ------------------------------------------------------------------ process control
    def _start(self, job: Job) -> None:
        job.attempt += 1
        job.state = "running"
        job.started = job.started or time.monotonic()
        job.workers = []
        ports = free_ports(2 * self.num_workers)  # one call: every port distinct
        ports, metric_ports = ports[: self.num_workers], ports[self.num_workers :]
        for index, port in enumerate(ports):
            log_path = self.log_dir / job.name / f"worker-{index}.log"
            log_path.parent.mkdir(parents=True, exist_ok=True)
            log = log_path.open("a")
            log.write(f"\n===== attempt {job.attempt}, worker {index}, port {port} =====\n")
            log.flush()
            env = dict(self.env)
            env.update(
                TF_CONFIG=tf_config(ports, index),
                TF_NUM_INTRAOP_THREADS=str(self.threads),
                TF_NUM_INTEROP_THREADS=str(self.threads),
                PYTHONUNBUFFERED="1",
                **{ADDRESS_ENV: f"127.0.0.1:{metric_ports[index]}", JOB_ENV: job.name},
            )
            proc = subprocess.Popen(
                job.command,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                text=True,
                errors="replace",
                start_new_session=True,  # Ctrl-C is handled here, for every worker at once
            )
            reader = threading.Thread(
                target=self._read, args=(job, index, proc.stdout, log), daemon=True
            )
            reader.start()
            job.workers.append(Worker(index, port, proc, log_path, reader, metric_ports[index]))
        self._report_pids()

    def _read(self, job: Job, index: int, stream: TextIO, log: TextIO) -> None:
        with log:
            for line in stream:
                log.write(line)
                log.flush()
                if index == 0 and line.startswith(contract.PROGRESS_PREFIX):
                    try:
                        event = json.loads(line[len(contract.PROGRESS_PREFIX) :])
                    except ValueError:
                        continue
                    if event.get("event") == "resumed":
                        job.resumed_from = (event.get("epoch", 0), event.get("step", 0))
                    job.progress.update(event)
                    self._wake.set()
        self._wake.set()

    def _stop_workers(self, jobs: Sequence[Job]) -> None:
        """Every worker of ``jobs`` at once, on one deadline (multi-worker TF saves its
        state on SIGTERM and exits within it)."""
        workers = [w for job in jobs for w in job.workers]
        stop_groups([w.proc for w in workers], grace=STOP_GRACE_S)
        for w in workers:
            w.reader.join(timeout=STOP_GRACE_S)
        self._report_pids()

    def _report_pids(self) -> None:
        running = [(j, w) for j in self.jobs for w in j.workers if w.proc.poll() is None]
        self.on_pids([w.proc.pid for _, w in running])
        self.on_metrics([(j.name, w.index, w.metrics_url) for j, w in running])

    # ------------------------------------------------------------------ policy
    def _check(self, job: Job) -> bool:
        """Advance ``job``'s state from its workers' exit codes; True if it changed."""
        codes = [w.proc.poll() for w in job.workers]
        failed = [(w, c) for w, c in zip(job.workers, codes, strict=True) if c not in (None, 0)]
        # Workers that saved their step on SIGTERM: restart and resume, no restart spent.
        if failed and all(c == contract.PREEMPTED_EXIT for _, c in failed):
            self._stop_workers([job])  # its peers saved the same step and are exiting too
            job.preemptions += 1
            job.progress = {}
            self._start(job)
            return True
        if failed:
            # A usage error first: it says why, where another worker only lost its peer.
            worker, code = min(failed, key=lambda wc: wc[1] != contract.USAGE_EXIT)
            how = f"killed by signal {-code}" if code < 0 else f"exited with code {code}"
            self._stop_workers([job])  # the survivors would wait in their collectives forever
            if code == contract.USAGE_EXIT:
                job.state, job.finished = "failed", time.monotonic()
                job.failure = (
                    f"worker-{worker.index} {how}: a usage, configuration or data error, "
                    "which a restart cannot fix (its log says which)"
                )
                job.failed_log = worker.log_path
            elif job.restarts < self.max_restarts:
                job.failure = f"worker-{worker.index} {how}; restarting all workers"
                job.progress = {}
                self._start(job)
            else:
                job.state = "failed"
                job.finished = time.monotonic()
                job.failure = (
                    f"worker-{worker.index} {how} "
                    f"(after {job.restarts} restart(s); --max-restarts {self.max_restarts})"
                )
                job.failed_log = worker.log_path
            return True
        if all(c == 0 for c in codes):
            for w in job.workers:
                w.reader.join(timeout=5.0)
            job.state = "succeeded"
            job.finished = time.monotonic()
            self._report_pids()
            return True
        return False

    def run(self) -> list[Job]:
        """Run every job to an end state. Always stops every worker it started."""
        pending: deque[Job] = deque(self.jobs)
        running: list[Job] = []
        deadline = time.monotonic() + self.deadline_s
        try:
            while pending or running:
                while pending and len(running) < self.parallel:
                    job = pending.popleft()
                    self._start(job)
                    running.append(job)
                    self.on_change(self.jobs)
                changed = False
                for job in list(running):
                    if self._check(job):
                        changed = True
                    if job.state in ("succeeded", "failed"):
                        running.remove(job)
                if time.monotonic() > deadline:
                    self._stop_workers(running)
                    for job in running:
                        job.state, job.finished = "failed", time.monotonic()
                        job.failure = f"did not finish within {self.deadline_s:.0f} s"
                        job.failed_log = job.workers[0].log_path if job.workers else None
                    for job in pending:
                        job.state, job.failure = "failed", "not started before the deadline"
                    running.clear()
                    pending.clear()
                    changed = True
                self.on_change(self.jobs)
                if changed:
                    continue
                # Wake on the next progress line, or check exit codes twice a second.
                self._wake.wait(0.5)
                self._wake.clear()
        finally:
            live = [j for j in self.jobs if any(w.proc.poll() is None for w in j.workers)]
            if live:
                count = sum(j.running_workers() for j in live)
                self.log(f"stopping {count} worker(s)…")
                self._stop_workers(live)
            self._report_pids()
        return self.jobs


def failure_report(job: Job, lines: int = 30) -> str:
    """What failed, and the failing worker's log tail."""
    text = f"job {job.name} failed: {job.failure}"
    if job.failed_log is not None:
        text += f"\n--- last {lines} lines of {job.failed_log} ---\n{tail(job.failed_log, lines)}"
    return text
