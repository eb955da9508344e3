"""A real SavedModel that fails on some inputs: the canary e2e test's bad version (built in
the test, never a switch in the product).

``export_failing_on(model, image, path)`` exports ``model`` with the export contract's
signatures (``ml.model.export.export_model``), wrapped so that a batch holding ``image`` fails
with a TensorFlow NotFoundError (it reads a file that is not there): the server answers such
a request 500. Every other input is answered as ``model`` answers it, so the version loads,
warms up (zeros) and passes the selection (validation images); the load test's sample
request, which is ``image``, fails.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

MISSING = "/nonexistent/distml-test-fault"


def export_failing_on(model: Any, image: Any, path: Path) -> Path:
    """``image``: [28, 28, 1] float32 in [0, 1], as the pixels signature takes it."""
    import tensorflow as tf

    from ml.data.preprocess import standardize
    from ml.model.export import export_model

    target = standardize(tf.constant(image, tf.float32))  # as the model sees it

    class FailsOnImage(tf.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__(name="fails_on_image")
            self.inner = inner

        def __call__(self, x: Any, training: bool = False) -> Any:
            same = tf.reduce_all(tf.abs(x - target) < 1e-3, axis=[1, 2, 3])  # per image
            hit = tf.reduce_any(same)
            out = self.inner(x, training=training)

            def fail() -> Any:
                length = tf.strings.length(tf.io.read_file(MISSING))
                return out + tf.cast(length, tf.float32) * 0.0

            return tf.cond(hit, fail, lambda: out)

    return export_model(FailsOnImage(model), path)
