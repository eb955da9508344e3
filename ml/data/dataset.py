"""Fashion-MNIST: read the raw files (found and checked by ``ml.data.raw``); prepare and load the
tfds dataset.

tensorflow-datasets is the on-volume format: :func:`prepare` hands the located files to the tfds
``fashion_mnist`` builder as its manual dir and prepares it in ``<volume>/datasets``;
:func:`load_split` reads it back (or, when a volume holds no prepared dataset, builds the same
``tf.data.Dataset`` straight from the raw files) as one of three splits: ``train`` and
``validation`` (disjoint, together the published training file; see SPLITS) and ``test``.

Every failure a user can cause or fix raises :class:`ml.data.raw.DataError`, whose message says
what is wrong and how to fix it. TensorFlow and tensorflow-datasets are imported inside the
functions that use them, so importing this module is cheap.
"""

from __future__ import annotations

import gzip
import os
import shutil
import struct
import tempfile
import time
import zlib
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING

import numpy as np

from ml import contract
from ml.contract import RAW_FILES
from ml.data.raw import FILES, FIXES, DataError, check_file, locate_raw_files, mismatch_fix

if TYPE_CHECKING:
    import tensorflow as tf

Log = Callable[[str], None]

CLASS_NAMES: tuple[str, ...] = (
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
)


_TRAIN_IMAGES, _TRAIN_LABELS, _TEST_IMAGES, _TEST_LABELS = RAW_FILES

#: split -> (images file, labels file)
_SPLIT_FILES: Mapping[str, tuple[str, str]] = MappingProxyType(
    {"train": (_TRAIN_IMAGES, _TRAIN_LABELS), "test": (_TEST_IMAGES, _TEST_LABELS)}
)

TFDS_NAME = "fashion_mnist"
IMAGE_SHAPE = (28, 28)
NUM_CLASSES = 10

# The splits :func:`load_split` serves. The published training file (60,000 images) is cut
# in two by a rule on each image's content: ``validation`` holds the images whose FarmHash
# fingerprint (``tf.fingerprint``, stable across platforms and TensorFlow versions), read
# as a big-endian number from its first 4 bytes, is divisible by VALIDATION_MODULUS;
# ``train`` holds the rest. A rule on content, not a position, because tfds reorders the
# examples when it prepares the dataset (by a hash of each example's index), so "the last
# 5,000" would be different images on a prepared volume and in the raw-file fallback. The
# rule gives both paths, and every worker, the same two sets. On the checksummed files it
# selects 5,039 images (8.4%), 474-553 per class (9.4-11.0% each: balanced); a test holds
# these counts. ``test`` (10,000) is the published test file, used only for reporting.
SPLITS: tuple[str, ...] = ("train", "validation", "test")
VALIDATION_MODULUS = 12
SPLIT_EXAMPLES: Mapping[str, int] = MappingProxyType(
    {"train": 54_961, "validation": 5_039, "test": 10_000}
)
_RULE_BATCH = 4_096


def lineage() -> dict[str, object]:
    """What a model's data is, for its publish.json: the dataset, the SHA-256 of each raw
    file (every path checks them before use: ml.data.raw), and the splits."""
    return {
        "name": TFDS_NAME,
        "sha256": {name: FILES[name].sha256 for name in RAW_FILES},
        "split_examples": dict(SPLIT_EXAMPLES),
        "validation_rule": f"fingerprint64(image)[:4] % {VALIDATION_MODULUS} == 0 (ml.data)",
    }


_IDX_LABELS_MAGIC = 0x00000801
_IDX_IMAGES_MAGIC = 0x00000803

# --------------------------------------------------------------------------- reading


def read_idx(path: str | os.PathLike[str]) -> np.ndarray:
    """Read an IDX file (gzip-compressed or plain) into a uint8 array.

    Accepts labels (magic 0x00000801, 1-D) and images (magic 0x00000803, 3-D). The payload must
    hold exactly the product of the dimensions in bytes.

    Raises:
        DataError: unreadable file, corrupt gzip, wrong magic, short header, or a payload that is
            shorter or longer than the header says.
    """
    path = Path(path)
    fix = f"Delete {path} and fetch the original again."
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise DataError(f"cannot read {path}: {e}") from e
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as e:
            raise DataError(f"{path}: corrupt gzip data ({e}). {fix}") from e
    if len(raw) < 4:
        raise DataError(f"{path}: too short for an IDX file ({len(raw)} bytes). {fix}")
    (magic,) = struct.unpack(">I", raw[:4])
    if magic not in (_IDX_LABELS_MAGIC, _IDX_IMAGES_MAGIC):
        raise DataError(
            f"{path}: not an IDX uint8 labels/images file: magic 0x{magic:08x}, expected "
            f"0x{_IDX_LABELS_MAGIC:08x} (labels) or 0x{_IDX_IMAGES_MAGIC:08x} (images). {fix}"
        )
    ndim = magic & 0xFF
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DataError(
            f"{path}: header truncated: {ndim} dimensions need {header} bytes, "
            f"file has {len(raw)}. {fix}"
        )
    dims = struct.unpack(f">{ndim}I", raw[4:header])
    expected = int(np.prod(dims, dtype=np.int64))
    actual = len(raw) - header
    if actual != expected:
        kind = "truncated" if actual < expected else "extra data"
        raise DataError(
            f"{path}: {kind}: dimensions {dims} need {expected:,} payload bytes, "
            f"found {actual:,}. {fix}"
        )
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(dims).copy()


def _read_split(raw_dir: Path, split: str, verify: bool) -> tuple[np.ndarray, np.ndarray]:
    """Read (images, labels) of one split from ``raw_dir``, checking they belong together."""
    images_name, labels_name = _SPLIT_FILES[split]
    for name in (images_name, labels_name):
        path = raw_dir / name
        if not path.is_file():
            raise DataError(f"{path} does not exist. {FIXES}")
        if verify:
            check_file(path, FILES[name], mismatch_fix(path))
    images = read_idx(raw_dir / images_name)
    labels = read_idx(raw_dir / labels_name)
    if images.ndim != 3 or images.shape[1:] != IMAGE_SHAPE:
        raise DataError(
            f"{raw_dir / images_name}: expected images of shape (N, 28, 28), got {images.shape}"
        )
    if labels.ndim != 1:
        raise DataError(f"{raw_dir / labels_name}: expected 1-D labels, got {labels.shape}")
    if len(images) != len(labels):
        raise DataError(
            f"{raw_dir}: {split} split has {len(images):,} images ({images_name}) but "
            f"{len(labels):,} labels ({labels_name}): the files do not belong together"
        )
    if labels.size and int(labels.max()) >= NUM_CLASSES:
        raise DataError(
            f"{raw_dir / labels_name}: label {int(labels.max())} out of range 0..{NUM_CLASSES - 1}"
        )
    return images, labels


def load_arrays(
    raw_dir: str | os.PathLike[str], verify: bool = True
) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """Read ``((x_train, y_train), (x_test, y_test))`` from the four files in ``raw_dir``.

    Images are uint8 ``(N, 28, 28)``, labels uint8 ``(N,)`` (as ``keras.datasets`` returns them).
    With ``verify`` the files' sizes and SHA-256 are checked first; pass ``False`` for synthetic
    test files.
    """
    raw_dir = Path(raw_dir)
    train = _read_split(raw_dir, "train", verify)
    test = _read_split(raw_dir, "test", verify)
    return train, test


# --------------------------------------------------------------------------- tfds


def datasets_dir(volume: str | os.PathLike[str]) -> Path:
    """The tfds ``data_dir`` on a volume: ``<volume>/datasets`` (``contract.datasets_dir``)."""
    return Path(contract.datasets_dir(os.fspath(volume)))


def _builder(data_dir: Path):  # -> tfds.core.DatasetBuilder
    import tensorflow_datasets as tfds

    return tfds.builder(TFDS_NAME, data_dir=str(data_dir))


def is_prepared(volume: str | os.PathLike[str]) -> bool:
    """Whether tfds ``fashion_mnist`` (the builder's current version) is prepared on ``volume``."""
    data_dir = datasets_dir(volume)
    if not (data_dir / TFDS_NAME).is_dir():  # cheap answer without importing tfds
        return False
    return bool(_builder(data_dir).is_prepared())


def prepare(
    volume: str | os.PathLike[str],
    source_dir: str | os.PathLike[str] | None = None,
    mirror: str | None = None,
    log: Log = print,
) -> bool:
    """Prepare tfds ``fashion_mnist`` in ``<volume>/datasets`` from the raw files.

    Does nothing (and returns False) if it is already prepared. Otherwise locates the raw files
    (:func:`locate_raw_files`), hands them to the tfds builder as its manual dir, and returns True.
    tfds's extracted copies go to a temporary directory on the volume that is always removed.

    Raises:
        DataError: the raw files cannot be found or fetched, or tfds fails to prepare them.
    """
    data_dir = datasets_dir(volume)
    if is_prepared(volume):
        log(f"dataset already prepared at {data_dir / TFDS_NAME}")
        return False
    raw_dir = locate_raw_files(source_dir=source_dir, mirror=mirror, log=log)

    import tensorflow_datasets as tfds

    start = time.monotonic()
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".ingest-", dir=data_dir))
    except OSError as e:
        raise DataError(
            f"cannot write to {data_dir}: {e}. Check the volume is mounted writable."
        ) from e
    log(f"data: preparing tfds {TFDS_NAME} in {data_dir} from {raw_dir}")
    try:
        builder = _builder(data_dir)
        builder.download_and_prepare(
            download_dir=str(tmp),
            download_config=tfds.download.DownloadConfig(
                manual_dir=str(raw_dir), try_download_gcs=False
            ),
        )
    except Exception as e:  # tfds raises many types; all mean the same thing to the user
        raise DataError(
            f"tfds could not prepare {TFDS_NAME} in {data_dir} from {raw_dir}: "
            f"{type(e).__name__}: {e}. Check free space on the volume; if the raw files are "
            f"suspect, delete them and run again."
        ) from e
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if not builder.is_prepared():
        raise DataError(f"tfds reported success but {builder.data_dir} is not a prepared dataset")
    log(f"prepared {TFDS_NAME} at {builder.data_dir} in {time.monotonic() - start:.1f} s")
    return True


def load_split(
    volume: str | os.PathLike[str],
    split: str,
    source_dir: str | os.PathLike[str] | None = None,
    log: Log = print,
) -> tf.data.Dataset:
    """Return split ``"train"``, ``"validation"`` or ``"test"`` (see SPLITS) as a dataset of
    ``(image, label)``.

    ``image`` is uint8 ``[28, 28, 1]``, ``label`` an int64 scalar. Read with tfds from
    ``<volume>/datasets`` when prepared there; otherwise (logged) built from the raw files found
    by :func:`locate_raw_files`, with the same element spec.

    Raises:
        DataError: unknown split, or no usable data.
    """
    if split not in SPLITS:
        raise DataError(f"unknown split {split!r}: use one of {', '.join(SPLITS)}")
    source = _read_source(volume, "test" if split == "test" else "train", source_dir, log)
    if split == "test":
        return source
    import tensorflow as tf

    # Vectorised: the rule on a batch at a time, then back to single examples (a per-example
    # filter took ~20 s over the 60,000 images).
    wanted = split == "validation"

    def keep(images: tf.Tensor, labels: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        mask = tf.equal(in_validation(images), wanted)
        return tf.boolean_mask(images, mask), tf.boolean_mask(labels, mask)

    ds = source.batch(_RULE_BATCH).map(keep).unbatch()
    # The size of what a rule keeps is unknown to tf.data; the count on the checksummed
    # files is known, and asserting it fails loudly should the rule ever select other images.
    return ds.apply(tf.data.experimental.assert_cardinality(SPLIT_EXAMPLES[split]))


def in_validation(images: tf.Tensor) -> tf.Tensor:
    """Which of ``images`` (uint8 ``[N, 28, 28, 1]``) belong to the validation split: bool
    ``[N]`` (the rule is in the comment on SPLITS)."""
    import tensorflow as tf

    flat = tf.reshape(images, [tf.shape(images)[0], -1])
    digest = tf.cast(tf.fingerprint(flat)[:, :4], tf.int64)  # FarmHash Fingerprint64 bytes
    number = ((digest[:, 0] * 256 + digest[:, 1]) * 256 + digest[:, 2]) * 256 + digest[:, 3]
    return tf.equal(number % VALIDATION_MODULUS, 0)


def _read_source(
    volume: str | os.PathLike[str],
    split: str,
    source_dir: str | os.PathLike[str] | None,
    log: Log,
) -> tf.data.Dataset:
    """A published file pair (``"train"``: 60,000, ``"test"``: 10,000): from tfds when
    prepared on the volume, else straight from the raw files."""
    import tensorflow as tf

    data_dir = datasets_dir(volume)
    if is_prepared(volume):
        import tensorflow_datasets as tfds

        try:
            return tfds.load(
                TFDS_NAME, split=split, data_dir=str(data_dir), download=False, as_supervised=True
            )
        except Exception as e:  # tfds raises many types
            raise DataError(
                f"cannot read {split} split of {TFDS_NAME} from {data_dir}: "
                f"{type(e).__name__}: {e}. Delete {data_dir / TFDS_NAME} and run "
                f"`python -m ml ingest --volume {volume}` again."
            ) from e
    log(
        f"data: no prepared dataset in {data_dir}; reading the raw files instead "
        f"(`python -m ml ingest --volume {volume}` prepares it)"
    )
    raw_dir = locate_raw_files(source_dir=source_dir, log=log)
    images, labels = _read_split(raw_dir, split, verify=False)  # located files are verified
    return tf.data.Dataset.from_tensor_slices((images[..., np.newaxis], labels.astype(np.int64)))
