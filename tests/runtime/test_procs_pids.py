"""runtime/procs.py, by command line: a pid is ours only while its command line carries our tag,
a zombie counts as dead, and ``stop_pid`` stops only a process that is ours."""

from __future__ import annotations

import subprocess
import sys

import psutil

from common.poll import Done, Pending, poll
from runtime.procs import cmdline, is_alive, stop_pid

TAG = "distml-procs-test"


def sleeper(tag: str = TAG) -> subprocess.Popen:
    """A detached process (its own group) whose command line carries ``tag`` (Popen returns
    during the exec, before the kernel shows the new command line: wait for it)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", tag], start_new_session=True
    )
    shown = poll(
        lambda: cmdline(proc.pid),
        lambda line: Done() if tag in line else Pending(line),
        timeout=30,
        interval=0.02,
    )
    assert shown == Done(), shown
    return proc


def test_a_pid_is_ours_only_while_its_command_line_has_the_tag():
    proc = sleeper()
    try:
        assert TAG in cmdline(proc.pid)
        assert is_alive(proc.pid, TAG) and is_alive(proc.pid)
        assert not is_alive(proc.pid, "another-tag")  # a recycled pid is someone else's
        assert not is_alive(0) and not is_alive(-1)
    finally:
        proc.kill()
        proc.wait()
    assert not is_alive(proc.pid) and cmdline(proc.pid) == ""


def test_a_zombie_counts_as_dead():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])  # exits; not reaped yet
    try:
        became = poll(
            lambda: psutil.Process(proc.pid).status(),
            lambda status: Done() if status == psutil.STATUS_ZOMBIE else Pending(status),
            timeout=30,
            interval=0.05,
        )
        assert became == Done()
        assert not is_alive(proc.pid) and cmdline(proc.pid) == ""
    finally:
        proc.wait()


def test_stop_pid_stops_only_a_process_that_is_ours():
    proc = sleeper()
    try:
        assert stop_pid(proc.pid, "another-tag", grace=1.0) is False
        assert proc.poll() is None  # not ours: left alone
        assert stop_pid(proc.pid, TAG, grace=5.0) is True
        assert not is_alive(proc.pid)  # gone (and reaped) before stop_pid returned
    finally:
        proc.kill()
        proc.wait()
