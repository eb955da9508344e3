"""A canary release on the volume: publish a version beside the serving one, then end it.

    python -m ml canary_publish --volume V --service S (--promote | --reject)
        (--record FILE | --record-json TEXT)

``ml select --canary`` publishes its winner as ``V/serving/S/canary/<N>/`` (:func:`publish_canary`)
instead of into ``V/serving/S``; the model server loads it as the canary beside the serving
version and sends it the share of requests in ``V/serving/S/canary/weight.json`` (written by the
orchestration). N is one more than every version in serving, canary and rejected, so a
number (the label the version's metrics carry) is never used twice. One canary at a time,
and only when something serves (:func:`refusal`).

This command ends it, with the orchestration's analysis (FILE: a JSON object, kept as is):

- ``--promote``: the canary becomes serving version N (latest + 1 when a publish took N
  meanwhile, and it says so), copied to a hidden directory beside the serving versions and
  renamed into place, with the analysis under ``"canary"`` in its publish.json;
  ``V/reports/serving-S.json`` is rewritten; then weight.json and the canary are removed.
- ``--reject``: the analysis goes under ``"rejected"`` in its publish.json, weight.json is
  removed and the version is renamed to ``V/rejected/S/N``; serving is untouched.

Both hold ``ml.selection.select``'s publish lock, and both finish when run again after being killed
at any point: a promote whose copy already serves only cleans up, and a run after the end
says so and exits 0. A reject after a promote killed once its copy served is refused (exit
1): the version serves already, and only the promotion can finish.

Exit codes: 0 ended (or already ended with this record); 1 no canary to end, or the volume
is full; 2 bad arguments or record file (nothing changed); 3 another publish held the lock
for all of ``--lock-wait`` seconds.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from ml import contract
from ml.contract import DEFAULT_SERVICE, PUBLISH_FILE, records, step_prog
from ml.contract.volume_lock import LockHeld, volume_lock
from ml.selection.publishing import (
    LOCK_WAIT_S,
    LOCKED_EXIT,
    STAGING_PREFIX,
    copy_tree,
    say_waiting,
    service_arg,
    serving_versions,
    utc_now,
    write_json_atomic,
)

ENDED_PREFIX = ".ended-"  # a promoted canary on its way out
NOT_MODEL = (PUBLISH_FILE, f".{PUBLISH_FILE}.*")  # the record and its temporary copies
# Keys a promotion or rejection adds or changes: the rest is the canary's own record.
END_KEYS = ("version", "previous", "canary", "promoted_at", "rejected", "rejected_at")
JSON_KINDS = {list: "an array", str: "a string", int: "a number", float: "a number"}


class RecordError(ValueError):
    """The analysis record file is missing, unreadable, or not one JSON object."""


class NoCanary(Exception):
    """There is no canary to end (and no sign that this record already ended one)."""


# --------------------------------------------------------------------------- the record


def parse_record(data: bytes) -> dict[str, Any]:
    """The analysis record: ``data`` must be one JSON object, else :class:`RecordError`."""
    try:
        record = json.loads(data)  # bytes: UTF-8/16/32 detected; bad bytes are a ValueError
    except (ValueError, RecursionError) as e:
        raise RecordError(f"is not JSON ({e})") from None
    if not isinstance(record, dict):
        kind = "true/false" if isinstance(record, bool) else JSON_KINDS.get(type(record), "null")
        raise RecordError(f"holds {kind}, not a JSON object")
    return record


def read_record(path: str) -> dict[str, Any]:
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise RecordError(f"cannot be read ({e.strerror or e})") from None
    return parse_record(data)


def _canonical(data: Any) -> str:
    """Equality for records (NaN included, key order not)."""
    return json.dumps(data, sort_keys=True)


# --------------------------------------------------------------------------- publishing


def next_version(volume: Path, service: str) -> int:
    """One more than every version serving, in canary or rejected: numbers are never reused."""
    dirs = (contract.serving_dir, contract.canary_dir, contract.rejected_dir)
    return 1 + max((v for d in dirs for v in serving_versions(Path(d(volume, service)))), default=0)


def refusal(volume: Path, service: str) -> str | None:
    """Why no canary can be published now (checked before anything is evaluated), or None."""
    root = Path(contract.canary_dir(volume, service))
    if busy := serving_versions(root):
        return (
            f"a canary (version {busy[-1]}) is in progress in {root}; let it finish, or end "
            "it (promote or reject) first"
        )
    if not serving_versions(Path(contract.serving_dir(volume, service))):
        return (
            "nothing serves yet: a canary needs a serving version to compare with; deploy "
            "without --canary first"
        )
    return None


def publish_canary(source: Path, volume: Path, service: str, record: dict[str, Any]) -> int:
    """Copy ``source`` to ``V/serving/S/canary/<N>`` (:func:`next_version`) atomically, its lineage
    ``record`` plus the version, the serving one it is compared with and ``"canary": true``;
    return N. Called by ``ml select --canary`` under the publish lock, after :func:`refusal`."""
    serving = serving_versions(Path(contract.serving_dir(volume, service)))
    version = next_version(volume, service)
    record = {
        **record,
        "version": version,
        "previous": serving[-1] if serving else None,
        "published_at": utc_now(),
        "canary": True,
    }
    # A weight file a late weight Job wrote after the last canary ended: the new one
    # starts at 0, until the orchestration sets its first step.
    Path(contract.canary_weight_path(volume, service)).unlink(missing_ok=True)
    _stage(source, Path(contract.canary_dir(volume, service)), version, record)
    return version


def _stage(source: Path, target_dir: Path, version: int, record: dict[str, Any]) -> None:
    """Copy ``source`` (its record aside) to a hidden directory in ``target_dir``, add
    ``record``, and rename it to ``<version>``: a polling server never sees half a model."""
    target_dir.mkdir(parents=True, exist_ok=True)
    _clear_stale(target_dir)
    tmp = Path(tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{version}-", dir=target_dir))
    try:
        staged = tmp / "model"
        copy_tree(source, staged, ignore=NOT_MODEL)
        (staged / PUBLISH_FILE).write_text(json.dumps(record, indent=2) + "\n")
        os.rename(staged, target_dir / str(version))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _clear_stale(directory: Path) -> None:
    """Remove the hidden directories killed runs left (called under the publish lock, so
    none of them belongs to a run still going)."""
    for stale in (*directory.glob(f"{STAGING_PREFIX}*"), *directory.glob(f"{ENDED_PREFIX}*")):
        shutil.rmtree(stale, ignore_errors=True)


# --------------------------------------------------------------------------- the ends


def promote(volume: Path, service: str, record: dict[str, Any]) -> str:
    """Make the canary a serving version (see the module's docstring); the line to print."""
    found = _canary(volume, service)
    if found is None:
        return _already_ended(volume, service, record, promoted=True)
    root, n = found
    serving_root = Path(contract.serving_dir(volume, service))
    target = _serving_copy(serving_root, root / str(n))
    note = " (found in serving already: finished the clean-up)"
    if target is None:
        published = records.read_publish(root / str(n) / PUBLISH_FILE)
        versions = serving_versions(serving_root)
        target = n if not versions or n > versions[-1] else versions[-1] + 1
        note = "" if target == n else f" (version {n} was taken meanwhile: published as {target})"
        promoted = {k: v for k, v in published.items() if k not in ("rejected", "rejected_at")}
        promoted.update(version=target, previous=versions[-1] if versions else None)
        _stage(root / str(n), serving_root, target, {**promoted, "canary": record})
    _write_serving_record(volume, service, serving_root)
    Path(contract.canary_weight_path(volume, service)).unlink(missing_ok=True)
    gone = Path(tempfile.mkdtemp(prefix=f"{ENDED_PREFIX}{n}-", dir=root))
    os.rename(root / str(n), gone / "model")  # the server sees it leave at once
    shutil.rmtree(gone, ignore_errors=True)
    return f"promoted canary version {n}: serving version {target}{note}"


def reject(volume: Path, service: str, record: dict[str, Any]) -> str:
    """Set the canary aside in ``V/rejected/S`` (see the module's docstring); the line to print."""
    found = _canary(volume, service)
    if found is None:
        return _already_ended(volume, service, record, promoted=False)
    root, n = found
    copy = _serving_copy(Path(contract.serving_dir(volume, service)), root / str(n))
    if copy is not None:  # a promote killed after its copy: rejecting would hide what serves
        raise NoCanary(
            f"cannot reject canary version {n}: a promotion stopped half way has made it "
            f"serving version {copy} already; finish that promotion (--promote, which "
            "`invoke canary --promote` runs)"
        )
    kept = Path(contract.rejected_dir(volume, service)) / str(n)
    if kept.exists():
        raise NoCanary(f"cannot reject canary version {n}: {kept} already exists; move it away")
    kept.parent.mkdir(parents=True, exist_ok=True)
    published = records.read_publish(root / str(n) / PUBLISH_FILE)
    marked = {**published, "rejected": record, "rejected_at": utc_now()}
    write_json_atomic(root / str(n) / PUBLISH_FILE, marked)
    Path(contract.canary_weight_path(volume, service)).unlink(missing_ok=True)
    os.rename(root / str(n), kept)
    return f"rejected canary version {n}: kept in {kept} (reason: {_reason(record)})"


def _reason(record: dict[str, Any]) -> str:
    return str(record.get("reason", "none given"))


def _canary(volume: Path, service: str) -> tuple[Path, int] | None:
    """The canary directory and its newest version (the one the server answers with), or
    None; what killed runs left in the canary and serving directories is removed first."""
    root = Path(contract.canary_dir(volume, service))
    for directory in (root, Path(contract.serving_dir(volume, service))):
        _clear_stale(directory)
    versions = serving_versions(root)
    return (root, versions[-1]) if versions else None


def _serving_copy(serving_root: Path, canary: Path) -> int | None:
    """The serving version that is this canary promoted already (a promote killed before its
    clean-up): same record, apart from what a promotion changes, and the same files."""
    own = records.read_publish(canary / PUBLISH_FILE)
    want = _canonical({k: v for k, v in own.items() if k not in END_KEYS})
    for version in reversed(serving_versions(serving_root)):
        record = records.read_publish(serving_root / str(version) / PUBLISH_FILE)
        if not isinstance(record.get("canary"), dict):
            continue
        same = _canonical({k: v for k, v in record.items() if k not in END_KEYS}) == want
        if same and _files(serving_root / str(version)) == _files(canary):
            return version
    return None


def _files(directory: Path) -> list[tuple[str, int]]:
    """A model directory's files and sizes, its record aside."""
    return sorted(
        (str(p.relative_to(directory)), p.stat().st_size)
        for p in directory.rglob("*")
        if p.is_file() and not any(fnmatch.fnmatch(p.name, pat) for pat in NOT_MODEL)
    )


def _already_ended(volume: Path, service: str, record: dict[str, Any], *, promoted: bool) -> str:
    """With no canary left: the line for a run that ended it with this same ``record``
    already (run again after the end), else :class:`NoCanary`."""
    root = Path(
        contract.serving_dir(volume, service)
        if promoted
        else contract.rejected_dir(volume, service)
    )
    key = "canary" if promoted else "rejected"
    for version in reversed(serving_versions(root)):
        ended = records.read_publish(root / str(version) / PUBLISH_FILE)
        if key in ended and _canonical(ended[key]) == _canonical(record):
            was = "promoted" if promoted else "rejected"
            return f"already {was} with this record: {root / str(version)}; nothing to do"
    verb = "promote" if promoted else "reject"
    raise NoCanary(
        f"no canary version in {contract.canary_dir(volume, service)}: nothing to {verb} "
        "(ml select --canary publishes one)"
    )


def _write_serving_record(volume: Path, service: str, serving_root: Path) -> None:
    """Copy the serving version's publish.json to where ``invoke status`` reads it (as
    ``ml.selection.select`` does on every publish)."""
    versions = serving_versions(serving_root)
    record = records.read_publish(serving_root / str(versions[-1]) / PUBLISH_FILE)
    write_json_atomic(Path(contract.serving_record(volume, service)), record)


def _after_disk_full(volume: Path, service: str) -> str:
    """What a full disk left, looked at again (the lock is still held)."""
    found = _canary(volume, service)
    if found is None:
        return "the canary has left its directory: run the same command again to finish"
    root, n = found
    served = _serving_copy(Path(contract.serving_dir(volume, service)), root / str(n))
    if served is not None:
        return (
            f"canary version {n} is in serving as version {served} already, but is not cleaned "
            "up: run --promote again to finish"
        )
    return f"nothing changed: the canary (version {n}) is still in place in {root}"


# --------------------------------------------------------------------------- the command


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=step_prog("canary_publish"),
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--volume", required=True, help="volume root (the PVC mount)")
    p.add_argument(
        "--service", type=service_arg, default=DEFAULT_SERVICE, help="service name (a DNS label)"
    )
    end = p.add_mutually_exclusive_group(required=True)
    end.add_argument("--promote", action="store_true", help="make the canary a serving version")
    end.add_argument("--reject", action="store_true", help="set the canary aside in V/rejected")
    given = p.add_mutually_exclusive_group(required=True)
    given.add_argument(
        "--record",
        help="the analysis (a JSON object: decision, reason, figures), kept in publish.json",
    )
    given.add_argument("--record-json", help="the same analysis, as the JSON text itself")
    p.add_argument(
        "--lock-wait",
        type=float,
        default=LOCK_WAIT_S,
        help="seconds to wait while a selection, rollback or canary end holds the publish lock",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.record_json is not None:
            record = parse_record(args.record_json.encode("utf-8", "surrogateescape"))
        else:
            record = read_record(args.record)
    except RecordError as e:
        what = "--record-json" if args.record_json is not None else f"file {args.record}"
        print(f"error: the record {what} {e}; nothing changed", file=sys.stderr)
        return 2
    volume, service = Path(args.volume), args.service
    lock = contract.lock_path(volume, service, contract.PUBLISH_LOCK)
    try:
        with volume_lock(lock, "ml canary_publish", wait_s=args.lock_wait, on_wait=say_waiting):
            return _end(volume, service, record, promote_it=args.promote)
    except LockHeld as e:
        print(
            f"error: a selection, rollback or canary end still holds {e.path} after "
            f"{e.waited:.0f} s: {e.holder}; let it finish, or stop it, then run this again",
            file=sys.stderr,
        )
        return LOCKED_EXIT


def _end(volume: Path, service: str, record: dict[str, Any], *, promote_it: bool) -> int:
    """Promote or reject (under the lock); the exit code."""
    try:
        print((promote if promote_it else reject)(volume, service, record))
        return 0
    except NoCanary as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        if e.errno not in contract.DISK_FULL_ERRNOS:
            raise
        print(
            f"error: the volume is full ({os.strerror(e.errno)}, writing {e.filename}); "
            f"{_after_disk_full(volume, service)}. Free space on {volume} and run this again",
            file=sys.stderr,
        )
        return 1
