"""Fixtures of the ml tests. For selection and evaluation (test_select.py, test_evaluate.py):

- ``saved_models``: two real SavedModels, 'good' and 'bad', built once per session.
- ``aborting_model``: a real SavedModel whose loading aborts the process that loads it.
- ``volume``: an empty volume path, with DISTML_DATA_DIR pointing at the real files.

And ``tf``, TensorFlow imported only by the tests that use it (server/test_image_header.py,
test_serve_http.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ml import contract
from ml.data.dataset import load_arrays
from ml.model.architectures import build_model
from ml.model.export import export_model
from ml.training.config import resolve


@pytest.fixture(scope="session")
def saved_models(tmp_path_factory, shared_data_dir) -> dict[str, Path]:
    """Two real SavedModels: 'good' (trained briefly on real data) and 'bad' (untrained)."""
    (x, y), _ = load_arrays(shared_data_dir)
    root = tmp_path_factory.mktemp("saved")
    good = build_model("cnn", learning_rate=3e-3, seed=1)
    good.fit(x[:6400, ..., None] / 255.0, y[:6400], batch_size=128, epochs=1, verbose=0)
    export_model(good, root / "good")
    export_model(build_model("cnn", seed=2), root / "bad")
    # What ml.training.train writes beside the SavedModel: the resolved parameters of this run.
    cfg = resolve("quick", overrides={"model_type": "cnn", "epochs": 1, "seed": 1})
    cfg.extra.update(workers=1, global_batch_size=128, steps_per_epoch_resolved=50)
    (root / "good" / contract.PARAMS_FILE).write_text(cfg.to_yaml())
    return {"good": root / "good", "bad": root / "bad"}


@pytest.fixture(scope="session")
def aborting_model(tmp_path_factory) -> Path:
    """An untrained cnn whose graph runs TensorFlow's Abort op (SIGABRT) on a batch of one
    blank image: the warm-up of every load (``ml.model.servable.load_servable``). The
    crashing version of tests/e2e/test_canary.py (tests/support/faulty_versions.py), on the
    image every load sends."""
    import numpy as np

    from tests.support.faulty_versions import aborts_on_image

    blank = np.zeros((28, 28, 1), np.float32)
    path = tmp_path_factory.mktemp("aborting") / "model"
    return aborts_on_image(build_model("cnn", seed=5), blank, path)


@pytest.fixture
def volume(tmp_path, shared_data_dir, monkeypatch) -> Path:
    monkeypatch.setenv("DISTML_DATA_DIR", str(shared_data_dir))
    return tmp_path / "volume"


@pytest.fixture(scope="module")
def tf():
    import tensorflow as tf

    return tf
