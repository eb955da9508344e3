"""``invoke canary --promote|--abort`` on the local runtime: told to a running
``deploy --canary`` (which acts on it within a second), or, with none running, the canary
ended here through the real ``ml.selection.canary_publish``."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from common.errors import DistmlError
from ml import contract
from runtime.canary.live import Live, control_path, take_word
from runtime.local import LocalRuntime
from runtime.local.canary_control import control
from runtime.local.canary_deploy import report_path


def canary_version(rt: LocalRuntime, version: int) -> Path:
    path = Path(contract.canary_dir(rt.wd.volume, rt.service)) / str(version)
    path.mkdir(parents=True)
    (path / contract.PUBLISH_FILE).write_text(json.dumps({"version": version, "canary": True}))
    return path


def test_with_no_canary_it_says_how_to_start_one(local_rt):
    with pytest.raises(DistmlError, match=r"no canary is in progress; `invoke deploy --canary`"):
        control(local_rt, "abort")


def test_a_running_deploy_is_told_and_its_outcome_shown(local_rt):
    canary_version(local_rt, 2)
    # A process whose command line says invoke stands in for the running deploy.
    deploy = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "invoke"])
    said: list[str] = []
    rt = LocalRuntime(local_rt.wd, out=said.append)
    live = Live(report_path(rt), version=2, stable=1, pid=deploy.pid)
    live.say(lambda line: None, "[1] canary 10%: ... -> hold (pass 1 of 2)")

    def the_deploy_loop():  # what analyse does with the word, each second
        while (word := take_word(rt.wd)) is None:
            threading.Event().wait(0.05)
        live.say(lambda line: None, f"promoted: version 2 serves every request ({word} by hand)")
        live.end()

    loop = threading.Thread(target=the_deploy_loop)
    loop.start()
    try:
        assert control(rt, "promote") == 0
    finally:
        loop.join(timeout=10)
        deploy.kill()
    assert said[-1] == "promoted: version 2 serves every request (promote by hand)"
    assert not control_path(rt.wd).exists(), "the word is taken once"


def test_with_no_deploy_running_it_ends_the_canary_itself_with_a_record(local_rt):
    canary_version(local_rt, 2)
    Live(report_path(local_rt), version=2, stable=1, pid=999_999_999).end()  # a killed deploy
    assert control(local_rt, "abort") == 0
    rejected = Path(contract.rejected_dir(local_rt.wd.volume, local_rt.service)) / "2"
    record = json.loads((rejected / contract.PUBLISH_FILE).read_text())["rejected"]
    assert record["reason"] == "abort by hand (`invoke canary --abort`): no analysis was running"
    assert not (Path(contract.canary_dir(local_rt.wd.volume, local_rt.service)) / "2").exists()


def test_an_unknown_word_in_the_control_file_is_ignored(local_rt):
    control_path(local_rt.wd).write_text("explode\n")
    assert take_word(local_rt.wd) is None
