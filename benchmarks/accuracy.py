"""Accuracy benchmark: every model, 2-worker MultiWorkerMirroredStrategy jobs, real data.

    python benchmarks/accuracy.py [--profiles quick,full] [--seeds 3] [--workers 2]
        [--batch-size-per-replica N]

For each profile and model it runs real ``python -m ml train`` worker processes on
127.0.0.1 (as the local runtime and the pods do), evaluates the exported candidate on the
validation split (5,039 images held out of the training file: what ml.selection.select chooses on)
and on the test split (10,000 images: the figure docs/training.md quotes), and records both
accuracies (mean and spread over seeds), wall time, and examples/s of training next to
examples/s of the input pipeline alone; and, per seed, the model ml.selection.select's rule picks
(highest validation accuracy) with its test accuracy. Writes
``benchmarks/results/accuracy.json`` and ``accuracy.md`` (the table docs/training.md quotes).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import NamedTuple

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ml import contract  # noqa: E402
from ml.training.config import resolve  # noqa: E402

SCORED_ON = ("validation", "test")  # ml.data.dataset splits every candidate is scored on


class JobShape(NamedTuple):
    workers: int
    batch_size_per_replica: int | None  # None: the profile's

    def global_batch(self, profile: str) -> int:
        per_replica = self.batch_size_per_replica or resolve(profile).batch_size_per_replica
        return per_replica * self.workers


def run_job(volume: Path, model: str, profile: str, seed: int, job: JobShape, log_dir: Path):
    """One training job, run exactly as the local runtime runs it; returns wall seconds."""
    from runtime.local.jobs import Job, JobRunner, failure_report

    cmd = contract.train(
        volume,
        model,
        profile=profile,
        seed=seed,
        batch_size_per_replica=job.batch_size_per_replica,
        log_every=100,
        python=sys.executable,
    )
    run = Job(name=f"{profile}-{model}-s{seed}", command=cmd)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(REPO))
    runner = JobRunner(
        [run], workers=job.workers, parallel=1, max_restarts=0, log_dir=log_dir, env=env
    )
    started = time.monotonic()
    runner.run()
    if run.state != "succeeded":
        raise SystemExit(failure_report(run))
    return time.monotonic() - started


def pipeline_throughput(volume: Path, global_batch: int, batches: int = 400) -> float:
    """Examples/s of the input pipeline alone (no model), after one warm-up pass."""
    from ml.data.dataset import SPLIT_EXAMPLES, load_split
    from ml.data.pipeline import make_dataset

    ds = make_dataset(
        load_split(volume, "train", log=lambda m: None),
        global_batch_size=global_batch,
        training=True,
    )
    it = iter(ds)
    for _ in range(SPLIT_EXAMPLES["train"] // global_batch + 1):  # fill the cache
        next(it)
    started = time.perf_counter()
    for _ in range(batches):
        next(it)
    return batches * global_batch / (time.perf_counter() - started)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--profiles", default="quick,full")
    p.add_argument("--models", default=",".join(contract.MODEL_TYPES))
    p.add_argument("--seeds", type=int, default=3, help="seeds 1..N of every profile")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument(
        "--batch-size-per-replica",
        type=int,
        help="override the profiles' (e.g. --workers 1 --batch-size-per-replica 128 runs "
        "the same global batch and steps as 2 workers of 64, in about half the time here)",
    )
    p.add_argument("--work", default=str(REPO / ".distml" / "bench"))
    p.add_argument(
        "--source-dir",
        default=os.environ.get(contract.DATA_DIR_ENV)
        or str(REPO.parent / "shared/data/fashion-mnist"),
        help="the four Fashion-MNIST .gz files "
        f"(default: ${contract.DATA_DIR_ENV}, else ../shared)",
    )
    p.add_argument("--out", default=str(REPO / "benchmarks" / "results"))
    p.add_argument(
        "--merge",
        nargs="+",
        metavar="JSON",
        help="only combine earlier accuracy.json files (e.g. a quick and a full "
        "run) into one report in --out",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    out = Path(args.out)
    if args.merge:
        report = merge([json.loads(Path(f).read_text()) for f in args.merge])
    else:
        report = measure(args, out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "accuracy.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "accuracy.md").write_text(markdown(report))
    print(markdown(report))
    return 0


def merge(reports: list[dict]) -> dict:
    """One report of earlier runs' results (e.g. a quick and a full run)."""
    for rep in reports:  # each row keeps its own run's pipeline figure and job shape
        for r in rep["results"]:
            r.setdefault("pipeline_examples_per_second", rep["pipeline_examples_per_second"])
            r.setdefault("workers", rep["workers"])
            # Rows from before --batch-size-per-replica ran at the profile's batch.
            r.setdefault("global_batch", JobShape(rep["workers"], None).global_batch(r["profile"]))
    merged = {
        **reports[0],
        "results": [r for rep in reports for r in rep["results"]],
        "date": max(rep["date"] for rep in reports),
    }
    del merged["pipeline_examples_per_second"]
    return merged


def measure(args: argparse.Namespace, out: Path) -> dict:
    """Train and score every profile x model; the report with the pipeline's throughput."""
    from ml.data.dataset import prepare
    from ml.selection.evaluate import load_split_arrays

    work = Path(args.work)
    volume, logs = work / "volume", work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    prepare(volume, source_dir=args.source_dir)
    splits = {s: load_split_arrays(volume, s, log=lambda m: None) for s in SCORED_ON}
    job = JobShape(args.workers, args.batch_size_per_replica)
    results = []
    for profile in args.profiles.split(","):
        for model in args.models.split(","):
            runs = [
                run_scored(volume, model, profile, s, job, logs, splits)
                for s in range(1, args.seeds + 1)
            ]
            results.append(summarise(profile, model, runs, job))
    pipe = pipeline_throughput(volume, job.global_batch(args.profiles.split(",")[0]))
    return {
        "workers": args.workers,
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
        },
        "pipeline_examples_per_second": round(pipe),
        "results": results,
        "date": time.strftime("%Y-%m-%d"),
    }


def run_scored(
    volume: Path, model: str, profile: str, seed: int, job: JobShape, logs: Path, splits: dict
) -> dict:
    """One training job, its candidate scored on each split's arrays (images, labels)."""
    from ml.selection.evaluate import evaluate_saved_model

    wall = run_job(volume, model, profile, seed, job, logs)
    metrics = json.loads(Path(contract.metrics_path(volume, model)).read_text())
    candidate = contract.candidate_dir(volume, model)
    acc = {s: evaluate_saved_model(candidate, *splits[s])["accuracy"] for s in SCORED_ON}
    print(
        f"{profile:5} {model:13} seed {seed}: validation accuracy {acc['validation']:.4f}, "
        f"test accuracy {acc['test']:.4f}, wall {wall:.0f} s, "
        f"{metrics['examples_per_second']:.0f} ex/s",
        flush=True,
    )
    return {
        "seed": seed,
        "val_accuracy": acc["validation"],
        "test_accuracy": acc["test"],
        "wall_seconds": round(wall, 1),
        "train_seconds": metrics["train_seconds"],
        "train_examples_per_second": metrics["examples_per_second"],
    }


def summarise(profile: str, model: str, runs: list[dict], job: JobShape) -> dict:
    """A model's row: each split's accuracy mean and spread over seeds, speed, and the
    resolved config."""
    cfg = resolve(profile, overrides={"model_type": model})
    figures = {}
    for key in ("val_accuracy", "test_accuracy"):
        accs = [r[key] for r in runs]
        figures[f"{key}_mean"] = statistics.mean(accs)
        figures[f"{key}_spread"] = (max(accs) - min(accs)) if len(accs) > 1 else 0.0
    return {
        "profile": profile,
        "model": model,
        "runs": runs,
        **figures,
        "workers": job.workers,
        "global_batch": job.global_batch(profile),
        "wall_seconds_mean": statistics.mean(r["wall_seconds"] for r in runs),
        "train_examples_per_second": statistics.mean(r["train_examples_per_second"] for r in runs),
        "config": {k: v for k, v in cfg.to_dict().items() if k != "extra"},
    }


def markdown(report: dict) -> str:
    lines = [
        f"One {report['machine']['cpus']}-core machine, real Fashion-MNIST, "
        f"{report['date']}. Validation: 5,039 images held out of the "
        "training file (`ml select` chooses on it); test: the 10,000-image test split "
        "(reported only, never chosen on).",
        "",
        "| profile | model | workers x batch | validation accuracy (mean) | test accuracy "
        "(mean) | test spread (max-min) | seeds | wall s (mean) | train ex/s "
        "| pipeline-only ex/s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report["results"]:
        spread = f"{r['test_accuracy_spread']:.2%}" if len(r["runs"]) > 1 else "-"
        run_pipe = r.get("pipeline_examples_per_second", report.get("pipeline_examples_per_second"))
        shape = f"{r['workers']} x {r['global_batch'] // r['workers']}"
        lines.append(
            f"| {r['profile']} | {r['model']} | {shape} | {r['val_accuracy_mean']:.2%} | "
            f"{r['test_accuracy_mean']:.2%} | {spread} | {len(r['runs'])} | "
            f"{r['wall_seconds_mean']:.0f} | {r['train_examples_per_second']:.0f} | {run_pipe} |"
        )
    lines += ["", *selection_lines(report["results"])]
    return "\n".join(lines) + "\n"


def selected(results: list[dict]) -> dict[str, list[tuple[int, str, float]]]:
    """Per profile, per seed trained for every model: (seed, the model with the highest
    validation accuracy, its test accuracy), ml.selection.select's rule."""
    picks: dict[str, list[tuple[int, str, float]]] = {}
    for profile in dict.fromkeys(r["profile"] for r in results):
        rows = [r for r in results if r["profile"] == profile]
        seeds = set.intersection(*({run["seed"] for run in r["runs"]} for r in rows))
        for seed in sorted(seeds):
            runs = [(run, r["model"]) for r in rows for run in r["runs"] if run["seed"] == seed]
            best, model = max(runs, key=lambda pair: pair[0]["val_accuracy"])
            picks.setdefault(profile, []).append((seed, model, best["test_accuracy"]))
    return picks


def selection_lines(results: list[dict]) -> list[str]:
    lines = []
    for profile, picks in selected(results).items():
        each = ", ".join(f"seed {s}: {m} {t:.2%}" for s, m, t in picks)
        mean = statistics.mean(t for _, _, t in picks)
        lines.append(
            f"Selected on validation, `{profile}`: test accuracy {mean:.2%} (mean of "
            f"{len(picks)} seeds; {each})."
        )
    return lines


if __name__ == "__main__":
    sys.exit(main())
