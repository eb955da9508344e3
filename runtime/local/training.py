"""Local training: one multi-worker job per model, run by ``runtime.local.jobs.JobRunner``,
with a live display, a summary table and the training-curves chart."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ml import contract
from ml.contract import records
from runtime.local.jobs import Job, JobRunner, failure_report
from runtime.output.tables import table
from runtime.procs import python_env
from runtime.requests import TrainRequest

if TYPE_CHECKING:
    from runtime.local import LocalRuntime

DEADLINE_S = 6 * 3600


def _jobs(rt: LocalRuntime, request: TrainRequest) -> list[Job]:
    return [
        Job(
            name=model,
            command=contract.train(
                rt.wd.volume,
                model,
                profile=request.profile,
                epochs=request.epochs,
                steps_per_epoch=request.steps_per_epoch,
                bind_loopback=True,  # every worker is on 127.0.0.1: listen there only
                python=rt.python,
            ),
        )
        for model in request.models
    ]


def train(rt: LocalRuntime, request: TrainRequest, display: object = None) -> int:
    jobs = _jobs(rt, request)
    parallel = request.parallel or len(jobs)
    if rt.ex.dry:
        rt.out(
            f"would run {len(jobs)} job(s) x {request.workers} worker(s), {parallel} at "
            f"a time, restarting a job's workers together up to {request.max_restarts} "
            "time(s); each worker gets free 127.0.0.1 ports:"
        )
        for job in jobs:
            rt.ex.say_workers(job.name, job.command, request.workers)
        return 0
    _run(rt, request, jobs, parallel, display)
    rt.out(table(_summary_rows(rt, jobs)))
    rt.chart()
    failed = [j for j in jobs if j.state != "succeeded"]
    for job in failed:
        rt.out(failure_report(job))
    if failed:
        rt.out(
            "next: fix the cause above, then rerun `invoke train --model-type "
            f"{failed[0].name}` (it resumes from its last saved step)"
        )
        return 1
    return 0


def _run(rt: LocalRuntime, request: TrainRequest, jobs: list[Job], parallel: int, display) -> None:
    from runtime.output.display import JobDisplay

    display = display or JobDisplay(rt.out)
    runner = JobRunner(
        jobs,
        workers=request.workers,
        parallel=parallel,
        max_restarts=request.max_restarts,
        log_dir=rt.wd.logs / "train",
        env=python_env(),
        deadline_s=DEADLINE_S,
        on_change=display.update,
        on_pids=lambda pids: rt.wd.update_state(train_pids=pids),
        on_metrics=lambda urls: rt.wd.update_state(train_metrics=urls),
        log=rt.out,
    )
    rt.out(
        f"training {len(jobs)} job(s) x {request.workers} worker(s), {parallel} at a time, "
        f"profile {request.profile}, {runner.threads} TF thread(s) per worker; "
        f"logs in {rt.wd.logs / 'train'}"
    )
    started = time.monotonic()
    try:
        runner.run()
    finally:
        display.close()
        rt.wd.update_state(train_pids=None, train_metrics=None)
    rt.out(f"training finished in {time.monotonic() - started:.0f} s")


def _summary_rows(rt: LocalRuntime, jobs: Sequence[Job]) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = [
        ("model", "state", "restarts", "resumed at", "val acc (last epoch)", "time")
    ]
    for job in jobs:
        metrics = records.read_metrics(contract.metrics_path(rt.wd.volume, job.name))
        acc = metrics.val_accuracy if metrics and job.state == "succeeded" else None
        resumed = (
            "-"
            if job.resumed_from is None
            else f"epoch {job.resumed_from[0] + 1}, step {job.resumed_from[1]}"
        )
        took = f"{job.finished - job.started:.0f} s" if job.finished else "-"
        rows.append(
            (
                job.name,
                job.state,
                str(job.restarts),
                resumed,
                "-" if acc is None else f"{acc:.4f}",
                took,
            )
        )
    return rows
