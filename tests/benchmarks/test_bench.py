"""benchmarks.bench, the report writer of ``nox -s bench``: every figure in JSON, the tables in
Markdown, the parts not run left out, and --only in the benchmark order.

No real training or serving here: the report is built from fixed figures through the
benchmarks' own summarise functions.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from benchmarks import bench, bench_serving, bench_training

REPO = Path(__file__).resolve().parents[2]


def _training_report() -> dict:
    args = argparse.Namespace(
        model="cnn", global_batch=128, epochs=4, steps=150, repeats=3, steps_per_execution=None
    )
    figures = {1: (9000.0, 8000.0, 9500.0), 2: (5000.0, 5600.0, 4800.0)}
    runs = [
        {"repeat": i, "workers": w, "steady_examples_per_second": eps[i]}
        for w, eps in figures.items()
        for i in range(3)
    ]
    return bench_training.summarise(runs, args, pipeline=380000.4)


def _serving_result() -> dict:
    def hey(rps: float, p50: float) -> dict:
        return {"requests_per_s": rps, "p50_ms": p50, "p95_ms": 2 * p50, "p99_ms": 3 * p50,
                "ok": 1000, "errors": 0}  # fmt: skip

    sample = {
        "inprocess": {"b1_calls_per_s": 2000.0, "b1_images_per_s": 2000.0,
                      "b32_calls_per_s": 300.0, "b32_images_per_s": 9600.0},
        "tf_import_s": 3.5,
        bench_serving.THIS: {"cold_start_s": 4.0, "c1": hey(1000.0, 1.0), "c5": hey(1300.0, 3.8),
                       "c20": hey(1250.0, 16.0)},
    }  # fmt: skip
    return {
        "model": "a freshly built cnn",
        "request": "one base64 PNG per request (test image 0, class Ankle boot), 300 bytes",
        "repeats": 3,
        "duration_s": 10.0,
        "servers": {bench_serving.THIS: str(REPO)},
        "median": bench_serving.summarise([sample], [bench_serving.THIS]),
    }


REPORT = {
    "date": "2026-12-01 10:00 UTC",
    "seconds": 900.0,
    "machine": {"cores": 2, "memory_gib": 23.5, "platform": "Linux-6.1-x86_64",
                "processor": "x86_64", "python": "3.11.7"},
    "command": "nox -s bench -- --repeats 3",
    "repeats": 3,
    "parts": {
        "training": {"profile_global_batches": {"quick": 128, "full": 128},
                     "reports": [_training_report()]},
        "serving": _serving_result(),
        "lifecycle": {"runtime": "local", "profile": "quick", "workers": 2,
                      "loadtest_duration": "30s", "runs": 1,
                      "steps": [{"step": "up (cold: fresh work dir)", "command": "invoke up",
                                 "seconds": 12.34},
                                {"step": "down --purge", "command": "invoke down --purge",
                                 "seconds": None}]},
    },
}  # fmt: skip


def test_write_puts_every_figure_in_json_and_the_tables_in_markdown(tmp_path):
    json_path, md_path = bench.write(REPORT, tmp_path / "results")
    assert json.loads(json_path.read_text()) == json.loads(json.dumps(REPORT))
    md = md_path.read_text()
    head = md.split("## ", 1)[0]
    assert "2026-12-01 10:00 UTC (took 15.0 min)" in head
    assert "2 cores, 23.5 GiB memory, Linux-6.1-x86_64" in head
    assert "`nox -s bench -- --repeats 3`" in head
    assert "the median of 3 repeats (lifecycle: one run)" in head
    # Training: medians 9000 and 5000 -> 0.56x; steady state explained; one batch for both.
    assert "| 9000 | 5000 | 0.56x | 380000 |" in md
    assert "epochs after the first" in md and "no validation" in md
    assert "`quick` 128, `full` 128 (the same, so measured once)" in md
    # Serving: c=1 is 1000 / 2000 = 0.50 of the in-process limit, p99/p50 = 3.
    assert "| this | 1 | 1,000 | 0.50 | 1.00 | 2.00 | 3.00 | 3.0 | 0 | 4.00 |" in md
    assert "`import tensorflow` alone: 3.50 s" in md
    # Lifecycle: one row per step; a teardown that failed after another error shows "-".
    assert "| up (cold: fresh work dir) | `invoke up` | 12.3 |" in md
    assert "| down --purge | `invoke down --purge` | - |" in md
    assert md.index("## Training") < md.index("## Serving") < md.index("## Lifecycle")


def test_markdown_leaves_out_the_parts_not_run():
    only = {**REPORT, "parts": {"serving": REPORT["parts"]["serving"]}}
    md = bench.markdown(only)
    assert "## Serving" in md and "## Training" not in md and "## Lifecycle" not in md


def test_only_takes_known_parts_in_the_benchmark_order():
    assert bench.build_parser().parse_args(["--only", "lifecycle,training"]).only == [
        "training",
        "lifecycle",
    ]
    with pytest.raises(SystemExit):
        bench.build_parser().parse_args(["--only", "training,accuracy"])
