"""ml.selection.evaluate: a SavedModel is scored as it would be served (the fixtures:
conftest.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

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
    from ml.model.architectures import build_model
    from ml.selection.evaluate import CandidateError, evaluate_saved_model
    from tests.support.failing_model import export_failing_on

    _, (x, y) = load_arrays(shared_data_dir)
    image = (x[1500, ..., None] / 255.0).astype(np.float32)
    path = export_failing_on(build_model("cnn", seed=3), image, tmp_path / "failing")
    assert evaluate_saved_model(path, x[:1000, ..., None], y[:1000])["examples"] == 1000
    with pytest.raises(CandidateError, match=r"failed on images 1000-1999 of 2000 \(NotFound"):
        evaluate_saved_model(path, x[:2000, ..., None], y[:2000])


@pytest.fixture(scope="module")
def faulty(tmp_path_factory) -> dict[str, Path]:
    """Malformed and faulty exports of an untrained cnn (tests/support/faulty_versions.py)."""
    from ml.model.architectures import build_model
    from tests.support import faulty_versions as fv

    root = tmp_path_factory.mktemp("faulty")
    model = build_model("cnn", seed=4)
    return {
        "wrong_shape": fv.wrong_pixels_shape(root / "wrong_shape"),
        "pixels_only": fv.pixels_only(model, root / "pixels_only"),
        "nan_on_single": fv.nan_on_single(model, root / "nan_on_single"),
    }


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("wrong_shape", r"cannot serve: signature 'serving_pixels' takes 'pixels' as float32 "
                        r"\(None, 784\), expected float32 \(None, 28, 28, 1\)"),
        ("pixels_only", r"cannot serve: no signature 'serving_default' \(has serving_pixels\)"),
        ("nan_on_single", r"cannot serve: serving_pixels on image 0 alone: probabilities "
                          r"non-finite for instance 0 \(1 of 1\)"),
    ],
)  # fmt: skip
def test_a_candidate_the_server_could_not_serve_is_refused_saying_why(
    faulty, shared_data_dir, name, reason
):
    from ml.selection.evaluate import CandidateError, evaluate_saved_model

    _, (x, y) = load_arrays(shared_data_dir)
    with pytest.raises(CandidateError, match=reason):
        evaluate_saved_model(faulty[name], x[:1000, ..., None], y[:1000])


def test_malformed_candidates_are_skipped_and_the_others_still_judged(volume, saved_models, faulty):
    from ml.selection import select as sel

    candidates = volume / "candidates"
    shutil.copytree(saved_models["good"], candidates / "cnn")
    for name in faulty:
        shutil.copytree(faulty[name], candidates / name)
    assert sel.main(["--volume", str(volume)]) == 0
    found = json.loads((volume / "reports" / "selection.json").read_text())
    by_name = {c["model_type"]: c for c in found["candidates"]}
    assert found["winner"] == "cnn"
    assert {n: by_name[n]["status"] for n in faulty} == dict.fromkeys(faulty, "skipped")
    assert all("cannot serve" in by_name[n]["error"] for n in faulty)
