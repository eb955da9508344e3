"""A running canary's traces in the work dir, for both runtimes.

- The **report** (``reports/canary-<service>.json``): the version, the stable, the pid of
  the ``deploy --canary`` that runs it, its last line, and whether it still runs; once it
  ended, its outcome. ``invoke status`` reads it.
- The **control file** (``canary-control``): the word ``invoke canary --promote|--abort``
  leaves for the running deploy, which takes it within a second (``analysis.CONTROL_EVERY_S``).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from runtime.canary.analysis import Result
from runtime.procs import is_alive
from runtime.workdir import Workdir

#: What ``invoke canary`` may tell a running canary.
WORDS = ("promote", "abort")


def report_path(wd: Workdir, service: str) -> Path:
    """The canary's live line and, once it ended, its outcome."""
    return wd.reports / f"canary-{service}.json"


def control_path(wd: Workdir) -> Path:
    return wd.root / "canary-control"


class Live:
    """The running canary's last line, kept in the report for ``invoke status``."""

    def __init__(self, path: Path, **facts: Any) -> None:
        self.path, self.facts = path, {**facts, "started": time.time(), "running": True}

    def say(self, out: Callable[[str], None], line: str) -> None:
        out(line)
        self.facts["last"] = line
        self._write()

    def end(self) -> None:
        self.facts["running"] = False
        self._write()

    def _write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        staging = self.path.with_name(f".{self.path.name}.tmp")
        staging.write_text(json.dumps(self.facts) + "\n")
        os.replace(staging, self.path)


def facts(wd: Workdir, service: str) -> dict[str, Any]:
    """The report's facts ({} when there is none, or it cannot be read)."""
    try:
        found = json.loads(report_path(wd, service).read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def running_pid(found: dict[str, Any]) -> int | None:
    """The pid of the ``deploy --canary`` the report says runs it, when that still runs."""
    pid = found.get("pid")
    if found.get("running") and isinstance(pid, int) and is_alive(pid, "invoke"):
        return pid
    return None


def status_rows(found: dict[str, Any], running: bool) -> list[tuple[str, str]]:
    """The canary in progress (its share and last line), or the last one's outcome."""
    if not found:
        return []
    what = f"version {found.get('version')} beside version {found.get('stable')}"
    if running:
        return [("canary", f"{what}, running (pid {found.get('pid')})"),
                ("canary last", str(found.get("last", "starting")))]  # fmt: skip
    return [("last canary", f"{what}: {found.get('last', '?')}")]


def take_word(wd: Workdir) -> str | None:
    """The word ``invoke canary`` left for the running deploy, taken (once), or None."""
    path = control_path(wd)
    try:
        word = path.read_text().strip()
        path.unlink()
    except OSError:
        return None
    return word if word in WORDS else None


def ended_record(word: str) -> dict[str, Any]:
    """The record of a canary ended by hand with no analysis running."""
    return {
        "decision": "promote" if word == "promote" else "rollback",
        "reason": f"{word} by hand (`invoke canary --{word}`): no analysis was running",
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "intervals": [],
    }


def outcome(
    result: Result, version: int, stable: int, record: str, say: Callable[[str], None]
) -> int:
    """Say how the canary ended; ``deploy --canary``'s exit code (1: rolled back)."""
    if result.promoted:
        say(f"promoted: version {version} serves every request ({result.decision.reason})")
        return 0
    say(
        f"error: version {version} was rolled back ({result.decision.reason}); version "
        f"{stable} serves every request, untouched; its record: {record}"
    )
    return 1


class Unscored:
    """Why the labelled sample could not be scored, said once per reason (it is retried
    every interval; the accuracy gate is Inconclusive meanwhile)."""

    def __init__(self, note: Callable[[str], None]) -> None:
        self.note, self.last = note, ""

    def __call__(self, why: str) -> dict[str, float]:
        if why != self.last:
            self.note(f"accuracy sample not scored: {why}")
            self.last = why
        return {}
