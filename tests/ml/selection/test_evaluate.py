"""ml.selection.evaluate: a SavedModel is scored as it would be served (the fixtures:
conftest.py)."""

from __future__ import annotations

import numpy as np

from ml.data.dataset import load_arrays


def test_evaluate_scores_what_is_served(volume, saved_models, shared_data_dir):
    from ml.selection.evaluate import evaluate_saved_model

    _, (x, y) = load_arrays(shared_data_dir)
    result = evaluate_saved_model(saved_models["good"], x[:2000, ..., None], y[:2000])
    assert result["examples"] == 2000 and 0.6 < result["accuracy"] <= 1
    assert np.isfinite(result["loss"])


def test_a_model_that_fails_on_some_images_is_a_candidate_error_naming_them(
    shared_data_dir, tmp_path
):
    # It loads and answers most images (tests/support/failing_model.py): the selection must
    # report it, not crash with TensorFlow's traceback.
    import pytest

    from ml.model.architectures import build_model
    from ml.selection.evaluate import CandidateError, evaluate_saved_model
    from tests.support.failing_model import export_failing_on

    _, (x, y) = load_arrays(shared_data_dir)
    image = (x[1500, ..., None] / 255.0).astype(np.float32)
    path = export_failing_on(build_model("cnn", seed=3), image, tmp_path / "failing")
    assert evaluate_saved_model(path, x[:1000, ..., None], y[:1000])["examples"] == 1000
    with pytest.raises(CandidateError, match=r"failed on images 1000-1999 of 2000 \(NotFound"):
        evaluate_saved_model(path, x[:2000, ..., None], y[:2000])
