"""What every publish on the volume shares: ``ml select`` (a selection or rollback) and
``ml canary_publish`` (a canary's end) list versions, stage copies and write records alike.

A version is an integer directory (TF Serving's rule): :func:`serving_versions` lists them,
and the model server (``ml/server/watcher.py``, ``ml/server/canary.py``) serves by the same
list. A publish copies into a hidden ``STAGING_PREFIX`` directory beside the versions
(:func:`copy_tree`) and renames it into place, so a polling server never sees half a model;
a record is replaced whole (:func:`write_json_atomic`). Both commands take the volume's
publish lock, waiting ``LOCK_WAIT_S`` seconds by default, and exit ``LOCKED_EXIT`` when it
stays held. Standard library only: the server imports this without TensorFlow's data code.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ml import contract

STAGING_PREFIX = ".publish-"  # a copy in progress, renamed into place when complete
LOCK_WAIT_S = 600.0
LOCKED_EXIT = 3


def serving_versions(directory: Path) -> list[int]:
    """Integer version directories under ``directory``, ascending (TF Serving's rule),
    named in ASCII digits: hidden directories (publishes in progress), files and any other
    name are not versions, nor are the other digits ``str.isdigit`` takes ("²", "١")."""
    if not directory.is_dir():
        return []
    return sorted(int(p.name) for p in directory.iterdir() if p.is_dir() and _is_number(p.name))


def _is_number(name: str) -> bool:
    return name.isascii() and name.isdigit()


def write_json_atomic(path: Path, data: Any) -> None:
    """Write ``data`` as indented JSON to a hidden temporary file beside ``path``, then
    rename it over ``path``: a reader sees the old file or the new one, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=2)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:  # a full disk: the old file stays, no temp file is left
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def copy_tree(source: Path, target: Path, ignore: Iterable[str]) -> None:
    """``copytree`` of ``source`` to ``target``, skipping names matching the ``ignore``
    patterns, that fails as its first file failed (an ``OSError`` with its errno, so a
    full disk reads as one), not as shutil's list of every file's error."""
    try:
        shutil.copytree(source, target, ignore=shutil.ignore_patterns(*ignore))
    except shutil.Error as e:
        src, dst, why = e.args[0][0]
        code = errno.ENOSPC if f"[Errno {errno.ENOSPC}]" in why else errno.EIO
        raise OSError(code, f"{os.strerror(code)}: copying {src}: {why}", dst) from None


def utc_now() -> str:
    """The time now, as publish records and reports write it (``2024-01-31T12:00:00Z``)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def say_waiting(holder: str) -> None:
    """The line a publish prints while another holds the publish lock (``on_wait``)."""
    print(f"waiting for the publish lock: {holder} is selecting or publishing", flush=True)


def service_arg(text: str) -> str:
    """``--service``'s argparse type, for every publishing command: a DNS label."""
    try:
        return contract.check_service(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
