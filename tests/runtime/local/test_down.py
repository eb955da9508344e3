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
