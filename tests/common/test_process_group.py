"""common/process_group.py: a stop that is interrupted during its grace still kills the whole
process group."""

from __future__ import annotations

import os
import subprocess
import sys

import psutil
import pytest

from common.process_group import stop_group


@pytest.mark.skipif(sys.platform == "win32", reason="process groups are POSIX")
def test_a_stop_interrupted_during_its_grace_still_kills_the_group():
    # A child that ignores SIGTERM, with a grandchild in its group; a second Ctrl-C arrives
    # while the stop waits out the grace: the group is killed before the interrupt goes on.
    code = (
        "import signal, subprocess, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        "print('up', flush=True); time.sleep(60)"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, start_new_session=True
    )
    assert proc.stdout.readline() == b"up\n"
    group = [p for p in psutil.process_iter() if _group_of(p) == proc.pid]
    assert len(group) == 2
    real_wait, calls = proc.wait, []

    def interrupted_wait(timeout=None):
        calls.append(timeout)
        if len(calls) == 1:
            raise KeyboardInterrupt
        return real_wait(timeout)

    proc.wait = interrupted_wait
    with pytest.raises(KeyboardInterrupt):
        stop_group(proc, grace=5.0)
    assert proc.poll() is not None
    _, alive = psutil.wait_procs(group, timeout=5)
    assert alive == []


def _group_of(process: psutil.Process) -> int | None:
    try:
        return os.getpgid(process.pid)
    except OSError:
        return None
