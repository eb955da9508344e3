"""The splits (ml.data.dataset.SPLITS): train and validation partition the 60,000 training images,
the validation split is balanced, and every reader gets the same images: a prepared volume
and the raw-file fallback, and every process (each worker of a job loads its own copy)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ml.data import dataset

REPO = Path(__file__).resolve().parents[3]

# The validation split's examples per class on the checksummed files (ml.data.dataset's comment).
VALIDATION_CLASS_COUNTS = [498, 475, 553, 517, 519, 497, 513, 496, 474, 497]


def example_keys(volume: Path, split: str, source_dir: Path | None = None) -> list[bytes]:
    """One SHA-256 per (image, label) of ``split``, sorted (the order is not the split)."""
    ds = dataset.load_split(volume, split, source_dir=source_dir, log=lambda m: None)
    return sorted(
        hashlib.sha256(x.tobytes() + bytes([int(y)])).digest()
        for images, labels in ds.batch(10_000).as_numpy_iterator()
        for x, y in zip(images, labels, strict=True)
    )


def split_digest(volume: str, split: str, source_dir: str) -> str:
    """A digest of the split's content (what a subprocess prints for comparison)."""
    return hashlib.sha256(b"".join(example_keys(Path(volume), split, Path(source_dir)))).hexdigest()


@pytest.fixture(scope="module")
def raw_keys(tmp_path_factory, shared_data_dir) -> dict[str, list[bytes]]:
    """Each split's keys, read from the raw files (no prepared dataset on the volume)."""
    volume = tmp_path_factory.mktemp("unprepared")
    return {s: example_keys(volume, s, shared_data_dir) for s in dataset.SPLITS}


def test_train_and_validation_partition_the_training_file(raw_keys, shared_data_dir):
    (x, y), _ = dataset.load_arrays(shared_data_dir)
    whole = sorted(
        hashlib.sha256(img[..., None].tobytes() + bytes([int(lab)])).digest()
        for img, lab in zip(x, y, strict=True)
    )
    train, validation = set(raw_keys["train"]), set(raw_keys["validation"])
    assert not train & validation, "an image is in both the training and validation splits"
    assert sorted(train | validation) == whole, "together they are the 60,000 training images"
    assert {s: len(k) for s, k in raw_keys.items()} == dict(dataset.SPLIT_EXAMPLES)
    assert len(whole) == 60_000


def test_the_validation_split_is_balanced(tmp_path, shared_data_dir):
    ds = dataset.load_split(tmp_path, "validation", source_dir=shared_data_dir, log=lambda m: None)
    assert int(ds.cardinality()) == dataset.SPLIT_EXAMPLES["validation"]
    labels = np.concatenate([y for _, y in ds.batch(10_000).as_numpy_iterator()])
    counts = np.bincount(labels, minlength=dataset.NUM_CLASSES).tolist()
    assert counts == VALIDATION_CLASS_COUNTS
    assert min(counts) / len(labels) > 0.09 and max(counts) / len(labels) < 0.11


def test_a_prepared_volume_gives_the_same_splits_as_the_raw_files(prepared_volume, raw_keys):
    """tfds reorders the examples when it prepares them; the splits are the same images."""
    volume, _, _ = prepared_volume
    for split in dataset.SPLITS:
        assert example_keys(volume, split) == raw_keys[split], split


def test_another_process_loads_the_same_splits(tmp_path, shared_data_dir, raw_keys):
    """Each worker of a job loads the splits in its own process: they must agree."""
    script = (
        "import sys; from tests.ml.data.test_dataset_splits import split_digest; "
        f"print(*(split_digest({str(tmp_path)!r}, s, {str(shared_data_dir)!r}) "
        "for s in ('train', 'validation')))"
    )
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(REPO))
    out = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout.split()[-2:]
    expected = [hashlib.sha256(b"".join(raw_keys[s])).hexdigest() for s in ("train", "validation")]
    assert out == expected
