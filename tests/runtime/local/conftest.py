"""Fixtures of the local runtime tests: a LocalRuntime on a work dir that `up` has prepared."""

from __future__ import annotations

import pytest

from runtime.local import LocalRuntime
from runtime.workdir import Workdir


@pytest.fixture
def local_rt(tmp_path):
    wd = Workdir.at(tmp_path / "wd")
    wd.create()
    wd.update_state(up=True, runtime="local")
    return LocalRuntime(wd, out=lambda line: None)
