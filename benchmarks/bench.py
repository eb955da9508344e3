"""The project benchmark (``nox -s bench``): training scaling, serving, the lifecycle.

    python benchmarks/bench.py [--only training,serving,lifecycle] [--repeats 3]
        [--epochs 4] [--steps 150] [--duration 10] [--loadtest-duration 30s]
        [--data-dir DIR] [--out-dir benchmarks/results]

Runs each part in turn and writes ``bench.json`` (every figure, every repeat) and
``bench.md`` (a header with the date, the machine and the command, then one table per
part) into ``--out-dir``:

- training (``benchmarks/bench_training.py``): steady-state examples/s of 1 worker and of 2
  workers at the same global batch, side by side in each repeat, their medians, the
  ratio, and the input pipeline alone; again for any profile whose global batch differs;
- serving (``benchmarks/bench_serving.py``): ``hey`` at c=1, 5, 20 against ``python -m
  ml.server.serve`` beside the in-process limit at batch 1 and 32, cold start beside ``import
  tensorflow``; the request is the real sample image (Fashion-MNIST test image 0);
- lifecycle (``benchmarks/lifecycle.py``): wall time of each ``invoke`` step on the local
  runtime, quick profile, one run.

About 15 minutes with the defaults on a 2-core machine. The accuracy benchmark
(``benchmarks/accuracy.py``, tens of minutes) is not part of it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(REPO))

from benchmarks import bench_serving, bench_training, lifecycle  # noqa: E402
from ml import contract  # noqa: E402

PARTS = ("training", "serving", "lifecycle")
RESULTS = REPO / "benchmarks" / "results"
STEADY_STATE = (
    "Steady state, as `ml.training.train` records it in `metrics.json`: examples/s over the epochs "
    "after the first (the first traces the step function), timed from each epoch's first "
    "step to its last: steps only, no validation pass (the runs pass `--no-validation`), no "
    "end-of-epoch callbacks. 1 and 2 workers run one after the other in each repeat, the "
    "order alternating between repeats, so drift on a busy machine falls on both."
)


def progress(line: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)


def machine() -> dict[str, Any]:
    import psutil

    return {
        "cores": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "python": platform.python_version(),
    }


def profile_global_batches() -> dict[str, int]:
    """Each profile's global batch with the default worker count."""
    from ml.training.config import resolve

    return {p: resolve(p).global_batch_size(contract.DEFAULT_WORKERS) for p in contract.PROFILES}


def run_training(args: argparse.Namespace) -> dict[str, Any]:
    """One report per distinct global batch among the profiles (the quick one first)."""
    batches = profile_global_batches()
    reports = []
    for batch in dict.fromkeys(batches[p] for p in contract.PROFILES):
        progress(f"training: 1 vs 2 workers at global batch {batch}, {args.repeats} repeat(s)")
        argv = ["--repeats", str(args.repeats), "--global-batch", str(batch)]
        argv += ["--epochs", str(args.epochs), "--steps", str(args.steps)]
        argv += ["--source-dir", args.data_dir]
        reports.append(bench_training.measure(bench_training.build_parser().parse_args(argv)))
    return {"profile_global_batches": batches, "reports": reports}


def run_serving(args: argparse.Namespace) -> dict[str, Any]:
    progress(
        f"serving: hey at c={','.join(map(str, bench_serving.CONCURRENCY))} "
        f"for {args.duration:g} s "
        f"each, in-process limit, cold start; {args.repeats} repeat(s)"
    )
    return bench_serving.run(None, args.repeats, args.duration, data_dir=args.data_dir)


def run_lifecycle(args: argparse.Namespace) -> dict[str, Any]:
    progress("lifecycle: up (cold, warm), train-all, deploy, loadtest, down --purge; one run")
    return lifecycle.measure(args.data_dir, args.loadtest_duration, progress=progress)


RUNNERS = {"training": run_training, "serving": run_serving, "lifecycle": run_lifecycle}


# --------------------------------------------------------------------------- the report


def header(report: dict[str, Any]) -> list[str]:
    m = report["machine"]
    return [
        "# distml benchmark",
        "",
        f"- date: {report['date']} (took {report['seconds'] / 60:.1f} min)",
        f"- machine: {m['cores']} cores, {m['memory_gib']:g} GiB memory, {m['platform']}, "
        f"{m['processor']}, Python {m['python']}",
        f"- command: `{report['command']}`",
        f"- every timing is a ratio measured side by side in one run; figures are the median "
        f"of {report['repeats']} repeat{'s' if report['repeats'] != 1 else ''} "
        "(lifecycle: one run)",
        "",
    ]


def training_section(part: dict[str, Any]) -> list[str]:
    batches = part["profile_global_batches"]
    named = ", ".join(f"`{p}` {b}" for p, b in batches.items())
    same = len(set(batches.values())) == 1
    lines = ["## Training: 1 worker against 2 at the same global batch", "", STEADY_STATE, ""]
    lines.append(
        f"The profiles' global batch with {contract.DEFAULT_WORKERS} workers: {named}"
        + (" (the same, so measured once)." if same else " (each measured).")
    )
    lines.append("")
    for report in part["reports"]:
        lines += [bench_training.markdown(report), ""]
    return lines


def serving_section(part: dict[str, Any]) -> list[str]:
    return [
        "## Serving: `python -m ml serve` under `hey` beside the in-process limit",
        "",
        f"Model: {part['model']}. Request: {part['request']}. `hey` for {part['duration_s']:g} s "
        f"at each concurrency; median of {part['repeats']}; cold start is process start to "
        "the first readiness 200.",
        "",
        bench_serving.table(part),
        "",
    ]


def lifecycle_section(part: dict[str, Any]) -> list[str]:
    return ["## Lifecycle: `invoke` steps, wall time", "", lifecycle.markdown(part)]


SECTIONS = {
    "training": training_section,
    "serving": serving_section,
    "lifecycle": lifecycle_section,
}


def markdown(report: dict[str, Any]) -> str:
    lines = header(report)
    for part in PARTS:
        if part in report["parts"]:
            lines += SECTIONS[part](report["parts"][part])
    return "\n".join(lines).rstrip("\n") + "\n"


def write(report: dict[str, Any], out_dir: Path) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = out_dir / "bench.json", out_dir / "bench.md"
    paths[0].write_text(json.dumps(report, indent=2) + "\n")
    paths[1].write_text(markdown(report))
    return paths


# --------------------------------------------------------------------------- the command


def parts(text: str) -> list[str]:
    chosen = [p.strip() for p in text.split(",") if p.strip()]
    unknown = [p for p in chosen if p not in PARTS]
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(
            f"unknown part(s) {', '.join(unknown) or '(none)'}; choose from {','.join(PARTS)}"
        )
    return [p for p in PARTS if p in chosen]


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python benchmarks/bench.py", description=__doc__)
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("--only", type=parts, default=list(PARTS), help="comma-separated parts")
    p.add_argument("--repeats", type=positive, default=3, help="training and serving repeats")
    p.add_argument("--epochs", type=positive, default=4, help="training: epochs per run (>= 2)")
    p.add_argument("--steps", type=positive, default=150, help="training: steps per epoch")
    p.add_argument("--duration", type=float, default=10.0, help="serving: seconds of hey")
    p.add_argument(
        "--loadtest-duration",
        default=lifecycle.DEFAULT_LOADTEST_DURATION,
        help="lifecycle: `invoke loadtest --duration`",
    )
    p.add_argument(
        "--data-dir",
        default=os.environ.get(contract.DATA_DIR_ENV)
        or str(REPO.parent / "shared/data/fashion-mnist"),
        help="the Fashion-MNIST files (default: $DISTML_DATA_DIR, else ../shared/data/...)",
    )
    p.add_argument("--out-dir", type=Path, default=RESULTS, help="where bench.{json,md} go")
    p.add_argument("--command", help="how this run was started, for the header (nox sets it)")
    return p


def check(args: argparse.Namespace) -> str | None:
    """What stops the run before it starts (a message), else None."""
    if "training" in args.only and args.epochs < 2:
        return "--epochs must be 2 or more: steady state is the epochs after the first"
    missing = [f for f in contract.RAW_FILES if not (Path(args.data_dir) / f).is_file()]
    if missing:
        return (
            f"the Fashion-MNIST files are not in {args.data_dir} (missing {', '.join(missing)}): "
            f"set {contract.DATA_DIR_ENV} or pass --data-dir"
        )
    if "serving" in args.only:
        try:
            bench_serving.hey_binary()
        except bench_serving.BenchError as e:
            return str(e)
    return None


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    problem = check(args)
    if problem:
        print(f"benchmarks/bench.py: {problem}", file=sys.stderr)
        return 2
    started = time.monotonic()
    report: dict[str, Any] = {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
        "command": args.command or shlex.join(["python", "benchmarks/bench.py", *argv]),
        "repeats": args.repeats,
        "parts": {},
    }
    try:
        for part in args.only:
            report["parts"][part] = RUNNERS[part](args)
    except (bench_serving.BenchError, lifecycle.LifecycleError) as e:
        print(f"benchmarks/bench.py: {e}\nnothing was written", file=sys.stderr)
        return 1
    report["seconds"] = time.monotonic() - started
    for path in write(report, args.out_dir):
        progress(f"wrote {path}")
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
