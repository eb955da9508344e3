"""The build cache: one directory per component and version, complete or absent.

An entry is built in ``<name>.partial`` and renamed into place after its
``build.json`` (what was built, when, how long it took) is written, so an interrupted
build never looks finished and the next run starts it again from scratch.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

DEFAULT_ROOT = "/var/cache/distml-kind"
STAMP = "build.json"
PARTIAL = ".partial"
# Every entry this process built or found: what ``prune`` keeps.
USED: set[Path] = set()


def root() -> Path:
    """The cache root: ``$DISTML_KIND_CACHE`` or ``/var/cache/distml-kind``."""
    return Path(os.environ.get("DISTML_KIND_CACHE") or DEFAULT_ROOT)


@dataclass(frozen=True)
class Result:
    path: Path
    seconds: float  # this run's time: the build's if built now, else the lookup's
    built: bool  # False: found in the cache
    cold_seconds: float  # the time the build took when it ran


def entry(component: str, version: str) -> Path:
    return root() / f"{component}-{version}"


def cached(component: str, version: str, build: Callable[[Path], None]) -> Result:
    """The entry for ``component``/``version``, calling ``build(dir)`` only if missing.
    Two runs wanting the same entry take turns (a lock file beside it)."""
    final = entry(component, version)
    final.parent.mkdir(parents=True, exist_ok=True)
    with open(_lock_path(final), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        result = _cached(final, component, version, build)
    USED.add(final)
    return result


def _lock_path(final: Path) -> Path:
    return final.with_name(f".{final.name}.lock")


def _entry_of(path: Path) -> Path:
    """The entry a cache root's child belongs to: itself, its ``.partial``, its lock."""
    name = path.name
    if name.startswith(".") and name.endswith(".lock"):
        name = name[1 : -len(".lock")]
    return path.with_name(name.removesuffix(PARTIAL))


def prune(keep: set[Path]) -> list[str]:
    """Remove every entry under the root not in ``keep`` (with its partial build):
    old versions, builds a kill interrupted. An entry whose lock another process holds (a
    build under way) is left alone. Returns the names removed."""
    removed = []
    for entry in sorted({_entry_of(p) for p in root().iterdir()} - keep):
        if not (entry.exists() or entry.with_name(entry.name + PARTIAL).exists()):
            continue  # a lock file alone
        with open(_lock_path(entry), "w") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue
            for path in (entry, entry.with_name(entry.name + PARTIAL)):
                shutil.rmtree(path, ignore_errors=True)
        # The lock file stays: a build waiting on it must not end up holding an unlinked
        # file while a newer one takes a fresh lock for the same entry.
        removed.append(entry.name)
    return removed


def _cached(final: Path, component: str, version: str, build: Callable[[Path], None]) -> Result:
    start = time.monotonic()
    stamp = final / STAMP
    if stamp.is_file():
        cold = json.loads(stamp.read_text())["seconds"]
        print(f"= {final.name}: cached (built in {cold:.0f}s)", flush=True)
        return Result(final, time.monotonic() - start, False, cold)
    partial = final.with_name(final.name + PARTIAL)
    shutil.rmtree(partial, ignore_errors=True)
    shutil.rmtree(final, ignore_errors=True)
    partial.mkdir(parents=True)
    print(f"> {final.name}: building", flush=True)
    build(partial)
    seconds = time.monotonic() - start
    info = {"component": component, "version": version, "seconds": round(seconds, 1)}
    info["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    (partial / STAMP).write_text(json.dumps(info, indent=2) + "\n")
    partial.rename(final)
    print(f"< {final.name}: built in {seconds:.0f}s", flush=True)
    return Result(final, seconds, True, seconds)
