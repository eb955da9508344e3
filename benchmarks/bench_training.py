"""Training scaling benchmark: 1 worker against 2 at the same global batch, on this machine.

    python benchmarks/bench_training.py [--repeats 3] [--model cnn] [--epochs 4] [--steps 150]
        [--steps-per-execution N]

Each repeat runs the real ``python -m ml train`` worker processes twice, side by side:
one worker at the whole global batch (all cores as TF threads) and two
MultiWorkerMirroredStrategy workers over 127.0.0.1 at half of it each (the cores divided
between them), exactly as the local runtime runs them (``runtime.local.jobs.JobRunner``). The
order alternates between repeats, so drift on a noisy machine falls on both.

Steady state, as ``ml.training.train`` records it in ``metrics.json``: examples/s over the epochs
after the first (which traces the step function), timed from each epoch's first step to
its last (no validation pass, no end-of-epoch callbacks; the runs pass ``--no-validation``).
The input pipeline alone (no model) is measured at the same global batch.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.accuracy import pipeline_throughput  # noqa: E402
from ml import contract  # noqa: E402

WORKER_COUNTS = (1, 2)


def run_once(volume: Path, workers: int, args: argparse.Namespace, logs: Path) -> dict:
    """One job of ``workers`` workers at the global batch; the chief's steady-state figures."""
    from runtime.local.jobs import Job, JobRunner, failure_report

    cmd = contract.train(
        volume,
        args.model,
        epochs=args.epochs,
        steps_per_epoch=args.steps,
        batch_size_per_replica=args.global_batch // workers,
        steps_per_execution=args.steps_per_execution,
        validation=False,
        log_every=args.steps,
        python=sys.executable,
    )
    job = Job(name=f"scaling-{workers}w-{time.monotonic_ns()}", command=cmd)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(REPO))
    runner = JobRunner([job], workers=workers, parallel=1, max_restarts=0, log_dir=logs, env=env)
    runner.run()
    if job.state != "succeeded":
        raise SystemExit(failure_report(job))
    metrics = json.loads(Path(contract.metrics_path(volume, args.model)).read_text())
    return {
        "workers": workers,
        "threads_per_worker": runner.threads,
        "steady_examples_per_second": metrics["steady_examples_per_second"],
        "examples_per_second_with_first_epoch": metrics["examples_per_second"],
    }


def measure(args: argparse.Namespace) -> dict:
    """``repeats`` side-by-side pairs; medians, the ratio, and the pipeline alone."""
    from ml.data.dataset import prepare

    work = Path(args.work)
    volume, logs = work / "volume", work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    prepare(volume, source_dir=args.source_dir, log=lambda m: None)
    runs: list[dict] = []
    for repeat in range(args.repeats):
        order = WORKER_COUNTS if repeat % 2 == 0 else WORKER_COUNTS[::-1]
        for workers in order:
            run = run_once(volume, workers, args, logs)
            print(
                f"repeat {repeat + 1}/{args.repeats}, {workers} worker(s): "
                f"{run['steady_examples_per_second']:.0f} examples/s",
                flush=True,
            )
            runs.append({"repeat": repeat, **run})
    return summarise(runs, args, pipeline_throughput(volume, args.global_batch))


def summarise(runs: list[dict], args: argparse.Namespace, pipeline: float) -> dict:
    median = {
        w: statistics.median(r["steady_examples_per_second"] for r in runs if r["workers"] == w)
        for w in WORKER_COUNTS
    }
    return {
        "model": args.model,
        "global_batch": args.global_batch,
        "epochs": args.epochs,
        "steps_per_epoch": args.steps,
        "steps_per_execution": args.steps_per_execution,
        "repeats": args.repeats,
        "runs": runs,
        "median_examples_per_second": {f"{w}_workers": median[w] for w in WORKER_COUNTS},
        "ratio_2_to_1": round(median[2] / median[1], 3),
        "pipeline_examples_per_second": round(pipeline),
    }


def markdown(report: dict) -> str:
    m = report["median_examples_per_second"]
    return "\n".join(
        [
            f"Training, `{report['model']}`, global batch {report['global_batch']}, "
            f"{report['epochs']} epochs x {report['steps_per_epoch']} steps"
            f"{_per_call(report.get('steps_per_execution'))}, steady state "
            f"(epochs 2-{report['epochs']}, steps only), median of {report['repeats']}:",
            "",
            "| 1 worker ex/s | 2 workers ex/s | 2 / 1 | input pipeline alone ex/s |",
            "|---|---|---|---|",
            f"| {m['1_workers']:.0f} | {m['2_workers']:.0f} | {report['ratio_2_to_1']:.2f}x "
            f"| {report['pipeline_examples_per_second']} |",
            "",
        ]
    )


def _per_call(steps_per_execution: int | None) -> str:
    if steps_per_execution is None:
        return " (the profile's steps per call)"
    return f" ({steps_per_execution} per call)"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--model", default="cnn", choices=contract.MODEL_TYPES)
    p.add_argument("--global-batch", type=int, default=128)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--steps", type=int, default=150, help="steps per epoch")
    p.add_argument(
        "--steps-per-execution",
        type=int,
        help="steps per call of the train function (default: the profile's)",
    )
    p.add_argument("--work", default=str(REPO / ".distml" / "bench" / "training"))
    p.add_argument(
        "--source-dir",
        default=os.environ.get(contract.DATA_DIR_ENV)
        or str(REPO.parent / "shared/data/fashion-mnist"),
    )
    p.add_argument("--out", help="write the report as JSON here")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    report = measure(args)
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
