"""Export contract: both signatures, preprocessing inside, same outputs as in memory."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from ml.data.dataset import read_idx
from ml.data.preprocess import standardize
from ml.model.architectures import build_model
from ml.model.export import export_model


@pytest.fixture(scope="module")
def real_test_images(shared_data_dir) -> np.ndarray:
    return read_idx(shared_data_dir / "t10k-images-idx3-ubyte.gz")[:32]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    # A randomly initialised model: a model trained on random labels would output a
    # constant and hide a preprocessing mismatch.
    model = build_model("cnn", seed=7)
    path = tmp_path_factory.mktemp("export") / "model"
    export_model(model, path)
    return model, tf.saved_model.load(str(path))


def test_signatures_match_the_contract(exported) -> None:
    _, loaded = exported
    assert set(loaded.signatures) == {"serving_default", "serving_pixels"}
    default = loaded.signatures["serving_default"]
    pixels = loaded.signatures["serving_pixels"]
    (_, default_inputs) = default.structured_input_signature
    (_, pixel_inputs) = pixels.structured_input_signature
    assert default_inputs["image_bytes"].dtype == tf.string
    assert default_inputs["image_bytes"].shape.as_list() == [None]
    assert pixel_inputs["pixels"].dtype == tf.float32
    assert pixel_inputs["pixels"].shape.as_list() == [None, 28, 28, 1]
    for sig in (default, pixels):
        out = sig.structured_outputs["probabilities"]
        assert out.dtype == tf.float32 and out.shape.as_list() == [None, 10]


def test_png_bytes_and_pixels_give_the_in_memory_outputs(exported, real_test_images) -> None:
    """Both signatures take [0, 1] pixels (or images) and standardise them as training did."""
    model, loaded = exported
    x = real_test_images[..., None]
    expected = model(standardize(x.astype(np.float32) / 255.0), training=False).numpy()
    assert expected.std(axis=0).max() > 1e-3, "outputs must vary across images"
    pixels = loaded.signatures["serving_pixels"](pixels=tf.constant(x / 255.0, tf.float32))
    np.testing.assert_allclose(pixels["probabilities"].numpy(), expected, atol=1e-6)
    pngs = tf.stack([tf.io.encode_png(img) for img in x])
    from_bytes = loaded.signatures["serving_default"](image_bytes=pngs)["probabilities"].numpy()
    np.testing.assert_allclose(from_bytes, expected, atol=1e-6)
    assert (from_bytes.argmax(1) == expected.argmax(1)).all()


def test_rgb_jpeg_and_other_sizes_are_decoded_to_28x28_gray(exported, real_test_images) -> None:
    model, loaded = exported
    gray = real_test_images[:4, :, :, None]
    rgb_png = [tf.io.encode_png(np.repeat(img, 3, axis=-1)) for img in gray]
    big = [tf.io.encode_png(np.kron(img, np.ones((4, 4, 1), np.uint8))) for img in gray]
    jpeg = [tf.io.encode_jpeg(img, quality=100) for img in gray]
    expected = model(standardize(gray.astype(np.float32) / 255.0), training=False).numpy()
    for name, batch in {"rgb png": rgb_png, "112x112 png": big, "jpeg": jpeg}.items():
        out = loaded.signatures["serving_default"](image_bytes=tf.stack(batch))
        probs = out["probabilities"].numpy()
        assert probs.shape == (4, 10), name
        np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5, err_msg=name)
        # Colour conversion, resizing and JPEG change pixels slightly, not the answer.
        np.testing.assert_allclose(probs, expected, atol=0.05, err_msg=name)
