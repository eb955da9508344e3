"""Fashion-MNIST's four raw files: where they are looked for, their published size and
SHA-256, and the download from a mirror when no copy is on this machine.

The places, in order: ``--source-dir`` (else ``$DISTML_DATA_DIR``); Debian's
``dataset-fashion-mnist`` (``/usr/share/datasets/fashion-mnist/``); Keras's cache
(``~/.keras/datasets/fashion-mnist/``); then a download (``--mirror`` /
``$DISTML_DATA_MIRROR``, default: the official URLs) into the Keras cache. Every failure a
user can cause or fix raises :class:`DataError`, saying what is wrong and how to fix it.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import os
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import NamedTuple

from ml.contract import DATA_DIR_ENV, RAW_FILE_SPECS

Log = Callable[[str], None]


class FileSpec(NamedTuple):
    """Published size and SHA-256 of one original Fashion-MNIST file."""

    size: int
    sha256: str


#: The four original files, name -> (size in bytes, sha256): ``contract.RAW_FILE_SPECS``
#: (written once there: the Argo Workflow's cache key is derived from the same checksums).
#: Download order is this order.
FILES: Mapping[str, FileSpec] = MappingProxyType(
    {name: FileSpec(size, sha256) for name, (size, sha256) in RAW_FILE_SPECS.items()}
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

_CHUNK = 1 << 20

FIXES = (
    "Fix one of:\n"
    f"  - pass --source-dir DIR (or set {DATA_DIR_ENV}=DIR) to a directory holding the four "
    "files\n"
    "  - apt-get install dataset-fashion-mnist  (installs them in "
    f"{DEBIAN_DIR}/)\n"
    f"  - set {MIRROR_ENV}=URL to a reachable copy of {DEFAULT_MIRROR} (`python -m ml ingest` "
    "also takes --mirror URL)"
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


def check_file(path: Path, spec: FileSpec, fix: str) -> None:
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


def mismatch_fix(path: Path) -> str:
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
                check_file(place / name, spec, mismatch_fix(place / name))
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
            + FIXES
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
                check_file(target, spec, mismatch_fix(target))
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
    got = 0  # bytes received so far (the IncompleteRead message counts them)
    try:
        digest = hashlib.sha256()
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=timeout) as resp:
            announced = resp.headers.get("Content-Length")
            if (
                announced is not None
                and (announced.isascii() and announced.isdigit())
                and int(announced) != spec.size
            ):
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
