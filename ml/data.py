"""Fashion-MNIST: find, fetch, verify and read the raw files; prepare and load the tfds dataset.

The raw data is the four original IDX ``.gz`` files, each checked against its published size and
SHA-256. They are looked for, in order, in:

1. ``--source-dir`` (the ``source_dir`` argument), else ``$DISTML_DATA_DIR`` if set;
2. ``/usr/share/datasets/fashion-mnist/`` (Debian's ``dataset-fashion-mnist`` package);
3. ``~/.keras/datasets/fashion-mnist/`` (Keras's own cache, same file names);

and, failing all three, downloaded from a mirror (``--mirror`` / ``$DISTML_DATA_MIRROR``,
default: the official URLs) into the Keras cache.

tensorflow-datasets is the on-volume format: :func:`prepare` hands the located files to the tfds
``fashion_mnist`` builder as its manual dir and prepares it in ``<volume>/datasets``;
:func:`load_split` reads it back (or, when a volume holds no prepared dataset, builds the same
``tf.data.Dataset`` straight from the raw files).

Every failure a user can cause or fix raises :class:`DataError`, whose message says what is wrong
and how to fix it. TensorFlow and tensorflow-datasets are imported inside the functions that use
them, so importing this module is cheap.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import http.client
import os
import shutil
import struct
import tempfile
import time
import urllib.error
import urllib.request
import zlib
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from ml import contract
from ml.contract import DATA_DIR_ENV, RAW_FILES

if TYPE_CHECKING:
    import tensorflow as tf

__all__ = [
    "CLASS_NAMES",
    "DEBIAN_DIR",
    "DEFAULT_MIRROR",
    "DOWNLOAD_TIMEOUT",
    "FILES",
    "KERAS_DIR",
    "DataError",
    "FileSpec",
    "datasets_dir",
    "is_prepared",
    "load_arrays",
    "load_split",
    "locate_raw_files",
    "prepare",
    "read_idx",
    "search_places",
]

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


class FileSpec(NamedTuple):
    """Published size and SHA-256 of one original Fashion-MNIST file."""

    size: int
    sha256: str


_TRAIN_IMAGES, _TRAIN_LABELS, _TEST_IMAGES, _TEST_LABELS = RAW_FILES

#: The four original files (names: ``contract.RAW_FILES``), name -> (size in bytes, sha256).
#: Same values as tfds's ``url_checksums/fashion_mnist.txt``. Download order is this order.
FILES: Mapping[str, FileSpec] = MappingProxyType(
    {
        _TRAIN_IMAGES: FileSpec(
            26_421_880, "3aede38d61863908ad78613f6a32ed271626dd12800ba2636569512369268a84"
        ),
        _TRAIN_LABELS: FileSpec(
            29_515, "a04f17134ac03560a47e3764e11b92fc97de4d1bfaf8ba1a3aa29af54cc90845"
        ),
        _TEST_IMAGES: FileSpec(
            4_422_102, "346e55b948d973a97e58d2351dde16a484bd415d4595297633bb08f03db6a073"
        ),
        _TEST_LABELS: FileSpec(
            5_148, "67da17c76eaffca5446c3361aaab5c3cd6d1c2608764d35dfb1850b086bf8dd5"
        ),
    }
)

#: split -> (images file, labels file)
_SPLIT_FILES: Mapping[str, tuple[str, str]] = MappingProxyType(
    {"train": (_TRAIN_IMAGES, _TRAIN_LABELS), "test": (_TEST_IMAGES, _TEST_LABELS)}
)

DEFAULT_MIRROR = "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"
MIRROR_ENV = "DISTML_DATA_MIRROR"
#: Seconds to wait for the mirror to connect or send the next chunk.
DOWNLOAD_TIMEOUT = 30.0

#: Where Debian's ``dataset-fashion-mnist`` package installs the files.
DEBIAN_DIR = Path("/usr/share/datasets/fashion-mnist")
#: Keras's cache for ``keras.datasets.fashion_mnist`` (``~`` is expanded when used) and the
#: default download target.
KERAS_DIR = Path("~/.keras/datasets/fashion-mnist")

TFDS_NAME = "fashion_mnist"
IMAGE_SHAPE = (28, 28)
NUM_CLASSES = 10

_IDX_LABELS_MAGIC = 0x00000801
_IDX_IMAGES_MAGIC = 0x00000803
_CHUNK = 1 << 20

_FIXES = (
    "Fix one of:\n"
    f"  - pass --source-dir DIR (or set {DATA_DIR_ENV}=DIR) to a directory holding the four "
    "files\n"
    "  - apt-get install dataset-fashion-mnist  (installs them in "
    f"{DEBIAN_DIR}/)\n"
    f"  - pass --mirror URL (or set {MIRROR_ENV}=URL) to a reachable copy of {DEFAULT_MIRROR}"
)


class DataError(RuntimeError):
    """A data problem a user can fix; the message says what is wrong and how to fix it."""


# --------------------------------------------------------------------------- locating


def _places(source_dir: str | os.PathLike[str] | None) -> list[tuple[Path, str]]:
    """The search order as (directory, why it is searched) pairs, duplicates removed."""
    places: list[tuple[Path, str]] = []
    if source_dir is not None:
        places.append((Path(source_dir).expanduser(), "--source-dir"))
    elif os.environ.get(DATA_DIR_ENV):
        places.append((Path(os.environ[DATA_DIR_ENV]).expanduser(), DATA_DIR_ENV))
    places.append((Path(DEBIAN_DIR).expanduser(), "Debian package dataset-fashion-mnist"))
    places.append((Path(KERAS_DIR).expanduser(), "Keras cache"))
    seen: set[Path] = set()
    unique = []
    for path, origin in places:
        if path not in seen:
            seen.add(path)
            unique.append((path, origin))
    return unique


def search_places(source_dir: str | os.PathLike[str] | None = None) -> list[Path]:
    """Return the directories searched for the raw files, in order.

    ``source_dir`` if given, else ``$DISTML_DATA_DIR`` if set; then :data:`DEBIAN_DIR`; then
    :data:`KERAS_DIR`. The download from a mirror comes after these and is not listed.
    """
    return [path for path, _ in _places(source_dir)]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _check_file(path: Path, spec: FileSpec, fix: str) -> None:
    """Raise DataError unless ``path`` has the published size and SHA-256."""
    try:
        size = path.stat().st_size
        digest = _sha256(path)
    except OSError as e:
        raise DataError(f"cannot read {path}: {e}. {fix}") from e
    if size != spec.size or digest != spec.sha256:
        raise DataError(
            f"{path} is not the original Fashion-MNIST file: expected {spec.size:,} bytes with "
            f"sha256 {spec.sha256}, found {size:,} bytes with sha256 {digest}. {fix}"
        )


def _mismatch_fix(path: Path) -> str:
    if path.parent == Path(DEBIAN_DIR).expanduser():
        return "Reinstall it: apt-get install --reinstall dataset-fashion-mnist."
    return (
        f"Delete {path} and run again to re-fetch it (or replace it with the original from "
        f"{DEFAULT_MIRROR}{path.name})."
    )


def _resolve_mirror(mirror: str | None) -> str:
    url = mirror or os.environ.get(MIRROR_ENV) or DEFAULT_MIRROR
    return url if url.endswith("/") else url + "/"


def locate_raw_files(
    source_dir: str | os.PathLike[str] | None = None,
    mirror: str | None = None,
    download_dir: str | os.PathLike[str] | None = None,
    log: Log = print,
    *,
    timeout: float = DOWNLOAD_TIMEOUT,
) -> Path:
    """Return a directory holding all four raw files, each with verified size and SHA-256.

    Tries each of :func:`search_places` in order, logging one line per place. A place holding all
    four files of which one does not match is an error, not skipped. If no place has them, the
    missing files are downloaded from ``mirror`` (else ``$DISTML_DATA_MIRROR``, else
    :data:`DEFAULT_MIRROR`) into ``download_dir`` (default :data:`KERAS_DIR`); each is streamed to
    a temporary file in that directory, verified, then renamed into place.

    Args:
        source_dir: Directory searched first (``--source-dir``); overrides ``$DISTML_DATA_DIR``.
        mirror: Base URL the four file names are appended to.
        download_dir: Where downloads go.
        log: Called with each progress line.
        timeout: Seconds to wait for the mirror to connect or send the next chunk.

    Raises:
        DataError: a file found is corrupt, or nothing was found and the download failed (the
            message lists every place tried and why, and how to fix it).
    """
    tried: list[str] = []
    for place, origin in _places(source_dir):
        missing = [name for name in FILES if not (place / name).is_file()]
        if not missing:
            for name, spec in FILES.items():
                _check_file(place / name, spec, _mismatch_fix(place / name))
            log(f"data: {place} ({origin}): found, sizes and sha256 ok")
            return place
        if len(missing) == len(FILES):
            why = "missing: all four files" + ("" if place.is_dir() else " (no such directory)")
        else:
            why = "missing: " + ", ".join(missing)
        log(f"data: {place} ({origin}): {why}")
        tried.append(f"{place} ({origin}): {why}")

    url = _resolve_mirror(mirror)
    dest = Path(download_dir).expanduser() if download_dir is not None else KERAS_DIR.expanduser()
    try:
        _download_all(url, dest, log, timeout)
    except DataError as e:
        tried.append(f"download from {url} into {dest}: {e}")
        raise DataError(
            "cannot find the Fashion-MNIST files. Places tried, in order:\n"
            + "".join(f"  - {line}\n" for line in tried)
            + _FIXES
        ) from e
    return dest


def _download_all(mirror: str, dest: Path, log: Log, timeout: float) -> None:
    """Download every file not already verified in ``dest``; DataError says what went wrong.

    On failure, directories this call created are removed again if still empty.
    """
    created = [p for p in (dest, *dest.parents) if not p.exists()]
    try:
        dest.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise DataError(f"cannot create {dest}: {e}") from e
    try:
        for name, spec in FILES.items():
            target = dest / name
            if target.is_file():
                # Present (so the place was partial): keep it if it is right, never overwrite it.
                _check_file(target, spec, _mismatch_fix(target))
                continue
            _download(mirror + name, target, spec, log, timeout)
    except DataError:
        for path in created:  # deepest first
            try:
                path.rmdir()
            except OSError:
                break
        raise


def _download(url: str, target: Path, spec: FileSpec, log: Log, timeout: float) -> None:
    """Stream ``url`` to a temp file beside ``target``, verify it, then rename it to ``target``."""
    name = target.name
    log(f"data: downloading {url} ({spec.size:,} bytes) -> {target.parent}")
    start = time.monotonic()
    fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{name}.", suffix=".part")
    tmp = Path(tmp_name)
    try:
        digest = hashlib.sha256()
        got = 0
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=timeout) as resp:
            announced = resp.headers.get("Content-Length")
            if announced is not None and announced.isdigit() and int(announced) != spec.size:
                raise DataError(
                    f"{name}: wrong size: the mirror announces {int(announced):,} bytes, "
                    f"expected {spec.size:,} (a truncated or different file)"
                )
            while chunk := resp.read(_CHUNK):
                got += len(chunk)
                if got > spec.size:
                    raise DataError(f"{name}: the mirror sent more than the {spec.size:,} bytes")
                digest.update(chunk)
                out.write(chunk)
        if got != spec.size:
            raise DataError(f"{name}: truncated download: got {got:,} of {spec.size:,} bytes")
        if digest.hexdigest() != spec.sha256:
            raise DataError(
                f"{name}: sha256 mismatch: expected {spec.sha256}, got {digest.hexdigest()}: "
                "the mirror does not serve the original file"
            )
        os.replace(tmp, target)
    except urllib.error.HTTPError as e:
        raise DataError(f"{name}: HTTP {e.code} {e.reason} from {url}") from e
    except urllib.error.URLError as e:
        raise DataError(f"{name}: cannot reach the mirror at {url}: {e.reason}") from e
    except http.client.IncompleteRead as e:
        raise DataError(
            f"{name}: truncated download: the connection closed after "
            f"{got + len(e.partial):,} of {spec.size:,} bytes"
        ) from e
    except (OSError, http.client.HTTPException) as e:  # timeouts, resets, bad responses
        raise DataError(f"{name}: download from {url} failed: {type(e).__name__}: {e}") from e
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    log(f"data: {name}: {spec.size:,} bytes in {time.monotonic() - start:.1f} s, sha256 ok")


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
            raise DataError(f"{path} does not exist. {_FIXES}")
        if verify:
            _check_file(path, FILES[name], _mismatch_fix(path))
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
    return Path(contract.datasets_dir(volume))


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
    """Return split ``"train"`` or ``"test"`` as a dataset of ``(image, label)``.

    ``image`` is uint8 ``[28, 28, 1]``, ``label`` an int64 scalar. Read with tfds from
    ``<volume>/datasets`` when prepared there; otherwise (logged) built from the raw files found
    by :func:`locate_raw_files`, with the same element spec.

    Raises:
        DataError: unknown split, or no usable data.
    """
    if split not in _SPLIT_FILES:
        raise DataError(f"unknown split {split!r}: use one of {', '.join(_SPLIT_FILES)}")
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
                f"`python -m ml.ingest --volume {volume}` again."
            ) from e
    log(
        f"data: no prepared dataset in {data_dir}; reading the raw files instead "
        f"(`python -m ml.ingest --volume {volume}` prepares it)"
    )
    raw_dir = locate_raw_files(source_dir=source_dir, log=log)
    images, labels = _read_split(raw_dir, split, verify=False)  # located files are verified
    return tf.data.Dataset.from_tensor_slices((images[..., np.newaxis], labels.astype(np.int64)))
