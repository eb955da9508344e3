"""``invoke deploy --canary`` on the local runtime: select the new version into the canary
directory, let the running server split the traffic, judge it every interval, promote it or
roll it back (``runtime/canary``). One canary at a time: a second ``deploy`` is refused
while one is in the volume."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ml import contract
from runtime.canary.analysis import Result, analyse
from runtime.canary.gates import Thresholds
from runtime.canary.local import LocalCanary
from runtime.local.serving import (
    deploy_lock,
    in_progress,
    refuse_during_canary,
    running_server,
    select_step,
    versions,
)
from runtime.requests import DeployRequest

if TYPE_CHECKING:
    from runtime.local import LocalRuntime


def deploy_canary(rt: LocalRuntime, request: DeployRequest) -> int:
    refuse_during_canary(rt, "deploy")
    with deploy_lock(rt, "invoke deploy --canary"):
        server = running_server(rt)
        if server is None and not rt.ex.dry:
            raise rt.error(
                "no model server is running: a canary is judged against the version serving "
                "now; run `invoke deploy` first"
            )
        serving = versions(rt)
        version = select_step(rt, request, canary=True)
        if server is None or version is None:
            return 0  # a dry run
        if in_progress(rt) != version:
            rt.out(f"no canary: version {serving[-1]} keeps serving (the selection said why)")
            return 0
        canary = LocalCanary(
            url=server.url,
            service=rt.service,
            volume=rt.wd.volume,
            stable=serving[-1],
            version=version,
            step=lambda what, argv: rt.ex.step(what, argv, rt.wd.logs / "canary.log")[0],
            python=rt.python,
            source_dir=rt.wd.state().source_dir,
            note=rt.out,
        )
        policy = request.canary_policy()
        control_path(rt).unlink(missing_ok=True)  # a word left for an earlier canary
        live = Live(report_path(rt), version=version, stable=serving[-1], pid=os.getpid())
        live.say(
            rt.out,
            f"canary: version {version} beside version {serving[-1]}, steps "
            f"{', '.join(f'{w}%' for w in policy.steps)}, judged every {policy.interval_s:g} s "
            f"({policy.count} passes a step); Ctrl-C rolls it back",
        )
        try:
            result = analyse(
                policy, Thresholds(), canary, canary.measure, lambda: take_word(rt), time,
                lambda line: live.say(rt.out, line),
            )  # fmt: skip
            return _said(result, version, serving[-1], lambda line: live.say(rt.out, line), rt)
        finally:
            live.end()


def report_path(rt: LocalRuntime) -> Path:
    """The canary's live line and, once it ended, its outcome (``invoke status`` reads it)."""
    return rt.wd.reports / f"canary-{rt.service}.json"


class Live:
    """The running canary's last line, kept in :func:`report_path` for ``invoke status``."""

    def __init__(self, path: Path, **facts: Any) -> None:
        self.path, self.facts = path, {**facts, "started": time.time(), "running": True}

    def say(self, out: Any, line: str) -> None:
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


def status_rows(rt: LocalRuntime) -> list[tuple[str, str]]:
    """The canary in progress (its share and last line), or the last one's outcome."""
    try:
        facts = json.loads(report_path(rt).read_text())
    except (OSError, ValueError):
        return []
    what = f"version {facts.get('version')} beside version {facts.get('stable')}"
    if facts.get("running") and in_progress(rt) == facts.get("version"):
        return [("canary", f"{what}, running (pid {facts.get('pid')})"),
                ("canary last", str(facts.get("last", "starting")))]  # fmt: skip
    return [("last canary", f"{what}: {facts.get('last', '?')}")]


#: What ``invoke canary`` may tell a running canary (``runtime/local/canary_control.py``).
WORDS = ("promote", "abort")


def control_path(rt: LocalRuntime) -> Path:
    return rt.wd.root / "canary-control"


def take_word(rt: LocalRuntime) -> str | None:
    """The word ``invoke canary`` left for the running deploy, taken (once), or None."""
    path = control_path(rt)
    try:
        word = path.read_text().strip()
        path.unlink()
    except OSError:
        return None
    return word if word in WORDS else None


def _said(result: Result, version: int, stable: int, out: Any, rt: LocalRuntime) -> int:
    if result.promoted:
        out(f"promoted: version {version} serves every request ({result.decision.reason})")
        return 0
    out(
        f"error: version {version} was rolled back ({result.decision.reason}); version "
        f"{stable} serves every request, untouched; its record: "
        f"{contract.rejected_dir(rt.wd.volume, rt.service)}/{version}/{contract.PUBLISH_FILE}"
    )
    return 1
