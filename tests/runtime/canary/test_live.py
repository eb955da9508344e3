"""runtime/canary/live.py: the report `status` reads and the word `invoke canary` leaves,
as both runtimes use them."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from runtime.canary import live
from runtime.workdir import Workdir


@pytest.fixture
def wd(tmp_path) -> Workdir:
    w = Workdir.at(tmp_path / "wd")
    w.create()
    return w


def test_a_report_is_running_only_while_its_deploy_runs(wd):
    report = live.Live(live.report_path(wd, "svc"), version=3, stable=2, pid=os.getpid())
    said: list[str] = []
    report.say(said.append, "[1] canary 10%: ...")
    found = live.facts(wd, "svc")
    assert said == ["[1] canary 10%: ..."] and found["last"] == said[0]
    # This test runs under pytest, not invoke: the pid check wants "invoke" in the command.
    assert live.running_pid(found) is None
    assert live.status_rows(found, running=True) == [
        ("canary", f"version 3 beside version 2, running (pid {os.getpid()})"),
        ("canary last", "[1] canary 10%: ..."),
    ]
    report.end()
    assert live.status_rows(live.facts(wd, "svc"), running=False) == [
        ("last canary", "version 3 beside version 2: [1] canary 10%: ...")
    ]


def test_a_live_invoke_process_is_found_and_a_dead_one_is_not(wd):
    from pathlib import Path

    from common.poll import Done, Pending, poll

    child = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)", "invoke"], stdin=subprocess.DEVNULL
    )
    # Popen returns once exec has begun; the kernel sets the new command line a moment later
    # (empty meanwhile, seen under load): wait for it, as a user's `invoke` would have.
    cmdline = Path(f"/proc/{child.pid}/cmdline")
    shown = poll(cmdline.read_bytes, lambda b: Done() if b"invoke" in b else Pending(),
                 timeout=10, interval=0.01)  # fmt: skip
    try:
        assert isinstance(shown, Done), "the child never showed its command line"
        assert live.running_pid({"running": True, "pid": child.pid}) == child.pid
        assert live.running_pid({"running": False, "pid": child.pid}) is None
    finally:
        child.kill()
        child.wait()
    assert live.running_pid({"running": True, "pid": child.pid}) is None
    assert live.running_pid({"running": True, "pid": "1"}) is None


def test_no_report_or_a_broken_one_shows_nothing(wd):
    assert live.facts(wd, "svc") == {} and live.status_rows({}, running=False) == []
    live.report_path(wd, "svc").parent.mkdir(parents=True, exist_ok=True)
    live.report_path(wd, "svc").write_text("[1, 2")
    assert live.facts(wd, "svc") == {}
    live.report_path(wd, "svc").write_text("[1, 2]")
    assert live.facts(wd, "svc") == {}


def test_a_word_is_taken_once_and_only_a_known_one(wd):
    live.control_path(wd).write_text("promote\n")
    assert live.take_word(wd) == "promote" and live.take_word(wd) is None
    live.control_path(wd).write_text("explode\n")
    assert live.take_word(wd) is None and not live.control_path(wd).exists()


def test_a_record_by_hand_says_so():
    record = live.ended_record("abort")
    assert record["decision"] == "rollback" and record["intervals"] == []
    assert record["reason"] == "abort by hand (`invoke canary --abort`): no analysis was running"
