"""runtime/local/__init__.py (LocalRuntime): every task but `up` needs `up` first."""

from __future__ import annotations

import pytest

from runtime.local import LocalRuntime, UserError
from runtime.requests import DeployRequest, LoadtestRequest, TrainRequest
from runtime.workdir import Workdir


def test_tasks_need_up_first(tmp_path):
    rt = LocalRuntime(Workdir.at(tmp_path / "nothing"), out=lambda line: None)
    for call in (
        lambda: rt.train(TrainRequest(models=("cnn",))),
        lambda: rt.deploy(DeployRequest()),
        lambda: rt.loadtest(LoadtestRequest()),
        rt.rollback,
    ):
        with pytest.raises(UserError, match="run `invoke up`"):
            call()
