"""Pick the most accurate candidate and publish it for serving (or roll back).

    python -m ml.select --volume V --service S [--min-accuracy A] [--force]
    python -m ml.select --volume V --service S --rollback

Every candidate in ``V/candidates/*`` is evaluated on the test split; the scores, the
winner and the reason go to ``V/reports/selection.json``. The winner is published as
``V/serving/S/<previous + 1>/`` (TF Serving layout) only if it reaches ``--min-accuracy``
and is not worse than the version serving now (unless ``--force``). Publishing copies to
a hidden temporary directory beside the target and renames it, so a server polling the
directory never sees half a model.

Exit codes: 0 published or kept the better serving version; 1 nothing usable or below
``--min-accuracy`` (what was serving stays serving); 2 bad arguments or no data.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ml import contract
from ml.contract import DEFAULT_SERVICE, PUBLISH_FILE
from ml.evaluate import CandidateError, evaluate_saved_model, load_test_arrays


def serving_versions(serving_dir: Path) -> list[int]:
    """Integer version directories under ``serving_dir``, ascending (TF Serving's rule)."""
    if not serving_dir.is_dir():
        return []
    return sorted(int(p.name) for p in serving_dir.iterdir() if p.is_dir() and p.name.isdigit())


def _write_json_atomic(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)


def publish(source: Path, serving_dir: Path, record: dict[str, Any]) -> int:
    """Copy ``source`` to ``serving_dir/<latest + 1>`` atomically; return the new version."""
    serving_dir.mkdir(parents=True, exist_ok=True)
    versions = serving_versions(serving_dir)
    version = (versions[-1] + 1) if versions else 1
    tmp = Path(tempfile.mkdtemp(prefix=f".publish-{version}-", dir=serving_dir))
    try:
        staged = tmp / "model"
        shutil.copytree(source, staged, ignore=shutil.ignore_patterns(PUBLISH_FILE))
        record = {
            **record,
            "version": version,
            "previous": versions[-1] if versions else None,
            "published_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        (staged / PUBLISH_FILE).write_text(json.dumps(record, indent=2) + "\n")
        os.rename(staged, serving_dir / str(version))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return version


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
    )
    # The republished copy inherits the restored version's own predecessor, so a second
    # rollback keeps walking back the history instead of toggling.
    record_path = serving_dir / str(new) / PUBLISH_FILE
    record = json.loads(record_path.read_text())
    record["previous"] = restored.get("previous")
    record_path.write_text(json.dumps(record, indent=2) + "\n")
    return previous, new


def select(
    volume: Path,
    service: str,
    *,
    min_accuracy: float = 0.0,
    force: bool = False,
    source_dir: str | None = None,
    log: Any = print,
) -> tuple[int, dict[str, Any]]:
    """Evaluate, decide, maybe publish. Returns (exit code, the selection report)."""
    candidates_dir = Path(contract.candidates_dir(volume))
    serving_dir = Path(contract.serving_dir(volume, service))
    names = _candidate_names(candidates_dir)
    report: dict[str, Any] = {
        "service": service,
        "min_accuracy": min_accuracy,
        "forced": force,
        "candidates": [],
        "winner": None,
        "published": False,
        "version": None,
    }
    if not names:
        report["reason"] = f"no candidates in {candidates_dir}; run training first"
        return _finish(volume, report, 1, log)

    images, labels = load_test_arrays(volume, source_dir, log=log)
    report["test_examples"] = len(labels)
    report["candidates"] = _evaluate_candidates(candidates_dir, names, images, labels, log)
    usable = [c for c in report["candidates"] if c["status"] == "ok"]
    current = _evaluate_serving(serving_dir, images, labels)
    if current is not None:
        report["serving_before"] = current
    if not usable:
        report["reason"] = "no usable candidate (every one was missing or corrupt)"
        return _finish(volume, report, 1, log)

    winner = max(usable, key=lambda c: (c["accuracy"], -names.index(c["model_type"])))
    report["winner"] = winner["model_type"]
    code = _judge_and_publish(
        report, winner, current, candidates_dir, serving_dir, min_accuracy, force, log
    )
    return _finish(volume, report, code, log)


def _candidate_names(candidates_dir: Path) -> list[str]:
    """The candidate directories' names, sorted (hidden ones are exports in progress)."""
    if not candidates_dir.is_dir():
        return []
    return sorted(
        p.name for p in candidates_dir.iterdir() if p.is_dir() and not p.name.startswith(".")
    )


def _evaluate_candidates(
    candidates_dir: Path, names: list[str], images: Any, labels: Any, log: Any
) -> list[dict[str, Any]]:
    """One report entry per candidate: its scores (``status: ok``) or why it was skipped."""
    entries = []
    for name in names:
        entry: dict[str, Any] = {"model_type": name, "path": str(candidates_dir / name)}
        try:
            entry.update(evaluate_saved_model(candidates_dir / name, images, labels))
            entry["status"] = "ok"
            log(f"candidate {name}: test accuracy {entry['accuracy']:.4f}")
        except CandidateError as e:
            entry.update(status="skipped", error=str(e))
            log(f"candidate {name}: skipped: {e}")
        entries.append(entry)
    return entries


def _evaluate_serving(serving_dir: Path, images: Any, labels: Any) -> dict[str, Any] | None:
    """The version serving now and its scores (or its load error); None if none is."""
    versions = serving_versions(serving_dir)
    if not versions:
        return None
    current: dict[str, Any] = {"version": versions[-1]}
    try:
        current.update(evaluate_saved_model(serving_dir / str(versions[-1]), images, labels))
    except CandidateError as e:
        current["error"] = str(e)
    return current


def _judge_and_publish(
    report: dict[str, Any],
    winner: dict[str, Any],
    current: dict[str, Any] | None,
    candidates_dir: Path,
    serving_dir: Path,
    min_accuracy: float,
    force: bool,
    log: Any,
) -> int:
    """Publish the winner unless it is below ``min_accuracy`` or worse than what serves
    (``force`` overrides both); record the outcome in ``report``; return the exit code."""
    name, acc = winner["model_type"], winner["accuracy"]
    serving_acc = current.get("accuracy") if current else None
    if acc < min_accuracy and not force:
        report["reason"] = (
            f"best candidate {name} scores {acc:.4f}, below "
            f"--min-accuracy {min_accuracy:.4f}; nothing published"
        )
        return 1
    if serving_acc is not None and acc < serving_acc and not force:
        report["version"] = current["version"]
        report["reason"] = (
            f"kept version {current['version']} ({serving_acc:.4f}): best "
            f"candidate {name} scores {acc:.4f}, which is worse "
            "(use --force to publish it anyway)"
        )
        return 0
    why = f"{name} has the highest test accuracy ({acc:.4f})"
    if serving_acc is not None:
        why += f", not worse than serving version {current['version']} ({serving_acc:.4f})"
    if force:
        why += " [forced]"
    version = publish(
        candidates_dir / name, serving_dir, {"source": f"candidate {name}", "accuracy": acc}
    )
    report.update(published=True, version=version, reason=why)
    log(f"published {name} as {serving_dir / str(version)}")
    return 0


def _finish(volume: Path, report: dict[str, Any], code: int, log: Any) -> tuple[int, dict]:
    report["time"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    _write_json_atomic(Path(contract.selection_report(volume)), report)
    log(("" if code == 0 else "error: ") + report["reason"])
    return code, report


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m ml.select",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--volume", required=True, help="volume root (the PVC mount)")
    p.add_argument(
        "--service", default=DEFAULT_SERVICE, help="service (model) name to publish under"
    )
    p.add_argument(
        "--min-accuracy",
        type=float,
        default=0.0,
        help="refuse to publish a winner below this test accuracy (0-1)",
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
    p.add_argument("--source-dir", help="raw Fashion-MNIST files, when V/datasets/ is not ready")
    return p


def main(argv: list[str] | None = None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    if not 0.0 <= args.min_accuracy <= 1.0:
        p.error(f"--min-accuracy must be between 0 and 1 (a fraction), got {args.min_accuracy}")
    volume = Path(args.volume)
    if args.rollback:
        restored, new = rollback(volume, args.service)
        print(f"rolled back: version {restored} republished as version {new}")
        return 0
    from ml.data import DataError

    try:
        code, _ = select(
            volume,
            args.service,
            min_accuracy=args.min_accuracy,
            force=args.force,
            source_dir=args.source_dir,
        )
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return code


if __name__ == "__main__":
    sys.exit(main())
