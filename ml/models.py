"""The model registry: three CNNs from the original design, one place to build them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ml.config import ConfigError
from ml.contract import MODEL_TYPES
from ml.data import IMAGE_SHAPE, NUM_CLASSES

INPUT_SHAPE = (*IMAGE_SHAPE, 1)  # one grey channel


def _cnn(keras: Any, seed: int, bn_momentum: float) -> Any:
    del bn_momentum
    init = keras.initializers.GlorotUniform
    return keras.Sequential(
        [
            keras.Input(shape=INPUT_SHAPE, name="pixels"),
            keras.layers.Conv2D(32, 3, activation="relu", kernel_initializer=init(seed)),
            keras.layers.MaxPooling2D(2),
            keras.layers.Flatten(),
            keras.layers.Dense(64, activation="relu", kernel_initializer=init(seed + 1)),
            keras.layers.Dense(
                NUM_CLASSES, activation="softmax", kernel_initializer=init(seed + 2)
            ),
        ],
        name="cnn",
    )


def _cnn_dropout(keras: Any, seed: int, bn_momentum: float) -> Any:
    del bn_momentum
    init = keras.initializers.GlorotUniform
    return keras.Sequential(
        [
            keras.Input(shape=INPUT_SHAPE, name="pixels"),
            keras.layers.Conv2D(32, 3, activation="relu", kernel_initializer=init(seed)),
            keras.layers.MaxPooling2D(2),
            keras.layers.Conv2D(64, 3, activation="relu", kernel_initializer=init(seed + 1)),
            keras.layers.MaxPooling2D(2),
            keras.layers.Dropout(0.5, seed=seed),
            keras.layers.Conv2D(64, 3, activation="relu", kernel_initializer=init(seed + 2)),
            keras.layers.Flatten(),
            keras.layers.Dense(64, activation="relu", kernel_initializer=init(seed + 3)),
            keras.layers.Dense(
                NUM_CLASSES, activation="softmax", kernel_initializer=init(seed + 4)
            ),
        ],
        name="cnn_dropout",
    )


def _cnn_batchnorm(keras: Any, seed: int, bn_momentum: float) -> Any:
    init = keras.initializers.GlorotUniform
    layers = keras.layers
    return keras.Sequential(
        [
            keras.Input(shape=INPUT_SHAPE, name="pixels"),
            layers.Conv2D(32, 3, activation="relu", kernel_initializer=init(seed)),
            layers.BatchNormalization(momentum=bn_momentum),
            layers.Activation("sigmoid"),
            layers.MaxPooling2D(2),
            layers.Conv2D(64, 3, activation="relu", kernel_initializer=init(seed + 1)),
            layers.BatchNormalization(momentum=bn_momentum),
            layers.Activation("sigmoid"),
            layers.MaxPooling2D(2),
            layers.Conv2D(64, 3, activation="relu", kernel_initializer=init(seed + 2)),
            layers.Flatten(),
            layers.Dense(64, activation="relu", kernel_initializer=init(seed + 3)),
            layers.Dense(NUM_CLASSES, activation="softmax", kernel_initializer=init(seed + 4)),
        ],
        name="cnn_batchnorm",
    )


_BUILDERS: dict[str, Callable[[Any, int, float], Any]] = {
    "cnn": _cnn,
    "cnn_dropout": _cnn_dropout,
    "cnn_batchnorm": _cnn_batchnorm,
}
assert tuple(_BUILDERS) == MODEL_TYPES


def check_model_type(name: str) -> str:
    """Return ``name`` if it is registered, else raise ConfigError listing the valid ones."""
    if name not in _BUILDERS:
        raise ConfigError(f"unknown model type {name!r}; valid: {', '.join(MODEL_TYPES)}")
    return name


def build_model(
    name: str,
    *,
    learning_rate: float = 1e-3,
    bn_momentum: float = 0.99,
    seed: int = 42,
    steps_per_execution: int = 1,
) -> Any:
    """Build and compile the named model (Adam, sparse categorical cross-entropy, accuracy).

    Call inside ``strategy.scope()`` for distributed training. ``steps_per_execution``:
    training steps per call of the compiled step function (``TrainConfig``'s field).
    """
    import tf_keras as keras

    model = _BUILDERS[check_model_type(name)](keras, seed, bn_momentum)
    model.compile(
        steps_per_execution=steps_per_execution,
        optimizer=keras.optimizers.Adam(learning_rate=learning_rate),
        loss=keras.losses.SparseCategoricalCrossentropy(),
        metrics=["accuracy"],
    )
    return model
