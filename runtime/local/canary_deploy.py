"""``invoke deploy --canary`` on the local runtime: select the new version into the canary
directory, start the canary's own model server, let the running server forward the
canary's share to it, judge it every interval, promote it or roll it back
(``runtime/canary``). One canary at a time: a second ``deploy`` is refused while one is in
the volume.

The canary's own server (``logs/canary-serve.log``) is a second ``ml serve`` of the canary
directory on a free loopback port, at a lower CPU priority (``nice``): its own TensorFlow
threads, memory and batcher, so a slow, leaking or crashing canary cannot slow or stop
the stable, and the stable's figures stay a baseline the canary cannot distort. It is
stopped when the canary ends, however it ends (``invoke down`` stops one left by a
``deploy`` killed outright)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from common.errors import DistmlError
from ml import contract
from runtime.canary import live
from runtime.canary.analysis import Result, analyse
from runtime.canary.gates import Thresholds
from runtime.canary.live import Live
from runtime.canary.local import LocalCanary
from runtime.canary.policy import Action, Decision
from runtime.local.serving import (
    READY_TIMEOUT_S,
    SERVER_TAG,
    deploy_lock,
    in_progress,
    launch,
    refuse_during_canary,
    running_server,
    select_step,
    versions,
)
from runtime.procs import free_ports, stop_pid
from runtime.requests import DeployRequest

if TYPE_CHECKING:
    from runtime.local import LocalRuntime

#: The canary's server's niceness: under load the stable gets the CPU first.
CANARY_NICE = 10


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
        with canary_server(rt, canary) as canary.endpoint:
            return _judge(rt, request, canary, serving[-1], version)


@contextmanager
def canary_server(rt: LocalRuntime, canary: LocalCanary) -> Iterator[str]:
    """The canary's own model server, for the time of the block: its URL. One that does
    not start rolls the canary back, with the reason in its record."""
    (port,) = free_ports(1)
    cmd = contract.serve(
        contract.canary_dir(rt.wd.volume, rt.service), rt.service, host="127.0.0.1",
        http_port=port, python=rt.python,
    )  # fmt: skip
    try:
        own = launch(
            rt, "canary's model server", ["nice", "-n", str(CANARY_NICE), *cmd], port,
            "canary-serve.log", "canary_server", READY_TIMEOUT_S,
        )  # fmt: skip
    except DistmlError as e:
        canary.rollback(Result(Decision(Action.ROLLBACK, 0, f"its server did not start: {e}")))
        raise
    assert own is not None  # not a dry run: the selection ran
    try:
        yield own.url
    finally:
        stop_pid(own.pid, SERVER_TAG, grace=5.0, started=own.started)
        rt.wd.update_state(canary_server=None)


def _judge(
    rt: LocalRuntime, request: DeployRequest, canary: LocalCanary, stable: int, version: int
) -> int:
    """The analysis of ``version`` beside ``stable``, its live lines and its outcome."""
    policy = request.canary_policy()
    live.control_path(rt.wd).unlink(missing_ok=True)  # a word left for an earlier canary
    report = Live(report_path(rt), version=version, stable=stable, pid=os.getpid())
    report.say(
        rt.out,
        f"canary: version {version} beside version {stable}, in a server of its own, steps "
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
            result, version, stable, f"{where}/{contract.PUBLISH_FILE}",
            lambda line: report.say(rt.out, line),
        )  # fmt: skip
    finally:
        report.end()


def report_path(rt: LocalRuntime) -> Path:
    return live.report_path(rt.wd, rt.service)


def status_rows(rt: LocalRuntime) -> list[tuple[str, str]]:
    """The canary in progress (its share and last line), or the last one's outcome."""
    found = live.facts(rt.wd, rt.service)
    running = bool(found.get("running")) and in_progress(rt) == found.get("version")
    return live.status_rows(found, running)
