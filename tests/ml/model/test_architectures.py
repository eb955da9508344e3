"""Models: registry, shapes, parameter counts, and a few steps that lower the loss."""

from __future__ import annotations

import numpy as np
import pytest

from ml.contract import MODEL_TYPES
from ml.model.architectures import build_model, check_model_type, read_metrics
from ml.training.config import ConfigError

# Hand-computed from the layer lists in docs/training.md (weights + biases; BatchNorm has
# 4 x channels, 2 x channels of them trainable).
EXPECTED_PARAMS = {
    # conv 32*(9+1)=320; dense 13*13*32*64+64=346,176; dense 64*10+10=650
    "cnn": 320 + 346_176 + 650,
    # conv 320; conv 32*9*64+64=18,496; conv 64*9*64+64=36,928; dense 3*3*64*64+64=36,928; 650
    "cnn_dropout": 320 + 18_496 + 36_928 + 36_928 + 650,
    # as cnn_dropout plus BatchNorm(32) 128 and BatchNorm(64) 256
    "cnn_batchnorm": 320 + 128 + 18_496 + 256 + 36_928 + 36_928 + 650,
}


@pytest.mark.parametrize("name", MODEL_TYPES)
def test_model_shapes_and_parameter_counts(name: str) -> None:
    model = build_model(name, seed=1)
    assert model.input_shape == (None, 28, 28, 1)
    assert model.output_shape == (None, 10)
    assert model.count_params() == EXPECTED_PARAMS[name]
    probs = model(np.zeros((3, 28, 28, 1), np.float32), training=False).numpy()
    assert probs.shape == (3, 10)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5)


def test_batchnorm_momentum_is_applied() -> None:
    model = build_model("cnn_batchnorm", bn_momentum=0.9)
    momenta = [layer.momentum for layer in model.layers if "batch_normalization" in layer.name]
    assert momenta == [0.9, 0.9]


def test_unknown_model_is_rejected_with_the_valid_names() -> None:
    with pytest.raises(ConfigError) as err:
        check_model_type("resnet")
    for name in MODEL_TYPES:
        assert name in str(err.value)


@pytest.mark.parametrize("name", MODEL_TYPES)
def test_a_few_steps_lower_the_loss_and_never_nan(name: str) -> None:
    rng = np.random.default_rng(0)
    # Learnable toy task: the class is which horizontal band of the image is bright.
    labels = rng.integers(0, 10, size=256)
    x = rng.uniform(0, 0.2, size=(256, 28, 28, 1)).astype(np.float32)
    for i, label in enumerate(labels):
        x[i, label * 2 : label * 2 + 3, :, 0] = 1.0
    model = build_model(name, learning_rate=3e-3, bn_momentum=0.9, seed=3)
    before = model.evaluate(x, labels, verbose=0)[0]
    history = model.fit(x, labels, batch_size=32, epochs=3, verbose=0, shuffle=False)
    losses = history.history["loss"]
    after = model.evaluate(x, labels, verbose=0)[0]
    assert np.all(np.isfinite(losses)) and np.isfinite(after)
    assert losses[-1] < losses[0]
    assert after < before


@pytest.mark.parametrize("name", ["cnn", "cnn_batchnorm"])
def test_the_quiet_training_step_learns_and_reports_exactly_what_keras_does(name: str) -> None:
    """build_model's step leaves reading the metrics to the caller; the weights it learns
    and the epoch's loss and accuracy read afterwards equal Keras's own step's."""
    import tf_keras as keras

    rng = np.random.default_rng(1)
    x = rng.uniform(0, 1, size=(192, 28, 28, 1)).astype(np.float32)
    y = rng.integers(0, 10, size=192)
    quiet = build_model(name, learning_rate=1e-3, bn_momentum=0.9, seed=5)
    usual = build_model(name, learning_rate=1e-3, bn_momentum=0.9, seed=5)
    usual.train_step = keras.Sequential.train_step.__get__(usual)  # Keras's own step
    quiet_logs = quiet.fit(x, y, batch_size=32, epochs=1, verbose=0, shuffle=False).history
    usual_logs = usual.fit(x, y, batch_size=32, epochs=1, verbose=0, shuffle=False).history
    for mine, theirs in zip(quiet.get_weights(), usual.get_weights(), strict=True):
        np.testing.assert_allclose(mine, theirs, rtol=1e-5, atol=1e-6)
    assert set(quiet_logs) == {"loss"}  # one replica's last loss: not a figure to report
    read = read_metrics(quiet)
    assert read == pytest.approx(
        {"loss": usual_logs["loss"][0], "accuracy": usual_logs["accuracy"][0]}, rel=1e-5
    )
