"""runtime/local/status.py: the status rows name the split of every figure and show the
serving model's card."""

from __future__ import annotations

import json
from pathlib import Path


def test_local_status_names_the_split_of_every_figure_and_shows_the_model_card(local_rt):
    from ml import contract
    from runtime.local.status import status_rows

    volume, svc = local_rt.wd.volume, local_rt.service
    metrics = Path(contract.metrics_path(volume, "cnn"))
    metrics.parent.mkdir(parents=True)
    metrics.write_text(
        json.dumps({"history": [{"val_accuracy": 0.81}], "final": {"val_accuracy": 0.81}})
    )
    candidate = {
        "model_type": "cnn",
        "status": "ok",
        "val_accuracy": 0.8712,
        "test_accuracy": 0.8655,
    }
    report = Path(contract.selection_report(volume))
    report.parent.mkdir(parents=True)
    report.write_text(json.dumps({"candidates": [candidate]}))
    record = {
        "version": 1,
        "source": "candidate cnn",
        "model_type": "cnn",
        "val_accuracy": 0.8712,
        "test_accuracy": 0.8655,
        "code_version": "distml:0123456789ab",
        "reason": "cnn has the highest validation accuracy (0.8712)",
        "params": {"profile": "quick", "epochs": 3, "extra": {"steps_per_epoch_resolved": 70}},
        "published_at": "2025-01-02T03:04:05Z",
    }
    version_dir = Path(contract.serving_dir(volume, svc)) / "1"
    version_dir.mkdir(parents=True)
    # Only the version's own publish.json (a volume from before the serving copy existed).
    (version_dir / contract.PUBLISH_FILE).write_text(json.dumps(record))
    rows = dict(status_rows(local_rt))
    assert rows["candidate cnn"] == (
        "last-epoch val acc 0.8100, selection: val acc 0.8712, test acc 0.8655"
    )
    assert rows["serving model"] == "version 1: cnn (candidate cnn), published 2025-01-02T03:04:05Z"
    assert rows["serving accuracy"] == "validation 0.8712 (chosen on), test 0.8655 (reported only)"
    assert rows["serving code"] == "distml:0123456789ab"
    assert rows["serving training"].startswith("profile quick, 3 epoch(s) x 70 steps")
    # The serving copy ml.select keeps wins when it is of the serving version.
    Path(contract.serving_record(volume, svc)).write_text(
        json.dumps({**record, "code_version": "x"})
    )
    assert dict(status_rows(local_rt))["serving code"] == "x"
