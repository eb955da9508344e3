"""``deploy --canary`` on the local runtime, before the analysis runs (the analysis and the
real run: tests/runtime/canary/, tests/e2e/test_canary.py): what it refuses and why, what a
dry run says, and what ``status`` shows of a running or ended canary."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from common.errors import DistmlError
from ml import contract
from runtime.canary.live import Live
from runtime.local import LocalRuntime, serving
from runtime.local.canary_deploy import deploy_canary, report_path, status_rows
from runtime.local.serving import in_progress
from runtime.requests import DeployRequest

CANARY = DeployRequest(canary=True)


def canary_version(rt: LocalRuntime, version: int) -> None:
    (Path(contract.canary_dir(rt.wd.volume, rt.service)) / str(version)).mkdir(parents=True)


def test_a_second_deploy_is_refused_while_a_canary_is_in_the_volume(local_rt):
    canary_version(local_rt, 4)
    assert in_progress(local_rt) == 4
    with pytest.raises(DistmlError, match=r"a canary of version 4 is in progress .*Ctrl-C"):
        deploy_canary(local_rt, CANARY)


@pytest.mark.parametrize("verb", ["deploy", "rollback"])
def test_a_plain_deploy_or_rollback_is_refused_too_saying_how_to_end_it(local_rt, verb):
    canary_version(local_rt, 4)
    act = {"deploy": lambda: serving.deploy(local_rt, DeployRequest()),
           "rollback": lambda: serving.rollback(local_rt)}[verb]  # fmt: skip
    with pytest.raises(DistmlError, match=rf"`{verb}` waits for it.*`invoke canary --promote`"):
        act()


def test_without_a_running_server_it_says_to_deploy_first(local_rt):
    with pytest.raises(DistmlError, match=r"no model server is running.*`invoke deploy` first"):
        deploy_canary(local_rt, CANARY)


def test_a_dry_run_shows_the_selection_into_the_canary_directory(tmp_path, local_rt):
    said: list[str] = []
    rt = LocalRuntime(local_rt.wd, out=said.append, dry=True)
    assert deploy_canary(rt, CANARY) == 0
    (line,) = [s for s in said if "-m ml select " in s]
    assert "--canary" in line


def test_status_shows_a_running_canary_then_the_last_ones_outcome(local_rt):
    canary_version(local_rt, 2)
    live = Live(report_path(local_rt), version=2, stable=1, pid=os.getpid())
    live.say(lambda line: None, "[1] canary 10%: traffic pass (80 of 50 requests) -> hold")
    assert status_rows(local_rt) == [
        ("canary", f"version 2 beside version 1, running (pid {os.getpid()})"),
        ("canary last", "[1] canary 10%: traffic pass (80 of 50 requests) -> hold"),
    ]
    live.say(lambda line: None, "promoted: version 2 serves every request")
    live.end()
    (Path(contract.canary_dir(local_rt.wd.volume, local_rt.service)) / "2").rmdir()
    assert status_rows(local_rt) == [
        ("last canary", "version 2 beside version 1: promoted: version 2 serves every request")
    ]
    assert json.loads(report_path(local_rt).read_text())["running"] is False


def test_no_canary_ever_shows_nothing(local_rt):
    assert status_rows(local_rt) == []
