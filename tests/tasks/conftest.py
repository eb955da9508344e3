"""Fixtures of the task tests: a work dir that `up` has prepared for the local runtime."""

from __future__ import annotations

import pytest

from runtime.workdir import Workdir


@pytest.fixture
def wd(tmp_path):
    workdir = Workdir.at(tmp_path / "wd")
    workdir.create()
    workdir.update_state(up=True, runtime="local")
    return workdir.root
