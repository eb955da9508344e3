"""``invoke deploy --canary`` on the local runtime: select the new version into the canary
directory, let the running server split the traffic, judge it every interval, promote it or
roll it back (``runtime/canary``). One canary at a time: a second ``deploy`` is refused
while one is in the volume."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ml import contract
from runtime.canary import live
from runtime.canary.analysis import analyse
from runtime.canary.gates import Thresholds
from runtime.canary.live import Live
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
        live.control_path(rt.wd).unlink(missing_ok=True)  # a word left for an earlier canary
        report = Live(report_path(rt), version=version, stable=serving[-1], pid=os.getpid())
        report.say(
            rt.out,
            f"canary: version {version} beside version {serving[-1]}, steps "
            f"{', '.join(f'{w}%' for w in policy.steps)}, judged every {policy.interval_s:g} s "
            f"({policy.count} passes a step); Ctrl-C rolls it back",
        )
        try:
            result = analyse(
                policy, Thresholds(), canary, canary.measure, lambda: live.take_word(rt.wd), time,
                lambda line: report.say(rt.out, line),
            )  # fmt: skip
            where = f"{contract.rejected_dir(rt.wd.volume, rt.service)}/{version}"
            return live.outcome(
                result,
                version,
                serving[-1],
                f"{where}/{contract.PUBLISH_FILE}",
                lambda line: report.say(rt.out, line),
            )
        finally:
            report.end()


def report_path(rt: LocalRuntime) -> Path:
    return live.report_path(rt.wd, rt.service)


def status_rows(rt: LocalRuntime) -> list[tuple[str, str]]:
    """The canary in progress (its share and last line), or the last one's outcome."""
    found = live.facts(rt.wd, rt.service)
    running = bool(found.get("running")) and in_progress(rt) == found.get("version")
    return live.status_rows(found, running)
