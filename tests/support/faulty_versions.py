"""Real SavedModels that fail the way a bad version fails a user, built in the tests (never
a switch in the product). Each wraps a trained or random model and is exported with the
export contract's signatures (``ml.model.export.export_model``), so it loads and warms up
(a batch of one blank image) like any version:

- ``nan_on_single``: answers NaN probabilities for a batch of exactly one image that is not
  blank; blank images (the warm-up) and larger batches (the selection's) are answered as
  ``model`` answers them.
- ``rejects_bright``: its graph raises InvalidArgumentError (a ``tf.debugging`` assertion)
  for any batch holding an image brighter than ``limit`` (mean standardized pixel): checked,
  valid input that only this version refuses; ``rejects_image`` the same for one image.
- ``aborts_on_image``: its process aborts on a batch holding one image (a crash).
- ``slow_sometimes``: a few percent of its calls are slow (a slow tail), every answer right.
- ``one_class_confused``: a share of one class answered as another (that class's recall
  down, the total barely).
- ``wrong_pixels_shape``, ``pixels_only``: exports that break the contract's signatures.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _export(model: Any, path: Path, body: Any, name: str) -> Path:
    import tensorflow as tf

    from ml.model.export import export_model

    class Faulty(tf.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__(name=name)
            self.inner = inner

        def __call__(self, x: Any, training: bool = False) -> Any:
            return body(x, self.inner(x, training=training))

    return export_model(Faulty(model), path)


def nan_on_single(model: Any, path: Path) -> Path:
    import tensorflow as tf

    def body(x: Any, out: Any) -> Any:
        blank = tf.equal(tf.reduce_max(x), tf.reduce_min(x))
        single = tf.logical_and(tf.equal(tf.shape(x)[0], 1), tf.logical_not(blank))
        return tf.cond(single, lambda: out * float("nan"), lambda: out)

    return _export(model, path, body, "nan_on_single")


def rejects_bright(model: Any, path: Path, limit: float = 0.5) -> Path:
    import tensorflow as tf

    def body(x: Any, out: Any) -> Any:
        brightness = tf.reduce_mean(x, axis=[1, 2, 3])
        check = tf.debugging.assert_less_equal(
            brightness, tf.constant(limit, x.dtype), message="this version refuses bright images"
        )
        with tf.control_dependencies([check]):
            return tf.identity(out)

    return _export(model, path, body, "rejects_bright")


def wrong_pixels_shape(path: Path) -> Path:
    """Both signatures by name, but ``serving_pixels`` takes flat [None, 784] vectors: what
    exporting a model built for another input looks like."""
    import tensorflow as tf

    from ml.model.export import BYTES_INPUT, DEFAULT_SIGNATURE, OUTPUT, PIXELS_INPUT
    from ml.model.export import PIXELS_SIGNATURE as PIXELS

    class Flat(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 784], tf.float32, name=PIXELS_INPUT)])
        def pixels(self, pixels: Any) -> Any:
            return {OUTPUT: tf.nn.softmax(pixels[:, :10])}

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name=BYTES_INPUT)])
        def image_bytes(self, image_bytes: Any) -> Any:
            return {OUTPUT: tf.fill([tf.shape(image_bytes)[0], 10], 0.1)}

    module = Flat()
    signatures = {PIXELS: module.pixels, DEFAULT_SIGNATURE: module.image_bytes}
    tf.saved_model.save(module, str(path), signatures=signatures)
    return path


def pixels_only(model: Any, path: Path) -> Path:
    """``model`` exported with ``serving_pixels`` alone (no ``serving_default``)."""
    import tensorflow as tf

    from ml.model.export import PIXELS_SIGNATURE, _serving_module

    module = _serving_module(model)
    tf.saved_model.save(module, str(path), signatures={PIXELS_SIGNATURE: module.serve_pixels})
    return path


def _on_image(model: Any, image: Any, path: Path, name: str, act: Any, alone: bool = False) -> Path:
    """``model``, but a batch holding ``image`` ([28, 28, 1] in [0, 1]) runs ``act(out)``
    (``alone``: only a batch of that one image)."""
    import tensorflow as tf

    from ml.data.preprocess import standardize

    target = standardize(tf.constant(image, tf.float32))  # as the model sees it

    def body(x: Any, out: Any) -> Any:
        hit = tf.reduce_any(tf.reduce_all(tf.abs(x - target) < 1e-3, axis=[1, 2, 3]))
        if alone:
            hit = tf.logical_and(hit, tf.equal(tf.shape(x)[0], 1))
        return tf.cond(hit, lambda: act(out), lambda: out)

    return _export(model, path, body, name)


def rejects_image(model: Any, image: Any, path: Path) -> Path:
    """Its graph raises InvalidArgumentError for a batch holding ``image``: valid input
    that only this version refuses (the server once answered it 400, blaming the client)."""
    import tensorflow as tf

    def refuse(out: Any) -> Any:
        check = tf.debugging.Assert(False, ["this version refuses the image"])
        with tf.control_dependencies([check]):
            return tf.identity(out)

    return _on_image(model, image, path, "rejects_image", refuse)


def aborts_on_image(model: Any, image: Any, path: Path) -> Path:
    """Its process aborts (TensorFlow's Abort op) when ``image`` comes alone: a crash (the
    selection, which sends it only among a thousand, survives to publish it)."""
    import tensorflow as tf

    def abort(out: Any) -> Any:
        with tf.control_dependencies([tf.raw_ops.Abort(error_msg="a crashing version")]):
            return tf.identity(out)

    return _on_image(model, image, path, "aborts_on_image", abort, alone=True)


def slow_sometimes(model: Any, path: Path, share: float = 0.05, rounds: int = 1000) -> Path:
    """A slow tail: a ``share`` of its calls, drawn at random per call, first run ``rounds``
    chained 256x256 matrix products (CPU work: a few hundred ms on these machines), then
    answer as ``model`` does. Every answer is right; only its latency is not."""
    import tensorflow as tf

    def body(x: Any, out: Any) -> Any:
        def burn() -> Any:
            m = tf.random.uniform([256, 256]) / 256.0

            def step(i: Any, acc: Any) -> Any:
                return i + 1, tf.matmul(acc, m)

            _, acc = tf.while_loop(lambda i, _: i < rounds, step, (tf.constant(0), m))
            return out + 0.0 * tf.reduce_sum(acc)  # depends on the work, changes nothing

        return tf.cond(tf.random.uniform([]) < share, burn, lambda: out)

    return _export(model, path, body, "slow_sometimes")


def one_class_confused(
    model: Any, path: Path, wrong: int = 1, instead: int = 3, share: float = 0.25
) -> Path:
    """``model``, but of the images it puts in class ``wrong``, a ``share`` (chosen by each
    image's own pixels, so the same image is always answered the same way) are answered
    ``instead``: that class's recall drops by about ``share``, the total by a tenth of that."""
    import tensorflow as tf

    def body(x: Any, out: Any) -> Any:
        # A fraction in [0, 1) per image from its pixels: a fixed pseudo-random projection.
        weights = tf.random.stateless_uniform(x.shape[1:], seed=[7, 11])
        frac = tf.math.floormod(tf.reduce_sum(x * weights, axis=[1, 2, 3]) * 97.0, 1.0)
        hit = tf.logical_and(tf.equal(tf.argmax(out, axis=1), wrong), frac < share)
        swapped = tf.one_hot(tf.fill(tf.shape(hit), instead), tf.shape(out)[1], dtype=out.dtype)
        return tf.where(hit[:, None], swapped, out)

    return _export(model, path, body, "one_class_confused")
