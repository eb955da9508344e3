"""loadtest/locust_process.py: Locust's process group is stopped on timeout and on Ctrl-C, with
no Locust process left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from loadtest import runner as lt
from loadtest import summary as ls
from tests.support.predict_server import (
    MODEL,
    gone,
    locust_processes,
    predict_server,
    wait_for,
    write_payload,
)

ROOT = Path(__file__).resolve().parents[2]


def test_timeout_stops_locust(tmp_path):
    me = psutil.Process()
    with predict_server("ok") as (url, _handler), pytest.raises(TimeoutError, match="stopped"):
        lt.run_loadtest(
            url,
            MODEL,
            write_payload(tmp_path / "body.json"),
            tmp_path / "out",
            duration="1s",
            timeout_margin_s=0,  # Locust needs longer than that just to start
            log=lambda _: None,
        )
    assert locust_processes(me) == []


@pytest.mark.skipif(os.name != "posix", reason="SIGINT to a child process is POSIX")
def test_ctrl_c_leaves_no_locust_behind(tmp_path):
    payload = write_payload(tmp_path / "body.json")
    out = tmp_path / "out"
    with predict_server("ok") as (url, _handler):
        code = (
            "from loadtest.runner import run_loadtest\n"
            f"run_loadtest({url!r}, {MODEL!r}, {str(payload)!r}, {str(out)!r},"
            " duration='60s')\n"
        )
        runner = subprocess.Popen(
            [sys.executable, "-c", code],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            parent = psutil.Process(runner.pid)
            locusts = wait_for(lambda: locust_processes(parent), 30, "Locust to start")
            # ...and to be sending load (a history row with all 5 users).
            wait_for(
                lambda: any(r.get("User Count") == "5" for r in ls.history(out)),
                30,
                "Locust to run its users",
            )
            runner.send_signal(signal.SIGINT)
            _stdout, stderr = runner.communicate(timeout=30)
        finally:
            if runner.poll() is None:
                runner.kill()
                runner.wait()
    assert runner.returncode != 0
    assert "KeyboardInterrupt" in stderr
    for p in locusts:
        wait_for(lambda p=p: gone(p.pid), 10, f"Locust process {p.pid} to be gone")
