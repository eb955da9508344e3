"""ml.training.train as pods run it: real processes, real MultiWorkerMirroredStrategy on
127.0.0.1."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ml.contract import PROGRESS_PREFIX
from ml.training.train import main
from runtime.procs import free_ports

REPO = Path(__file__).resolve().parents[3]


def worker_env(tmp_path: Path, tf_config: dict | None, data_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    env.update(
        DISTML_DATA_DIR=str(data_dir),
        TMPDIR=str(tmp_path / "tmp"),
        TF_NUM_INTRAOP_THREADS="1",
        TF_NUM_INTEROP_THREADS="1",
        TF_CPP_MIN_LOG_LEVEL="2",
        PYTHONPATH=str(REPO),
    )
    (tmp_path / "tmp").mkdir(exist_ok=True)
    if tf_config is not None:
        env["TF_CONFIG"] = json.dumps(tf_config)
    return env


def train_cmd(volume: Path, model: str, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "ml",
        "train",
        "--volume",
        str(volume),
        "--model-type",
        model,
        "--log-every",
        "5",
        *extra,
    ]


def events(output: str) -> list[dict]:
    return [
        json.loads(line[len(PROGRESS_PREFIX) :])
        for line in output.splitlines()
        if line.startswith(PROGRESS_PREFIX)
    ]


def test_two_worker_job_finishes_and_leaves_exactly_one_saved_model(tmp_path, shared_data_dir):
    volume = tmp_path / "volume"
    ports = free_ports(2)
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    procs = [
        subprocess.Popen(
            train_cmd(volume, "cnn", "--epochs", "2", "--steps-per-epoch", "6"),
            env=worker_env(
                tmp_path,
                {"cluster": cluster, "task": {"type": "worker", "index": i}},
                shared_data_dir,
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=REPO,
        )
        for i in range(2)
    ]
    outputs = []
    try:
        for p in procs:
            out, _ = p.communicate(timeout=240)
            outputs.append(out)
    finally:
        for p in procs:
            p.kill()
    assert [p.returncode for p in procs] == [0, 0], "\n\n".join(o[-3000:] for o in outputs)

    saved = sorted(volume.rglob("saved_model.pb"))
    assert saved == [volume / "candidates" / "cnn" / "saved_model.pb"]
    candidate = volume / "candidates" / "cnn"
    metrics = json.loads((candidate / "metrics.json").read_text())
    assert metrics["workers"] == 2
    assert [row["epoch"] for row in metrics["history"]] == [1, 2]
    assert all(0 <= row["val_accuracy"] <= 1 for row in metrics["history"])
    # Each epoch's own steps are timed; the steady figure leaves out the first (tracing) epoch.
    assert [row["steps_run"] for row in metrics["history"]] == [6, 6]
    second = metrics["history"][1]
    assert metrics["steady_examples_per_second"] == round(6 * 128 / second["step_seconds"], 1)
    params = (candidate / "params.yaml").read_text()
    assert "model_type: cnn" in params and "global_batch_size: 128" in params
    # Non-chief output (export, checkpoint temp dirs) is cleaned up.
    assert list((tmp_path / "tmp").iterdir()) == []
    assert not [p for p in volume.rglob("*") if "workertemp" in p.name or ".tmp-" in p.name]
    assert (volume / "checkpoints" / "cnn" / "weights" / "checkpoint").is_file()
    assert any((volume / "tensorboard" / "cnn").rglob("events.out.tfevents.*"))
    # Both workers logged the same global steps and the chief says it is the chief.
    done = [e for o in outputs for e in events(o) if e["event"] == "done"]
    assert sorted(e["chief"] for e in done) == [False, True]
    # The epochs' training figures are the job's (read across both workers), not a
    # worker's own: both print the same ones, and metrics.json holds them.
    epochs = [
        [(e["loss"], e["accuracy"]) for e in events(o) if e["event"] == "epoch"] for o in outputs
    ]
    assert epochs[0] == epochs[1] and len(epochs[0]) == 2
    assert [(row["loss"], row["accuracy"]) for row in metrics["history"]] == epochs[0]
    assert all(0 < accuracy <= 1 for _, accuracy in epochs[0])


def test_a_killed_job_resumes_from_its_last_epoch(tmp_path, shared_data_dir):
    volume = tmp_path / "volume"
    cmd = train_cmd(volume, "cnn", "--epochs", "4", "--steps-per-epoch", "15", "--no-validation")
    env = worker_env(tmp_path, None, shared_data_dir)
    first = subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO
    )
    seen: list[dict] = []
    try:
        for line in first.stdout:
            if line.startswith(PROGRESS_PREFIX):
                seen.append(json.loads(line[len(PROGRESS_PREFIX) :]))
                if seen[-1]["event"] == "epoch" and seen[-1]["epoch"] == 2:
                    first.send_signal(signal.SIGKILL)  # a worker dies after epoch 2
                    break
    finally:
        first.kill()
        first.wait(timeout=30)
    assert not (volume / "candidates" / "cnn").exists()

    second = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=REPO, timeout=240)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert "resuming from backup at epoch 3/4" in second.stdout
    metrics = json.loads((volume / "candidates" / "cnn" / "metrics.json").read_text())
    assert metrics["resumed_from_epoch"] == 2
    assert [row["epoch"] for row in metrics["history"]] == [3, 4]


def test_unknown_model_type_exits_non_zero_listing_valid_ones(tmp_path, capsys):
    assert main(["--volume", str(tmp_path), "--model-type", "resnet50"]) == 2
    err = capsys.readouterr().err
    assert "unknown model type 'resnet50'" in err
    assert "cnn, cnn_dropout, cnn_batchnorm" in err
    assert not any(tmp_path.iterdir()), "a rejected run must not create anything"


def test_malformed_tf_config_exits_non_zero_with_an_explanation(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TF_CONFIG", '{"cluster": {"worker": ["a:1"]}')
    assert main(["--volume", str(tmp_path), "--model-type", "cnn"]) == 2
    assert "TF_CONFIG is not valid JSON" in capsys.readouterr().err


def test_help_documents_every_flag(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    for flag in (
        "--volume",
        "--model-type",
        "--profile",
        "--config",
        "--epochs",
        "--steps-per-epoch",
        "--batch-size-per-replica",
        "--learning-rate",
        "--lr-schedule",
        "--bn-momentum",
        "--shuffle-buffer",
        "--seed",
        "--steps-per-execution",
        "--no-validation",
        "--source-dir",
        "--log-every",
        "--bind-loopback",
    ):
        assert flag in text


def test_steady_throughput_leaves_out_the_first_epoch_and_needs_a_second():
    from ml.training.train import steady_examples_per_second

    history = [
        {"steps_run": 10, "step_seconds": 9.0},  # tracing: left out
        {"steps_run": 10, "step_seconds": 1.0},
        {"steps_run": 30, "step_seconds": 3.0},
    ]
    assert steady_examples_per_second(history, 64) == 640.0
    assert steady_examples_per_second(history[:1], 64) is None
