"""The input pipeline (ml.data.pipeline): batching and standardising."""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from ml.data.pipeline import make_dataset  # noqa: E402
from ml.data.preprocess import PIXEL_MEAN, PIXEL_STD  # noqa: E402


def _uint8_dataset(n: int) -> tf.data.Dataset:
    images = np.full((n, 28, 28, 1), 255, np.uint8)
    images[:, 0:3, :, :] = 0  # a dark band across the top rows
    return tf.data.Dataset.from_tensor_slices((images, np.arange(n, dtype=np.int64)))


def test_evaluation_pipeline_is_one_standardised_pass_of_whole_batches():
    ds = make_dataset(_uint8_dataset(100), global_batch_size=32, training=False)
    batches = list(ds)
    assert len(batches) == 3  # the partial batch of 4 is dropped
    expected = (np.where(np.arange(28) < 3, 0.0, 1.0) - PIXEL_MEAN) / PIXEL_STD
    for images, _ in batches:
        np.testing.assert_allclose(images.numpy()[0, :, 0, 0], expected, rtol=1e-5)


def test_training_pipeline_repeats_and_shuffles_whole_batches_the_same_way_per_seed():
    def labels(seed: int) -> list[int]:
        ds = make_dataset(_uint8_dataset(64), global_batch_size=16, training=True, seed=seed)
        return [int(v) for _, y in ds.take(8) for v in y.numpy()]

    first = labels(1)
    assert len(first) == 128 and sorted(first) == sorted(list(range(64)) * 2)  # two passes
    assert first == labels(1) and first != labels(2)
