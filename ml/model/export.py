"""The export contract: a SavedModel with preprocessing inside its two signatures.

| signature         | input                                   | output                        |
|-------------------|-----------------------------------------|-------------------------------|
| serving_default   | image_bytes: tf.string [None]           | probabilities: float32 [N,10] |
| serving_pixels    | pixels: float32 [None, 28, 28, 1] in [0,1] | probabilities: float32 [N,10] |
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ml.data.preprocess import decode_image, standardize
from ml.model.architectures import INPUT_SHAPE

DEFAULT_SIGNATURE = "serving_default"
PIXELS_SIGNATURE = "serving_pixels"
BYTES_INPUT = "image_bytes"
PIXELS_INPUT = "pixels"
OUTPUT = "probabilities"


def _serving_module(model: Any) -> Any:
    import tensorflow as tf

    class ServingModule(tf.Module):
        def __init__(self, model: Any) -> None:
            super().__init__(name="distml_serving")
            self.model = model

        @tf.function(
            input_signature=[tf.TensorSpec([None, *INPUT_SHAPE], tf.float32, name=PIXELS_INPUT)]
        )
        def serve_pixels(self, pixels: Any) -> dict[str, Any]:
            return {OUTPUT: self.model(standardize(pixels), training=False)}

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name=BYTES_INPUT)])
        def serve_bytes(self, image_bytes: Any) -> dict[str, Any]:
            pixels = tf.map_fn(
                decode_image,
                image_bytes,
                fn_output_signature=tf.TensorSpec(INPUT_SHAPE, tf.float32),
            )
            return {OUTPUT: self.model(standardize(pixels), training=False)}

    return ServingModule(model)


def export_model(model: Any, path: str | Path) -> Path:
    """Write ``model`` as a SavedModel with both signatures at ``path`` (must not exist)."""
    import tensorflow as tf

    module = _serving_module(model)
    path = Path(path)
    tf.saved_model.save(
        module,
        str(path),
        signatures={
            DEFAULT_SIGNATURE: module.serve_bytes,
            PIXELS_SIGNATURE: module.serve_pixels,
        },
    )
    return path
