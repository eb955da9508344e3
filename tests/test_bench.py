"""``nox -s bench``: the report writer, the lifecycle's teardown, the session's own checks.

No real training or serving here: the report is built from fixed figures through the
benchmarks' own summarise functions, and the lifecycle runs a fake ``invoke`` script.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import sys
from pathlib import Path

import pytest

from benchmarks import bench, bench_serving, bench_training, lifecycle

REPO = Path(__file__).resolve().parents[1]


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


# --------------------------------------------------------------------------- lifecycle


FAKE_INVOKE = """\
#!{python}
# A stand-in for the project's invoke: records its arguments, acts out the work dir.
import os, shutil, sys
args = sys.argv[1:]
with open(os.environ["FAKE_INVOKE_RECORD"], "a") as f:
    f.write(" ".join(args) + "\\n")
wd = os.environ["INVOKE_WORKDIR"]
if args[0] == "up":
    os.makedirs(wd, exist_ok=True)
if args[0] == os.environ.get("FAKE_INVOKE_FAIL"):
    print("step output line 1")
    print("error: the disk is full (fake)")
    sys.exit(3)
if args[0] == "down" and not os.environ.get("FAKE_INVOKE_KEEP"):
    shutil.rmtree(wd, ignore_errors=True)
"""


@pytest.fixture
def fake_invoke(tmp_path, monkeypatch):
    script = tmp_path / "invoke"
    script.write_text(FAKE_INVOKE.format(python=sys.executable))
    script.chmod(0o755)
    record = tmp_path / "record.txt"
    monkeypatch.setenv("FAKE_INVOKE_RECORD", str(record))
    return script, record


def test_a_failing_step_stops_with_its_tail_and_down_purge_still_runs(
    fake_invoke, monkeypatch, tmp_path
):
    script, record = fake_invoke
    monkeypatch.setenv("FAKE_INVOKE_FAIL", "train-all")
    lines: list[str] = []
    with pytest.raises(lifecycle.LifecycleError) as failed:
        lifecycle.measure("/data", "5s", invoke=script, progress=lines.append, under=tmp_path)
    message = str(failed.value)
    assert "`invoke train-all --profile quick` failed (exit 3)" in message
    assert "error: the disk is full (fake)" in message and "step output line 1" in message
    assert record.read_text().splitlines() == ["up", "up", "train-all --profile quick",
                                               "down --purge"]  # fmt: skip
    assert lines[-1].startswith("lifecycle: down --purge:")
    (kept,) = tmp_path.glob("distml-bench-lifecycle-*")  # the logs, for the message's path
    assert not (kept / "workdir").exists() and "disk is full" in (kept / "2.log").read_text()


def test_a_failing_teardown_after_a_failure_does_not_hide_the_first_error(
    fake_invoke, monkeypatch, tmp_path
):
    script, record = fake_invoke
    monkeypatch.setenv("FAKE_INVOKE_FAIL", "up")
    monkeypatch.setenv("FAKE_INVOKE_KEEP", "1")
    lines: list[str] = []
    with pytest.raises(lifecycle.LifecycleError, match="`invoke up` failed"):
        lifecycle.measure(None, "5s", invoke=script, progress=lines.append, under=tmp_path)
    assert record.read_text().splitlines() == ["up", "down --purge"]
    # down "succeeded" but left the work dir up made: reported, not raised over `up`'s error.
    assert any("the teardown failed too" in line and "left the work dir" in line
               for line in lines)  # fmt: skip


def test_a_run_times_every_step_passes_the_data_dir_and_tears_down(
    fake_invoke, monkeypatch, tmp_path
):
    script, record = fake_invoke
    monkeypatch.setenv("FAKE_INVOKE_FAIL", "none")
    report = lifecycle.measure(
        "/the/data", "7s", invoke=script, progress=lambda line: None, under=tmp_path
    )
    assert record.read_text().splitlines() == [
        "up", "up", "train-all --profile quick", "deploy", "loadtest --duration 7s",
        "down --purge",
    ]  # fmt: skip
    assert [r["command"] for r in report["steps"]][-1] == "invoke down --purge"
    assert all(r["seconds"] > 0 for r in report["steps"])
    assert list(tmp_path.glob("distml-bench-lifecycle-*")) == []  # nothing left behind
    env = lifecycle.environment(Path("/w"), "/the/data", 18123)
    assert env["DISTML_DATA_DIR"] == "/the/data" and env["INVOKE_RUNTIME"] == "local"
    assert env["INVOKE_WORKDIR"] == "/w" and env["INVOKE_HTTP_PORT"] == "18123"


def test_a_teardown_that_leaves_the_work_dir_fails_a_good_run(fake_invoke, monkeypatch, tmp_path):
    script, _ = fake_invoke
    monkeypatch.setenv("FAKE_INVOKE_KEEP", "1")
    with pytest.raises(lifecycle.LifecycleError, match="left the work dir"):
        lifecycle.measure(None, "5s", invoke=script, progress=lambda line: None, under=tmp_path)


# --------------------------------------------------------------------------- nox session


class _Stop(Exception):
    pass


class _Session:
    def __init__(self) -> None:
        self.posargs: list[str] = []
        self.env: dict[str, str] = {}
        self.ran: list[tuple] = []

    def error(self, message: str) -> None:
        raise _Stop(message)

    def run(self, *args, **kwargs) -> None:
        self.ran.append(args)


@functools.cache  # once: nox registers each session by name
def _noxfile():
    spec = importlib.util.spec_from_file_location("noxfile_under_test", REPO / "noxfile.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_bench_session_stops_when_hey_is_missing(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no hey there
    session = _Session()
    with pytest.raises(_Stop, match=r"hey was not found on PATH.*apt-get install hey"):
        _noxfile().bench(session)
    assert session.ran == []  # stopped before installing or running anything


def test_the_bench_session_stops_when_the_data_is_missing(tmp_path, monkeypatch):
    hey = tmp_path / "hey"
    hey.write_text("#!/bin/sh\n")
    hey.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("DISTML_DATA_DIR", str(tmp_path / "nothing"))
    session = _Session()
    with pytest.raises(_Stop, match="bench needs the Fashion-MNIST files: set DISTML_DATA_DIR"):
        _noxfile().bench(session)
    assert session.ran == []


def test_accuracy_report_names_the_model_selection_would_pick_per_seed():
    from benchmarks import accuracy

    def row(profile, model, figures):
        runs = [
            {
                "seed": s,
                "val_accuracy": v,
                "test_accuracy": t,
                "wall_seconds": 1.0,
                "train_examples_per_second": 1.0,
            }
            for s, (v, t) in enumerate(figures, start=1)
        ]
        return accuracy.summarise(profile, model, runs, accuracy.JobShape(1, 128))

    results = [
        row("full", "cnn", [(0.90, 0.95), (0.93, 0.92)]),  # seed 1: best test, worse val
        row("full", "cnn_dropout", [(0.92, 0.91), (0.91, 0.90)]),
        row("quick", "cnn", [(0.88, 0.87)]),
    ]
    picks = accuracy.selected(results)
    assert picks == {
        "full": [(1, "cnn_dropout", 0.91), (2, "cnn", 0.92)],  # chosen on validation
        "quick": [(1, "cnn", 0.87)],
    }
    text = accuracy.markdown(
        {
            "workers": 2,
            "machine": {"cpus": 2},
            "date": "d",
            "pipeline_examples_per_second": 1,
            "results": results,
        }
    )
    assert "Selected on validation, `full`: test accuracy 91.50% (mean of 2 seeds;" in text
    assert "| full | cnn | 1 x 128 | 91.50% | 93.50% | 3.00% | 2 |" in text
