"""runtime/output/charts.py: the training curves read every candidate's metrics.json on the volume,
skip what is half-written or in progress, and draw nothing when there is nothing to draw."""

from __future__ import annotations

import json
from pathlib import Path

from ml import contract
from runtime.output.charts import load_histories, training_curves


def _metrics(volume: Path, model: str, text: str) -> None:
    path = Path(contract.candidates_dir(volume)) / model / contract.METRICS_FILE
    path.parent.mkdir(parents=True)
    path.write_text(text)


def test_histories_skip_unreadable_metrics_and_hidden_directories(tmp_path):
    rows = [{"epoch": 1, "loss": 0.9, "val_loss": 1.0, "accuracy": 0.6, "val_accuracy": 0.5}]
    _metrics(tmp_path, "cnn", json.dumps({"history": rows}))
    _metrics(tmp_path, "cnn_dropout", '{"history": [')  # half-written
    _metrics(tmp_path, ".cnn_batchnorm.tmp", json.dumps({"history": rows}))  # in progress
    assert load_histories(tmp_path) == {"cnn": rows}


def test_no_history_draws_no_chart_and_a_history_draws_a_png(tmp_path):
    out = tmp_path / "reports" / "curves.png"
    assert training_curves(tmp_path, out) is None and not out.exists()
    rows = [
        {"epoch": e, "loss": 1 / e, "val_loss": 1.1 / e, "accuracy": 0.5, "val_accuracy": 0.4}
        for e in (1, 2)
    ]
    _metrics(tmp_path, "cnn", json.dumps({"history": rows}))
    assert training_curves(tmp_path, out) == out
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
