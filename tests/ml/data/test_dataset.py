"""ml.data.dataset: the published constants, IDX reading (and each way a file can be bad),
load_arrays on synthetic and real files, the tfds preparation of a volume, and load_split
from a prepared volume or the raw files. (The splits themselves: test_data_splits.py.)"""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np
import pytest

from ml.data import dataset
from tests.support.listing import leftovers as _leftovers

pytestmark = pytest.mark.usefixtures("isolated_data_places")


# --------------------------------------------------------------------------- constants


def test_constants_match_the_published_files():
    assert len(dataset.CLASS_NAMES) == 10
    assert dataset.CLASS_NAMES[0] == "T-shirt/top" and dataset.CLASS_NAMES[9] == "Ankle boot"
    assert set(dataset.FILES) == {
        "train-images-idx3-ubyte.gz",
        "train-labels-idx1-ubyte.gz",
        "t10k-images-idx3-ubyte.gz",
        "t10k-labels-idx1-ubyte.gz",
    }
    assert dataset.FILES["train-images-idx3-ubyte.gz"].size == 26_421_880
    assert all(len(spec.sha256) == 64 for spec in dataset.FILES.values())


# --------------------------------------------------------------------------- IDX reading


def _idx(magic: int, dims: tuple[int, ...], payload: bytes) -> bytes:
    return struct.pack(f">I{len(dims)}I", magic, *dims) + payload


def _write(path: Path, raw: bytes, compress: bool = True) -> Path:
    path.write_bytes(gzip.compress(raw) if compress else raw)
    return path


def test_read_idx_images_gz_and_labels_plain(tmp_path):
    pixels = bytes(range(2 * 3 * 4))
    images = dataset.read_idx(_write(tmp_path / "i.gz", _idx(0x803, (2, 3, 4), pixels)))
    assert images.dtype == np.uint8 and images.shape == (2, 3, 4)
    assert images[1, 2, 3] == 23
    images[0, 0, 0] = 7  # writable
    labels = dataset.read_idx(_write(tmp_path / "l", _idx(0x801, (3,), b"\x01\x02\x09"), False))
    assert labels.tolist() == [1, 2, 9]


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (_idx(0x802, (3, 1), b"\0\0\0"), r"magic 0x00000802"),
        (_idx(0x00000D03, (1, 1, 1), b"\0"), r"magic 0x00000d03"),  # float32 images
        (_idx(0x803, (2, 2, 2), b"\0" * 7), r"truncated: dimensions \(2, 2, 2\) need 8 .* found 7"),
        (_idx(0x801, (3,), b"\0" * 4), r"extra data: dimensions \(3,\) need 3 .* found 4"),
        (struct.pack(">II", 0x803, 2), r"header truncated"),
        (b"\0\0", r"too short"),
    ],
    ids=["wrong type", "float data", "truncated payload", "extra bytes", "short header", "tiny"],
)
def test_read_idx_rejects(tmp_path, raw, message):
    path = _write(tmp_path / "bad-idx1-ubyte.gz", raw)
    with pytest.raises(dataset.DataError, match=message) as err:
        dataset.read_idx(path)
    assert str(path) in str(err.value)


@pytest.mark.parametrize("damage", ["cut stream", "garbage after header", "bad crc"])
def test_read_idx_bad_gzip(tmp_path, damage):
    good = gzip.compress(_idx(0x801, (100,), bytes(100)))
    if damage == "cut stream":
        raw = good[: len(good) // 2]
    elif damage == "garbage after header":
        raw = good[:10] + b"\xff" * 40
    else:
        raw = good[:-8] + b"\0\0\0\0" + good[-4:]
    path = tmp_path / "bad.gz"
    path.write_bytes(raw)
    with pytest.raises(dataset.DataError, match=r"corrupt gzip") as err:
        dataset.read_idx(path)
    assert str(path) in str(err.value)


def test_read_idx_missing_file(tmp_path):
    with pytest.raises(dataset.DataError, match=r"cannot read"):
        dataset.read_idx(tmp_path / "nope.gz")


# --------------------------------------------------------------------------- load_arrays


def _synthetic_raw_dir(directory: Path, n_train=6, n_test=4, train_labels=None, size=28) -> Path:
    """Four small IDX .gz files with the real names (checksums will not match)."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for prefix, n, n_labels in (
        ("train", n_train, n_train if train_labels is None else train_labels),
        ("t10k", n_test, n_test),
    ):
        images = rng.integers(0, 256, (n, size, 28), dtype=np.uint8)
        labels = rng.integers(0, 10, n_labels, dtype=np.uint8)
        _write(
            directory / f"{prefix}-images-idx3-ubyte.gz",
            _idx(0x803, images.shape, images.tobytes()),
        )
        _write(
            directory / f"{prefix}-labels-idx1-ubyte.gz",
            _idx(0x801, labels.shape, labels.tobytes()),
        )
    return directory


def test_load_arrays_synthetic(tmp_path):
    (x_train, y_train), (x_test, y_test) = dataset.load_arrays(
        _synthetic_raw_dir(tmp_path / "raw"), verify=False
    )
    assert x_train.shape == (6, 28, 28) and y_train.shape == (6,)
    assert x_test.shape == (4, 28, 28) and y_test.shape == (4,)
    assert {a.dtype for a in (x_train, y_train, x_test, y_test)} == {np.dtype(np.uint8)}


def test_load_arrays_count_mismatch(tmp_path):
    raw = _synthetic_raw_dir(tmp_path / "raw", train_labels=5)
    with pytest.raises(dataset.DataError, match=r"train split has 6 images .* but 5 labels"):
        dataset.load_arrays(raw, verify=False)


def test_load_arrays_wrong_image_size(tmp_path):
    raw = _synthetic_raw_dir(tmp_path / "raw", size=27)
    with pytest.raises(dataset.DataError, match=r"\(N, 28, 28\), got \(6, 27, 28\)"):
        dataset.load_arrays(raw, verify=False)


def test_load_arrays_verify_rejects_synthetic_files(tmp_path):
    raw = _synthetic_raw_dir(tmp_path / "raw")
    with pytest.raises(dataset.DataError, match=r"not the original Fashion-MNIST file"):
        dataset.load_arrays(raw)


def test_load_arrays_missing_file(tmp_path):
    raw = _synthetic_raw_dir(tmp_path / "raw")
    (raw / "t10k-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(dataset.DataError, match=r"t10k-labels-idx1-ubyte.gz does not exist"):
        dataset.load_arrays(raw, verify=False)


def test_load_arrays_real(shared_data_dir):
    (x_train, y_train), (x_test, y_test) = dataset.load_arrays(shared_data_dir)
    assert x_train.shape == (60000, 28, 28) and x_test.shape == (10000, 28, 28)
    assert np.bincount(y_train).tolist() == [6000] * 10
    assert np.bincount(y_test).tolist() == [1000] * 10


# --------------------------------------------------------------------------- tfds


def _snapshot(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in sorted(root.rglob("*"))}


def test_prepare_real_files(prepared_volume, shared_data_dir):
    import tensorflow as tf
    import tensorflow_datasets as tfds

    volume, result, lines = prepared_volume
    assert result is True
    assert any(str(shared_data_dir) in line and "found" in line for line in lines)
    assert lines[-1].startswith("prepared fashion_mnist at ")
    assert dataset.is_prepared(volume)
    # Only the dataset is left: no temporary download dir, nothing beside datasets/.
    assert _leftovers(volume) == ["datasets"]
    assert _leftovers(dataset.datasets_dir(volume)) == ["fashion_mnist"]

    kwargs = dict(data_dir=str(dataset.datasets_dir(volume)), download=False, as_supervised=True)
    train = tfds.load("fashion_mnist", split="train", **kwargs)
    test = tfds.load("fashion_mnist", split="test", **kwargs)
    assert int(train.cardinality()) == 60000
    assert sum(1 for _ in test) == 10000
    image, label = next(iter(test))
    assert image.shape == (28, 28, 1) and image.dtype == tf.uint8
    assert label.dtype == tf.int64


def test_prepare_again_does_nothing(prepared_volume, shared_data_dir):
    volume, _, _ = prepared_volume
    before = _snapshot(volume)
    lines: list[str] = []
    assert dataset.prepare(volume, source_dir=shared_data_dir, log=lines.append) is False
    assert lines == [
        f"dataset already prepared at {dataset.datasets_dir(volume) / 'fashion_mnist'}"
    ]
    assert _snapshot(volume) == before


def test_load_split_from_prepared_volume(prepared_volume):
    import tensorflow as tf

    volume, _, _ = prepared_volume
    lines: list[str] = []
    ds = dataset.load_split(volume, "test", log=lines.append)
    assert lines == []  # no fallback
    assert int(ds.cardinality()) == 10000
    image_spec, label_spec = ds.element_spec
    assert image_spec.shape == (28, 28, 1) and image_spec.dtype == tf.uint8
    assert label_spec.shape == () and label_spec.dtype == tf.int64


def test_is_prepared_false_for_empty_volume(tmp_path):
    assert dataset.is_prepared(tmp_path) is False
    assert dataset.datasets_dir(tmp_path) == tmp_path / "datasets"


@pytest.mark.parametrize("via", ["source_dir", "DISTML_DATA_DIR"])
def test_load_split_falls_back_to_raw_files(shared_data_dir, tmp_path, monkeypatch, via):
    import tensorflow as tf

    if via == "DISTML_DATA_DIR":
        monkeypatch.setenv("DISTML_DATA_DIR", str(shared_data_dir))
        source_dir = None
    else:
        source_dir = shared_data_dir
    lines: list[str] = []
    counts = {}
    for split in ("train", "test"):
        ds = dataset.load_split(tmp_path / "volume", split, source_dir=source_dir, log=lines.append)
        counts[split] = int(ds.cardinality())
        image, label = next(iter(ds))
        assert image.shape == (28, 28, 1) and image.dtype == tf.uint8
        assert label.shape == () and label.dtype == tf.int64
    assert counts == {"train": 54961, "test": 10000}
    assert "no prepared dataset" in lines[0] and "python -m ml ingest" in lines[0]
    origin = "--source-dir" if via == "source_dir" else via
    assert any(f"({origin}): found" in line for line in lines)
    assert not (tmp_path / "volume").exists()  # reading never writes to the volume


def test_load_split_unknown_split(tmp_path):
    with pytest.raises(
        dataset.DataError, match=r"unknown split 'val': use one of train, validation, test"
    ):
        dataset.load_split(tmp_path, "val")
