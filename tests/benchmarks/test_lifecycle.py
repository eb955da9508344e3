"""benchmarks.lifecycle, the bench's lifecycle run, against a fake ``invoke`` script: every step
timed, a failing step stops with its output's tail, and ``down --purge`` runs and is checked
whatever happened, without hiding the first error.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from benchmarks import lifecycle

FAKE_INVOKE = """\
#!{python}
# A stand-in for the project's invoke: records its arguments, acts out the work dir.
import os, shutil, sys
args = sys.argv[1:]
with open(os.environ["FAKE_INVOKE_RECORD"], "a") as f:
    f.write(" ".join(args) + "\\n")
wd = os.environ["INVOKE_WORKDIR"]
if args[0] == "up":
    os.makedirs(wd, exist_ok=True)
if args[0] == os.environ.get("FAKE_INVOKE_FAIL"):
    print("step output line 1")
    print("error: the disk is full (fake)")
    sys.exit(3)
if args[0] == "down" and not os.environ.get("FAKE_INVOKE_KEEP"):
    shutil.rmtree(wd, ignore_errors=True)
"""


@pytest.fixture
def fake_invoke(tmp_path, monkeypatch):
    script = tmp_path / "invoke"
    script.write_text(FAKE_INVOKE.format(python=sys.executable))
    script.chmod(0o755)
    record = tmp_path / "record.txt"
    monkeypatch.setenv("FAKE_INVOKE_RECORD", str(record))
    return script, record


def test_a_failing_step_stops_with_its_tail_and_down_purge_still_runs(
    fake_invoke, monkeypatch, tmp_path
):
    script, record = fake_invoke
    monkeypatch.setenv("FAKE_INVOKE_FAIL", "train-all")
    lines: list[str] = []
    with pytest.raises(lifecycle.LifecycleError) as failed:
        lifecycle.measure("/data", "5s", invoke=script, progress=lines.append, under=tmp_path)
    message = str(failed.value)
    assert "`invoke train-all --profile quick` failed (exit 3)" in message
    assert "error: the disk is full (fake)" in message and "step output line 1" in message
    assert record.read_text().splitlines() == ["up", "up", "train-all --profile quick",
                                               "down --purge"]  # fmt: skip
    assert lines[-1].startswith("lifecycle: down --purge:")
    (kept,) = tmp_path.glob("distml-bench-lifecycle-*")  # the logs, for the message's path
    assert not (kept / "workdir").exists() and "disk is full" in (kept / "2.log").read_text()


def test_a_failing_teardown_after_a_failure_does_not_hide_the_first_error(
    fake_invoke, monkeypatch, tmp_path
):
    script, record = fake_invoke
    monkeypatch.setenv("FAKE_INVOKE_FAIL", "up")
    monkeypatch.setenv("FAKE_INVOKE_KEEP", "1")
    lines: list[str] = []
    with pytest.raises(lifecycle.LifecycleError, match="`invoke up` failed"):
        lifecycle.measure(None, "5s", invoke=script, progress=lines.append, under=tmp_path)
    assert record.read_text().splitlines() == ["up", "down --purge"]
    # down "succeeded" but left the work dir up made: reported, not raised over `up`'s error.
    assert any("the teardown failed too" in line and "left the work dir" in line
               for line in lines)  # fmt: skip


def test_a_run_times_every_step_passes_the_data_dir_and_tears_down(
    fake_invoke, monkeypatch, tmp_path
):
    script, record = fake_invoke
    monkeypatch.setenv("FAKE_INVOKE_FAIL", "none")
    report = lifecycle.measure(
        "/the/data", "7s", invoke=script, progress=lambda line: None, under=tmp_path
    )
    assert record.read_text().splitlines() == [
        "up", "up", "train-all --profile quick", "deploy", "loadtest --duration 7s",
        "down --purge",
    ]  # fmt: skip
    assert [r["command"] for r in report["steps"]][-1] == "invoke down --purge"
    assert all(r["seconds"] > 0 for r in report["steps"])
    assert list(tmp_path.glob("distml-bench-lifecycle-*")) == []  # nothing left behind
    env = lifecycle.environment(Path("/w"), "/the/data", 18123)
    assert env["DISTML_DATA_DIR"] == "/the/data" and env["INVOKE_RUNTIME"] == "local"
    assert env["INVOKE_WORKDIR"] == "/w" and env["INVOKE_HTTP_PORT"] == "18123"


def test_a_teardown_that_leaves_the_work_dir_fails_a_good_run(fake_invoke, monkeypatch, tmp_path):
    script, _ = fake_invoke
    monkeypatch.setenv("FAKE_INVOKE_KEEP", "1")
    with pytest.raises(lifecycle.LifecycleError, match="left the work dir"):
        lifecycle.measure(None, "5s", invoke=script, progress=lambda line: None, under=tmp_path)
