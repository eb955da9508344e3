"""ml.evaluate: a SavedModel is scored as it would be served (the fixtures: conftest.py)."""

from __future__ import annotations

import numpy as np

from ml.data import load_arrays


def test_evaluate_scores_what_is_served(volume, saved_models, shared_data_dir):
    from ml.evaluate import evaluate_saved_model

    _, (x, y) = load_arrays(shared_data_dir)
    result = evaluate_saved_model(saved_models["good"], x[:2000, ..., None], y[:2000])
    assert result["examples"] == 2000 and 0.6 < result["accuracy"] <= 1
    assert np.isfinite(result["loss"])
