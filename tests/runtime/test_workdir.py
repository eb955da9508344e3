"""runtime/workdir/__init__.py: a work dir is ours only once ``create`` has marked it (what
`down --purge` checks before removing anything), and its state goes through state.json."""

from __future__ import annotations

from runtime.workdir import Workdir
from runtime.workdir.state import State


def test_create_marks_the_work_dir_as_ours_once(tmp_path):
    wd = Workdir.at(tmp_path / "wd")
    assert not wd.exists()
    assert wd.create() is True
    assert wd.exists() and wd.volume.is_dir() and wd.logs.is_dir() and wd.reports.is_dir()
    assert wd.create() is False  # already ours: nothing new
    (tmp_path / "plain").mkdir()
    assert not Workdir.at(tmp_path / "plain").exists()  # a directory alone is not ours


def test_state_is_read_and_written_through_state_json(tmp_path):
    wd = Workdir.at(tmp_path / "wd")
    assert wd.state() == State()
    wd.create()
    assert wd.update_state(up=True, runtime="local") == State(up=True, runtime="local")
    assert wd.state_path.is_file() and wd.state().runtime == "local"
