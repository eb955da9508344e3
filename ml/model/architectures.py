"""The model registry: three CNNs from the original design, one place to build them."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from ml.contract import MODEL_TYPES
from ml.data.dataset import IMAGE_SHAPE, NUM_CLASSES
from ml.training.config import ConfigError

INPUT_SHAPE = (*IMAGE_SHAPE, 1)  # one grey channel


def _cnn(keras: Any, seed: int, bn_momentum: float) -> list[Any]:
    del bn_momentum
    init = keras.initializers.GlorotUniform
    return [
        keras.layers.Conv2D(32, 3, activation="relu", kernel_initializer=init(seed)),
        keras.layers.MaxPooling2D(2),
        keras.layers.Flatten(),
        keras.layers.Dense(64, activation="relu", kernel_initializer=init(seed + 1)),
        keras.layers.Dense(NUM_CLASSES, activation="softmax", kernel_initializer=init(seed + 2)),
    ]


def _cnn_dropout(keras: Any, seed: int, bn_momentum: float) -> list[Any]:
    del bn_momentum
    init = keras.initializers.GlorotUniform
    return [
        keras.layers.Conv2D(32, 3, activation="relu", kernel_initializer=init(seed)),
        keras.layers.MaxPooling2D(2),
        keras.layers.Conv2D(64, 3, activation="relu", kernel_initializer=init(seed + 1)),
        keras.layers.MaxPooling2D(2),
        keras.layers.Dropout(0.5, seed=seed),
        keras.layers.Conv2D(64, 3, activation="relu", kernel_initializer=init(seed + 2)),
        keras.layers.Flatten(),
        keras.layers.Dense(64, activation="relu", kernel_initializer=init(seed + 3)),
        keras.layers.Dense(NUM_CLASSES, activation="softmax", kernel_initializer=init(seed + 4)),
    ]


def _cnn_batchnorm(keras: Any, seed: int, bn_momentum: float) -> list[Any]:
    init = keras.initializers.GlorotUniform
    layers = keras.layers
    return [
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
    ]


_BUILDERS: dict[str, Callable[[Any, int, float], list[Any]]] = {
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
    learning_rate: float | list[float] = 1e-3,
    bn_momentum: float = 0.99,
    seed: int = 42,
    steps_per_execution: int = 1,
) -> Any:
    """Build and compile the named model (Adam, sparse categorical cross-entropy, accuracy).

    Call inside ``strategy.scope()`` for distributed training. ``learning_rate``: one rate,
    or the rate of every step (``TrainConfig.learning_rates``; the last holds after the
    end). ``steps_per_execution``: training steps per call of the compiled step function
    (``TrainConfig``'s field).
    """
    import tf_keras as keras

    layers = _BUILDERS[check_model_type(name)](keras, seed, bn_momentum)
    model = _quiet_sequential(keras)(
        [keras.Input(shape=INPUT_SHAPE, name="pixels"), *layers], name=name
    )
    rate = (
        _table_schedule(keras, learning_rate) if isinstance(learning_rate, list) else learning_rate
    )
    model.compile(
        steps_per_execution=steps_per_execution,
        optimizer=keras.optimizers.Adam(learning_rate=rate),
        loss=keras.losses.SparseCategoricalCrossentropy(),
        metrics=["accuracy"],
    )
    return model


@functools.cache
def _quiet_sequential(keras: Any) -> Any:
    """``keras.Sequential`` whose training step updates the metrics but does not read them.

    Keras's own step reads every metric after every step: under MultiWorkerMirroredStrategy
    each read is an all-reduce, six per step for the loss and accuracy, each about 1 ms of
    waiting on this machine (a TF profile of a 2-worker step; benchmarks/results/
    scaling-attempts.md). The step returns this replica's loss only; ``ml.training.train`` reads the
    metrics (``read_metrics``) where it reports them: at progress lines and epoch ends.
    """
    import tensorflow as tf

    class QuietSequential(keras.Sequential):
        def train_step(self, data: Any) -> dict[str, Any]:
            x, y = data
            with tf.GradientTape() as tape:
                predictions = self(x, training=True)
                loss = self.compute_loss(x, y, predictions)  # also updates the loss metric
            self.optimizer.minimize(loss, self.trainable_variables, tape=tape)
            self.compiled_metrics.update_state(y, predictions)
            return {"loss": loss}

    return QuietSequential


def read_metrics(model: Any) -> dict[str, float]:
    """The model's metrics (the loss and accuracy since the epoch began, over all workers).

    Under MultiWorkerMirroredStrategy each read is a collective: call it on every worker at
    the same point of training (callbacks do).
    """
    return {metric.name: float(metric.result()) for metric in model.metrics}


def _table_schedule(keras: Any, rates: list[float]) -> Any:
    """A learning-rate schedule that looks the optimizer's step up in ``rates``: the rates
    are computed once in Python (``TrainConfig.learning_rate_at``), so the schedule has one
    definition, and a restored optimizer (its step count) resumes at the right rate."""
    import tensorflow as tf

    class TableSchedule(keras.optimizers.schedules.LearningRateSchedule):
        def __init__(self, rates: list[float]) -> None:
            self.rates = list(rates)

        def __call__(self, step: Any) -> Any:
            table = tf.constant(self.rates, tf.float32)
            index = tf.minimum(tf.cast(step, tf.int32), len(self.rates) - 1)
            return tf.gather(table, index)

        def get_config(self) -> dict[str, Any]:
            return {"rates": self.rates}

    return TableSchedule(rates)
