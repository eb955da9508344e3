"""The one definition of input preprocessing, shared by training and the serving signatures.

Keeping both sides on these functions is what rules out train/serve skew.
"""

from __future__ import annotations

from typing import Any

IMAGE_SIZE = 28

# Mean and standard deviation of the training split's pixels scaled to [0, 1] (0.28597 and
# 0.35305 over the 54,961 images of ml.data.dataset's "train"). The model sees standardised pixels;
# its serving signatures take [0, 1] pixels and standardise them (ml.model.export), so a client
# never needs these numbers. Standardising was worth +0.6 points of validation accuracy
# for `cnn` in the quick budget (ml/training/config.py's tuning notes).
PIXEL_MEAN = 0.2860
PIXEL_STD = 0.3531


def scale(images: Any) -> Any:
    """uint8 pixels (any shape) -> float32 in [0, 1]. Vectorised: apply to whole batches."""
    import tensorflow as tf

    return tf.cast(images, tf.float32) / 255.0


def standardize(pixels: Any) -> Any:
    """[0, 1] pixels -> zero mean, unit variance over the training split (what the model sees)."""
    return (pixels - PIXEL_MEAN) / PIXEL_STD


def decode_image(image_bytes: Any) -> Any:
    """PNG or JPEG bytes of any size, gray or colour -> float32 [28, 28, 1] in [0, 1]."""
    import tensorflow as tf

    image = tf.io.decode_image(image_bytes, channels=1, dtype=tf.uint8, expand_animations=False)
    image.set_shape([None, None, 1])
    image = scale(image)
    size = tf.shape(image)[:2]
    return tf.cond(
        tf.reduce_all(tf.equal(size, [IMAGE_SIZE, IMAGE_SIZE])),
        lambda: image,
        lambda: tf.image.resize(image, [IMAGE_SIZE, IMAGE_SIZE], antialias=True),
    )
