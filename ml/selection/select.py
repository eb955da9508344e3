"""Pick the most accurate candidate and publish it for serving (or roll back).

    python -m ml select --volume V --service S [--min-accuracy A] [--force] [--code-version C]
    python -m ml select --volume V --service S --rollback
    python -m ml select --volume V --service S --canary [--min-accuracy A] [--force] ...

Every candidate in ``V/candidates/*`` is evaluated on the **validation** split and the
choice is made on those scores alone: the winner is published as ``V/serving/S/<previous
+ 1>/`` (TF Serving layout) only if its validation accuracy reaches ``--min-accuracy`` and
is not worse than the serving version's (unless ``--force``). Only after deciding is each
usable candidate scored once on the **test** split, for the report. A model is evaluated in
a child process (``ml/selection/isolated.py``): one that cannot serve, or that kills that
process (SIGABRT, SIGSEGV), is skipped with its reason and the others are still judged.
Both figures, the winner and the reason go to ``V/reports/selection.json``; the published
version's ``publish.json`` holds its lineage (``records.LINEAGE_FIELDS``) and
``V/reports/serving-S.json`` a copy of the serving version's record (for ``invoke status``).
Publishing copies to a hidden temporary directory beside the target and renames it, so a
server polling the directory never sees half a model. A selection or rollback holds the
volume's publish lock (``contract.PUBLISH_LOCK``) from start to end, so two at once take
turns and never pick the same "latest + 1"; a publish killed mid-copy leaves a hidden
``.publish-*`` directory, which the next publish removes. With ``--canary`` the same choice
publishes the winner as a canary, into ``V/serving/S/canary`` (``ml/selection/canary_publish.py``).

Exit codes: 0 published or kept the better serving version; 1 nothing usable or below
``--min-accuracy`` (what was serving stays serving); 2 bad arguments or no data; 3 another
selection held the publish lock for all of ``--lock-wait`` seconds.
"""

from __future__ import annotations

import argparse
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
from ml.data.dataset import DataError
from ml.data.dataset import lineage as data_lineage
from ml.selection import canary_publish
from ml.selection.evaluate import CandidateError, load_split_arrays
from ml.selection.isolated import IsolatedEvaluator
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

SELECTED_ON = "validation"  # the split every choice here is made on
REPORTED_ON = "test"  # scored once per candidate after the choice, for the report only
UNKNOWN_CODE_VERSION = "unknown (ml select ran without --code-version)"


def publish(source: Path, serving_dir: Path, record: dict[str, Any], at_least: int = 1) -> int:
    """Copy ``source`` to ``serving_dir/<latest + 1>`` (or ``at_least``, if higher: a
    number a canary took is never reused) atomically; return the new version."""
    serving_dir.mkdir(parents=True, exist_ok=True)
    _remove_stale_copies(serving_dir)
    versions = serving_versions(serving_dir)
    version = max((versions[-1] + 1) if versions else 1, at_least)
    tmp = Path(tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{version}-", dir=serving_dir))
    try:
        staged = tmp / "model"
        copy_tree(source, staged, ignore=(PUBLISH_FILE,))
        record = {
            **record,
            "version": version,
            "previous": versions[-1] if versions else None,
            "published_at": utc_now(),
        }
        (staged / PUBLISH_FILE).write_text(json.dumps(record, indent=2) + "\n")
        os.rename(staged, serving_dir / str(version))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return version


def _remove_stale_copies(serving_dir: Path) -> None:
    """Remove the hidden copies of publishes that were killed mid-copy. Called under the
    publish lock, so no copy here belongs to a publish still running."""
    for stale in serving_dir.glob(f"{STAGING_PREFIX}*"):
        shutil.rmtree(stale, ignore_errors=True)


def _read_publish_record(version_dir: Path) -> dict[str, Any]:
    try:
        return json.loads((version_dir / PUBLISH_FILE).read_text())
    except (OSError, ValueError):
        return {}


def rollback(volume: Path, service: str) -> tuple[int, int]:
    """Republish the version that served before the current one; return (restored, new)."""
    serving_dir = Path(contract.serving_dir(volume, service))
    versions = serving_versions(serving_dir)
    if not versions:
        raise SystemExit(f"error: nothing is published under {serving_dir}; run a deploy first")
    current = versions[-1]
    record = _read_publish_record(serving_dir / str(current))
    if "previous" in record:
        previous = record["previous"]
    else:  # published by something else: take the next lower version
        earlier = [v for v in versions if v < current]
        previous = earlier[-1] if earlier else None
    if previous is None or not (serving_dir / str(previous)).is_dir():
        raise SystemExit(
            f"error: version {current} has no earlier version to roll back to in {serving_dir}"
        )
    restored = _read_publish_record(serving_dir / str(previous))
    new = publish(
        serving_dir / str(previous),
        serving_dir,
        {**restored, "source": f"rollback to version {previous}", "rolled_back_from": current},
        at_least=canary_publish.next_version(volume, service),
    )
    # The republished copy inherits the restored version's own predecessor, so a second
    # rollback keeps walking back the history instead of toggling.
    record_path = serving_dir / str(new) / PUBLISH_FILE
    record = json.loads(record_path.read_text())
    record["previous"] = restored.get("previous")
    write_json_atomic(record_path, record)
    _write_serving_record(volume, service, serving_dir / str(new))
    return previous, new


def select(
    volume: Path,
    service: str,
    *,
    min_accuracy: float = 0.0,
    force: bool = False,
    canary: bool = False,
    code_version: str = UNKNOWN_CODE_VERSION,
    source_dir: str | None = None,
    log: Any = print,
) -> tuple[int, dict[str, Any]]:
    """Evaluate on validation, decide, then score on test, maybe publish. Returns (exit
    code, the selection report)."""
    candidates_dir = Path(contract.candidates_dir(volume))
    serving_dir = Path(contract.serving_dir(volume, service))
    names = _candidate_names(candidates_dir)
    report: dict[str, Any] = {
        "service": service,
        "selected_on": SELECTED_ON,
        "min_accuracy": min_accuracy,
        "forced": force,
        "candidates": [],
        "winner": None,
        "published": False,
        "version": None,
        **({"canary": True} if canary else {}),
    }
    if canary and (refused := canary_publish.refusal(volume, service)):
        report["reason"] = refused  # before anything is evaluated
        return _finish(volume, report, 1, log)
    if not names:
        report["reason"] = f"no candidates in {candidates_dir}; run training first"
        return _finish(volume, report, 1, log)

    val_images, val_labels = load_split_arrays(volume, SELECTED_ON, source_dir, log=log)
    report["validation_examples"] = len(val_labels)
    with IsolatedEvaluator() as evaluator:  # a model that crashes its process is skipped
        report["candidates"] = _evaluate_candidates(
            evaluator, candidates_dir, names, val_images, val_labels, log
        )
        usable = [c for c in report["candidates"] if c["status"] == "ok"]
        current = _evaluate_serving(evaluator, serving_dir, val_images, val_labels)
        if current is not None:
            report["serving_before"] = current
        if not usable:
            report["reason"] = "no usable candidate (each was missing, corrupt or crashed)"
            return _finish(volume, report, 1, log)

        winner = max(usable, key=lambda c: (c["val_accuracy"], -names.index(c["model_type"])))
        report["winner"] = winner["model_type"]
        code, why = _judge(report, winner, current, min_accuracy, force)
        # The choice is made; now, and only now, the test split (for the report).
        report["test_examples"] = _score_on_test(evaluator, volume, usable, source_dir, log)
    if why is not None:
        record = _lineage(volume, candidates_dir, winner, why, code_version)
        target = _publish(volume, service, candidates_dir / winner["model_type"], record, canary)
        report.update(published=True, version=int(target.name), reason=why)
        log(f"published {winner['model_type']} as {target}")
    return _finish(volume, report, code, log)


def _publish(
    volume: Path, service: str, source: Path, record: dict[str, Any], canary: bool
) -> Path:
    """Publish the winner as the serving version (and copy its record for status), or as
    the canary; return its directory."""
    if canary:
        version = canary_publish.publish_canary(source, volume, service, record)
        return Path(contract.canary_dir(volume, service)) / str(version)
    serving_dir = Path(contract.serving_dir(volume, service))
    version = publish(source, serving_dir, record, canary_publish.next_version(volume, service))
    _write_serving_record(volume, service, serving_dir / str(version))
    return serving_dir / str(version)


def _candidate_names(candidates_dir: Path) -> list[str]:
    """The candidate directories' names, sorted (hidden ones are exports in progress)."""
    if not candidates_dir.is_dir():
        return []
    return sorted(
        p.name for p in candidates_dir.iterdir() if p.is_dir() and not p.name.startswith(".")
    )


def _evaluate_candidates(
    evaluator: IsolatedEvaluator,
    candidates_dir: Path,
    names: list[str],
    images: Any,
    labels: Any,
    log: Any,
) -> list[dict[str, Any]]:
    """One report entry per candidate: its validation scores (``status: ok``) or why it
    was skipped (a crash of the process evaluating it too)."""
    entries = []
    for name in names:
        entry: dict[str, Any] = {"model_type": name, "path": str(candidates_dir / name)}
        try:
            scores = evaluator.evaluate(candidates_dir / name, images, labels)
            entry.update(_scores("val", scores))
            entry["status"] = "ok"
            log(f"candidate {name}: validation accuracy {entry['val_accuracy']:.4f}")
        except CandidateError as e:
            entry.update(status="skipped", error=str(e))
            log(f"candidate {name}: skipped: {e}")
        entries.append(entry)
    return entries


def _scores(prefix: str, result: dict[str, Any]) -> dict[str, Any]:
    """``{"accuracy": a, "loss": l, ...}`` as ``{"<prefix>_accuracy": a, "<prefix>_loss": l}``."""
    return {f"{prefix}_accuracy": result["accuracy"], f"{prefix}_loss": result["loss"]}


def _evaluate_serving(
    evaluator: IsolatedEvaluator, serving_dir: Path, images: Any, labels: Any
) -> dict[str, Any] | None:
    """The version serving now and its validation scores (or its load error); None if none."""
    versions = serving_versions(serving_dir)
    if not versions:
        return None
    current: dict[str, Any] = {"version": versions[-1]}
    try:
        current.update(
            _scores("val", evaluator.evaluate(serving_dir / str(versions[-1]), images, labels))
        )
    except CandidateError as e:
        current["error"] = str(e)
    return current


def _judge(
    report: dict[str, Any],
    winner: dict[str, Any],
    current: dict[str, Any] | None,
    min_accuracy: float,
    force: bool,
) -> tuple[int, str | None]:
    """Decide on validation accuracy alone: (exit code, the reason to publish), or (exit
    code, None) with ``report["reason"]`` saying why nothing is published. The winner is
    published unless it is below ``min_accuracy`` or worse than what serves (``force``
    overrides both)."""
    name, acc = winner["model_type"], winner["val_accuracy"]
    serving_acc = current.get("val_accuracy") if current else None
    if acc < min_accuracy and not force:
        report["reason"] = (
            f"best candidate {name} scores {acc:.4f} on validation, below "
            f"--min-accuracy {min_accuracy:.4f}; nothing published"
        )
        return 1, None
    if current is not None and serving_acc is not None and acc < serving_acc and not force:
        report["version"] = current["version"]
        report["reason"] = (
            f"kept version {current['version']} (validation {serving_acc:.4f}): best "
            f"candidate {name} scores {acc:.4f} on validation, which is worse "
            "(use --force to publish it anyway)"
        )
        return 0, None
    why = f"{name} has the highest validation accuracy ({acc:.4f})"
    if current is not None and serving_acc is not None:
        why += f", not worse than serving version {current['version']} ({serving_acc:.4f})"
    return 0, why + (" [forced]" if force else "")


def _score_on_test(
    evaluator: IsolatedEvaluator,
    volume: Path,
    usable: list[dict[str, Any]],
    source_dir: str | None,
    log: Any,
) -> int:
    """Add each usable candidate's test scores to its entry (after the choice, for the
    report only); return the number of test examples."""
    images, labels = load_split_arrays(volume, REPORTED_ON, source_dir, log=log)
    for entry in usable:
        try:
            entry.update(_scores("test", evaluator.evaluate(entry["path"], images, labels)))
        except CandidateError as e:  # it loaded a moment ago: report, do not fail
            entry["test_error"] = str(e)
            continue
        name = entry["model_type"]
        log(f"candidate {name}: test accuracy {entry['test_accuracy']:.4f} (reported only)")
    return len(labels)


def _lineage(
    volume: Path, candidates_dir: Path, winner: dict[str, Any], why: str, code_version: str
) -> dict[str, Any]:
    """What made the published model (``records.LINEAGE_FIELDS``; ``publish`` adds the
    version, its predecessor and the time)."""
    name = winner["model_type"]
    return {
        "source": f"candidate {name}",
        "model_type": name,
        "val_accuracy": winner["val_accuracy"],
        "test_accuracy": winner.get("test_accuracy"),
        "selected_on": SELECTED_ON,
        "reason": why,
        "code_version": code_version,
        "dataset": data_lineage(),
        "params": _read_params(candidates_dir / name),
    }


def _read_params(candidate: Path) -> dict[str, Any]:
    """The candidate's resolved training parameters (its params.yaml), or ``{}``."""
    import yaml

    try:
        params = yaml.safe_load((candidate / contract.PARAMS_FILE).read_text())
    except (OSError, yaml.YAMLError):
        return {}
    return params if isinstance(params, dict) else {}


def _write_serving_record(volume: Path, service: str, version_dir: Path) -> None:
    """Copy the serving version's publish.json to where ``invoke status`` reads it."""
    record = _read_publish_record(version_dir)
    write_json_atomic(Path(contract.serving_record(volume, service)), record)


def _finish(volume: Path, report: dict[str, Any], code: int, log: Any) -> tuple[int, dict]:
    report["time"] = utc_now()
    write_json_atomic(Path(contract.selection_report(volume)), report)
    log(("" if code == 0 else "error: ") + report["reason"])
    return code, report


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=step_prog("select"),
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--volume", required=True, help="volume root (the PVC mount)")
    p.add_argument(
        "--service",
        type=service_arg,
        default=DEFAULT_SERVICE,
        help="service (model) name to publish under (a DNS label)",
    )
    p.add_argument(
        "--min-accuracy",
        type=float,
        default=0.0,
        help="refuse to publish a winner below this validation accuracy (0-1)",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="publish the winner even if worse than what is serving or below --min-accuracy",
    )
    p.add_argument(
        "--rollback",
        action="store_true",
        help="republish the version that served before the current one, then exit",
    )
    p.add_argument(
        "--canary",
        action="store_true",
        help="publish the winner into V/serving/S/canary, beside the serving version, as a canary "
        "(python -m ml canary_publish ends it)",
    )
    p.add_argument(
        "--code-version",
        default=UNKNOWN_CODE_VERSION,
        help="the code that made the model, recorded in publish.json: the project image's "
        "tag (the content hash of its build context; locally, the tag this code builds to)",
    )
    p.add_argument("--source-dir", help="raw Fashion-MNIST files, when V/datasets/ is not ready")
    p.add_argument(
        "--lock-wait",
        type=float,
        default=LOCK_WAIT_S,
        help="seconds to wait while another selection or rollback holds the publish lock",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    if not 0.0 <= args.min_accuracy <= 1.0:
        p.error(f"--min-accuracy must be between 0 and 1 (a fraction), got {args.min_accuracy}")
    if args.canary and args.rollback:
        p.error("--canary publishes a new version: it cannot be combined with --rollback")
    volume = Path(args.volume)
    lock = contract.lock_path(volume, args.service, contract.PUBLISH_LOCK)
    try:
        with volume_lock(lock, "ml select", wait_s=args.lock_wait, on_wait=say_waiting):
            return _run(volume, args)
    except OSError as e:
        if e.errno not in contract.DISK_FULL_ERRNOS:
            raise
        print(
            f"error: the volume is full ({os.strerror(e.errno)}, writing {e.filename}); "
            f"nothing was published and what serves stays serving. Free space on {volume} "
            "and run the selection again",
            file=sys.stderr,
        )
        return 1
    except LockHeld as e:
        print(
            f"error: another selection or rollback still holds {e.path} after {e.waited:.0f} "
            f"s: {e.holder}; let it finish, or stop it, then run this again",
            file=sys.stderr,
        )
        return LOCKED_EXIT


def _run(volume: Path, args: argparse.Namespace) -> int:
    """Roll back, or select and maybe publish (under the publish lock)."""
    if args.rollback:
        restored, new = rollback(volume, args.service)
        print(f"rolled back: version {restored} republished as version {new}")
        _print_card(volume, args.service)
        return 0
    try:
        code, _ = select(
            volume,
            args.service,
            min_accuracy=args.min_accuracy,
            force=args.force,
            canary=args.canary,
            code_version=args.code_version,
            source_dir=args.source_dir,
        )
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    _print_card(volume, args.service)
    return code


def _print_card(volume: Path, service: str) -> None:
    """The serving version's model card (what `invoke deploy` and `rollback` show)."""
    record = records.read_publish(contract.serving_record(volume, service))
    for label, text in records.model_card(record):
        print(f"{label}: {text}")
