"""integration/canary_faults.py off the cluster: its verdict on the stable's p99, its
usage, and the versions it builds from a served SavedModel (the run itself needs the kind
cluster: nox -s integration -- standard --offline --with-monitoring)."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest

from integration import canary_faults as cf


def _interval(stable_p99: float | None, shadow: int = 20) -> dict:
    return {"shadow": shadow, "stable": {"p99_s": stable_p99}, "canary": {"p99_s": 0.4}}


def test_the_stable_within_its_tolerance_passes_and_beyond_it_is_named():
    baseline = 0.050
    assert cf.stable_problems([_interval(0.050), _interval(0.0599)], baseline) == []
    (problem,) = cf.stable_problems([_interval(0.040), _interval(0.0601)], baseline)
    assert "60.1 ms" in problem and "baseline of 50.0 ms" in problem and "20%" in problem


def test_no_stable_figure_at_all_is_a_problem_not_a_pass():
    assert cf.stable_problems([_interval(None), {"shadow": 20, "stable": None}], 0.05) == [
        "no interval measured the stable's p99"
    ]


def test_an_unknown_fault_is_a_usage_error(capsys):
    assert cf.main(["sluggish"]) == 2
    assert "usage" in capsys.readouterr().err


def test_the_sample_image_is_the_load_tests_own(tmp_path, monkeypatch):
    import tensorflow as tf

    pixels = (np.arange(784, dtype=np.uint8) % 251).reshape(28, 28, 1)
    png = tf.io.encode_png(pixels).numpy()
    (tmp_path / "sample-request.json").write_text(
        json.dumps({"instances": [{"b64": base64.b64encode(png).decode()}]})
    )
    monkeypatch.setattr(cf, "workdir", lambda: tmp_path)
    assert np.allclose(cf.sample_image(), pixels / 255.0)


@pytest.mark.parametrize("fault", ["slow", "erroring"])
def test_a_fault_built_on_a_served_savedmodel_answers_as_it_does_but_for_its_fault(tmp_path, fault):
    """What build() does with the serving version copied off the volume: the loaded
    SavedModel's model, wrapped, answers every other image exactly as the version does."""
    import tensorflow as tf

    from ml.model.architectures import build_model
    from ml.model.export import OUTPUT, PIXELS_SIGNATURE, export_model

    export_model(build_model("cnn", learning_rate=3e-3, seed=1), tmp_path / "1")
    served = tf.saved_model.load(str(tmp_path / "1"))
    images = np.random.default_rng(0).random((4, 28, 28, 1), dtype=np.float32)
    gate, make = cf.faults()[fault]
    make(served.model, images[0], tmp_path / fault)
    wrapped = tf.saved_model.load(str(tmp_path / fault)).signatures[PIXELS_SIGNATURE]
    original = served.signatures[PIXELS_SIGNATURE]
    others = tf.constant(images[1:])
    assert np.allclose(wrapped(pixels=others)[OUTPUT], original(pixels=others)[OUTPUT])
    if fault == "erroring":
        assert gate == "errors"
        with pytest.raises(tf.errors.InvalidArgumentError):
            wrapped(pixels=tf.constant(images[:1]))
    else:
        assert gate == "latency"
