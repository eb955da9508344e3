"""runtime/local/down.py: `down --purge` removes only a work dir distml made."""

from __future__ import annotations

import pytest

from runtime.local import LocalRuntime, UserError
from runtime.requests import DownRequest
from runtime.workdir import Workdir


def test_down_purge_removes_only_a_distml_workdir(tmp_path):
    foreign = tmp_path / "important"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("mine")
    rt = LocalRuntime(Workdir.at(foreign), out=lambda line: None)
    with pytest.raises(UserError, match="not made by distml"):
        rt.down(DownRequest(purge=True))
    assert (foreign / "keep.txt").read_text() == "mine"
    ours = Workdir.at(tmp_path / "ours")
    ours.create()
    LocalRuntime(ours, out=lambda line: None).down(DownRequest(purge=True))
    assert not ours.root.exists()


def test_down_stops_a_canary_server_a_killed_deploy_left(tmp_path):
    # What `deploy --canary` records while the canary's own server runs; a deploy killed
    # outright (SIGKILL) cannot stop it, so `down` does, by its recorded pid and start.
    import subprocess
    import sys

    from runtime.procs import started_at
    from runtime.workdir.state import Server

    wd = Workdir.at(tmp_path / "wd")
    wd.create()
    code = "import time; time.sleep(120)"
    proc = subprocess.Popen(  # its command line holds the step's mark, as the server's does
        [sys.executable, "-c", code, "-m", "ml", "serve", "--model-dir"], start_new_session=True
    )
    try:
        own = Server(proc.pid, "http://127.0.0.1:1", "log", started=started_at(proc.pid))
        wd.update_state(canary_server=own)
        lines: list[str] = []
        LocalRuntime(wd, out=lines.append).down(DownRequest())
        assert proc.wait(timeout=20) is not None
        assert f"stopped the canary's model server (pid {proc.pid})" in lines
        assert wd.state().canary_server is None
    finally:
        proc.kill()
        proc.wait()
