"""The upstream files the cluster path pins (install manifests, CRDs), had the way package
managers get theirs: each by its release URL and sha256, recorded in
``k8s/install/upstream.lock.json``.

Where a file comes from, in order:

1. a local mirror directory, when one is named: ``$DISTML_UPSTREAM_DIR`` for the install
   manifests (the lock's names, e.g. ``kserve-v0.20.0/kserve.yaml``), ``$DISTML_CRD_DIR``
   for the CRDs (flat);
2. the cache, ``$XDG_CACHE_HOME/distml/upstream/<sha256>/<file name>`` (``~/.cache``);
3. unless a mirror is named (offline machines), a download from the release URL
   (:data:`TIMEOUT` to connect and per chunk), verified, then moved into the cache
   atomically.

A pin with ``made`` is of a file this machine makes from source, as the published one cannot
be downloaded here: ``made`` says how, whether the pin is of the published bytes, and what
makes it again (``python -m integration.kindbuild keda-manifest`` for KEDA's install file,
rebuilt; ``... operator-crds`` for the Prometheus Operator's CRDs, the published bytes), which
puts it in the cache (:func:`store`), so an offline machine whose mirror lacks it finds it
there.

Every copy is checked against its sha256 before it is used. A file that cannot be had raises
:class:`Unavailable` (one line: what to set); a file with the wrong bytes raises
:class:`UpstreamError` and is never cached.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import http.client
import json
import os
import re
import shutil
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from common.errors import DistmlError

LOCK_FILE = Path(__file__).with_name("upstream.lock.json")
#: The mirror directory's environment variable, by a pin's ``mirror``.
MIRROR_ENV = {"manifest": "DISTML_UPSTREAM_DIR", "crd": "DISTML_CRD_DIR"}
#: Seconds to wait for a server to connect, or to send the next chunk.
TIMEOUT = 5.0
_CHUNK = 1 << 20
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


class UpstreamError(DistmlError):
    """A pinned upstream file has the wrong bytes, or the lock file is malformed."""


class Unavailable(UpstreamError):
    """A pinned upstream file cannot be had here; the message (one line) says what to set."""


@dataclass(frozen=True)
class Pin:
    """One pinned file. ``name``: its path in the mirror directory; ``url``: where it is
    published (with ``kustomize``, a kustomize ref built by ``kubectl kustomize``, not a
    download); ``group``/``kind``: a CRD's, else empty; ``made``: how this machine makes the
    file from source, as the published one cannot be had here, else empty."""

    name: str
    url: str
    sha256: str
    size: int
    mirror: str
    aliases: tuple[str, ...] = ()
    kustomize: bool = False
    group: str = ""
    kind: str = ""
    made: str = ""

    @property
    def env(self) -> str:
        return MIRROR_ENV[self.mirror]


def _check_entry(i: int, entry: Any) -> Pin:
    where = f"{LOCK_FILE.name}: files[{i}]"
    if not isinstance(entry, dict):
        raise UpstreamError(f"{where}: not an object")
    known = {f.name for f in fields(Pin)}
    if set(entry) - known or {"name", "url", "sha256", "size", "mirror"} - set(entry):
        raise UpstreamError(f"{where}: keys {sorted(entry)}, expected some of {sorted(known)}")
    name, size = entry["name"], entry["size"]
    parts = Path(name).parts if isinstance(name, str) else ()
    if not parts or name.startswith("/") or any(p in ("..", ".") for p in parts):
        raise UpstreamError(f"{where}: name {name!r} is not a relative path")
    if not isinstance(entry["sha256"], str) or not _SHA256.match(entry["sha256"]):
        raise UpstreamError(f"{where}: sha256 {entry['sha256']!r} is not 64 lowercase hex")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise UpstreamError(f"{where}: size {size!r} is not a byte count")
    if entry["mirror"] not in MIRROR_ENV:
        raise UpstreamError(f"{where}: mirror {entry['mirror']!r} is not one of {[*MIRROR_ENV]}")
    aliases = entry.get("aliases", [])
    strings = [entry["url"], entry.get("group", ""), entry.get("kind", ""), entry.get("made", "")]
    strings += aliases if isinstance(aliases, list) else [None]
    if not all(isinstance(s, str) for s in strings) or not entry["url"]:
        raise UpstreamError(f"{where}: url, aliases (a list), group, kind and made must be strings")
    if not isinstance(entry.get("kustomize", False), bool):
        raise UpstreamError(f"{where}: kustomize must be true or false")
    return Pin(**{**entry, "aliases": tuple(aliases)})


def parse_lock(text: str) -> tuple[Pin, ...]:
    """The pins in a lock file's text; :class:`UpstreamError` names the first problem."""
    try:
        data = json.loads(text)
    except ValueError as e:
        raise UpstreamError(f"{LOCK_FILE.name}: not JSON: {e}") from e
    if not isinstance(data, dict) or not isinstance(data.get("files"), list):
        raise UpstreamError(f'{LOCK_FILE.name}: expected {{"files": [...]}}')
    found = tuple(_check_entry(i, entry) for i, entry in enumerate(data["files"]))
    for what in ("name", "url"):
        keys = [getattr(p, what) for p in found]
        if what == "url":
            keys += [a for p in found for a in p.aliases]
        if len(set(keys)) != len(keys):
            raise UpstreamError(f"{LOCK_FILE.name}: a {what} is listed twice")
    return found


def dump_lock(found: tuple[Pin, ...] | list[Pin], about: str) -> str:
    """The lock file's text for ``found`` (what :func:`parse_lock` reads back); fields at
    their default are left out."""
    defaults = {f.name: f.default for f in fields(Pin)}
    entries = [
        {k: list(v) if k == "aliases" else v for k, v in asdict(p).items() if v != defaults[k]}
        for p in found
    ]
    return json.dumps({"about": about, "files": entries}, indent=1) + "\n"


@functools.cache
def pins() -> tuple[Pin, ...]:
    """Every pin in :data:`LOCK_FILE`."""
    return parse_lock(LOCK_FILE.read_text())


def by_url() -> dict[str, Pin]:
    """Every URL (and alias, and kustomize ref) the lock pins → its pin."""
    return {url: p for p in pins() for url in (p.url, *p.aliases)}


def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/distml/upstream`` (default ``~/.cache/distml/upstream``)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "distml/upstream"


def mirror_dir(pin: Pin) -> Path | None:
    """The mirror directory named for ``pin``'s kind of file, if any."""
    value = os.environ.get(pin.env)
    return Path(value).expanduser() if value else None


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _wrong_bytes(pin: Pin, path: Path) -> str | None:
    """Why ``path`` is not ``pin``'s file, or None when it is."""
    size = path.stat().st_size
    if size != pin.size:
        return f"{size:,} bytes, the pin says {pin.size:,}"
    digest = sha256_of(path)
    return None if digest == pin.sha256 else f"sha256 {digest}, the pin says {pin.sha256}"


def path(pin: Pin, *, timeout: float = TIMEOUT) -> Path:
    """A verified local copy of ``pin``'s file: from the mirror, the cache, or a download.

    Raises:
        Unavailable: it cannot be had here (the message says what to set).
        UpstreamError: a copy has the wrong bytes (a bad download is deleted first).
    """
    mirror = mirror_dir(pin)
    if mirror is not None:
        return _verified_in(pin, mirror, f"${pin.env}")
    cached = cached_copy(pin)
    if cached.is_file():
        return cached
    if pin.kustomize:
        raise Unavailable(
            f"{pin.name} is built by `kubectl kustomize {pin.url}`, not downloaded: set "
            f"{pin.env} to a directory holding it, or save that output as {cached}"
        )
    _download(pin, cached, timeout)
    return cached


def cached_copy(pin: Pin) -> Path:
    """Where the cache keeps ``pin``'s file; a copy there with the wrong bytes (damaged
    after it was verified) is deleted, so the path then names no file."""
    cached = cache_dir() / pin.sha256 / Path(pin.name).name
    if cached.is_file() and _wrong_bytes(pin, cached):
        cached.unlink()
    return cached


def _rebuilt(pin: Pin) -> str:
    """What a message adds for a pin of a file made from source: how it is made."""
    return f"; {pin.made}" if pin.made else ""


def store(pin: Pin, made: Path) -> Path:
    """``made``, a copy of ``pin``'s file made here, verified and put into the cache (copied
    atomically, unless the cache has it already); its path there.

    Raises:
        UpstreamError: ``made`` is missing or not the pinned file (the message says both sums).
    """
    if not made.is_file():
        raise UpstreamError(f"{made}: not made (the pin is {pin.name})")
    if why := _wrong_bytes(pin, made):
        raise UpstreamError(f"{made} is not the pinned {pin.name}: {why}")
    cached = cached_copy(pin)
    if not cached.is_file():
        cached.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=cached.parent, prefix=f".{cached.name}.")
        os.close(fd)
        shutil.copyfile(made, name)
        os.replace(name, cached)
    return cached


def _verified_in(pin: Pin, mirror: Path, named_by: str) -> Path:
    """``pin``'s file in the directory ``mirror``, checked against the pin; else its copy
    in the cache (never a download: a mirror is named where there is none)."""
    found = mirror / pin.name
    if not found.is_file():
        cached = cached_copy(pin)
        if cached.is_file():
            return cached
        raise Unavailable(
            f"{pin.name} is not in {named_by} ({mirror}) nor in the cache ({cached.parent}): "
            f"add it there{_rebuilt(pin)}"
        )
    if why := _wrong_bytes(pin, found):
        raise UpstreamError(f"{found} is not the pinned file: {why} ({pin.url})")
    return found


def mirrored(url: str, mirror: Path, named_by: str) -> Path:
    """The verified copy of the pinned file ``url`` (or kustomize ref) in the directory
    ``mirror``, laid out as the lock names them, else in the cache; ``named_by`` is the
    setting that named the mirror."""
    pin = by_url().get(url)
    if pin is None:
        raise UpstreamError(f"{url} is not pinned in {LOCK_FILE.name}")
    return _verified_in(pin, mirror, named_by)


def local_copy(url: str, mirror: str = "", named_by: str = "") -> Path:
    """The verified local copy of the pinned file ``url``: in the directory ``mirror`` when
    one is named (``named_by``: the setting that names it), else :func:`path`'s (the
    mirror directory of its kind, the cache, or a download)."""
    if mirror:
        return mirrored(url, Path(mirror), named_by)
    pin = by_url().get(url)
    if pin is None:
        raise UpstreamError(f"{url} is not pinned in {LOCK_FILE.name}")
    return path(pin)


#: Hosts that could not be reached in this process → why: not tried again (one DNS or
#: connect timeout per host, not one per file).
_UNREACHABLE: dict[str, str] = {}


def _download(pin: Pin, target: Path, timeout: float) -> None:
    """Stream ``pin.url`` to a temporary file beside ``target``; verify; rename into place."""
    fix = f"set {pin.env} to a directory holding {pin.name} (a local mirror)"
    host = urllib.parse.urlsplit(pin.url).netloc
    if host in _UNREACHABLE:
        raise Unavailable(f"cannot download {pin.url} ({_UNREACHABLE[host]}): {fix}")
    tmp: Path | None = None
    try:
        with urllib.request.urlopen(pin.url, timeout=timeout) as resp:
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
            tmp = Path(name)
            with os.fdopen(fd, "wb") as out:
                got = 0
                while (chunk := resp.read(_CHUNK)) and got <= pin.size:
                    got += len(chunk)
                    out.write(chunk)
        if got < pin.size:  # cut off: may work next time
            raise Unavailable(f"{pin.url}: the download stopped at {got:,} of {pin.size:,} bytes")
        if why := _wrong_bytes(pin, tmp):
            raise UpstreamError(f"{pin.url} sent the wrong file ({why}): not cached{_rebuilt(pin)}")
        os.replace(tmp, target)
    except urllib.error.HTTPError as e:
        raise Unavailable(f"cannot download {pin.url} (HTTP {e.code} {e.reason}): {fix}") from e
    except urllib.error.URLError as e:  # DNS, refused, connect timeout: the host is out of reach
        if host:  # not file://
            _UNREACHABLE[host] = str(e.reason)
        raise Unavailable(f"cannot download {pin.url} ({e.reason}): {fix}") from e
    except (http.client.HTTPException, OSError) as e:  # cut off, timed out, cannot write
        raise Unavailable(f"cannot download {pin.url} ({type(e).__name__}: {e}): {fix}") from e
    finally:
        if tmp is not None:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
