"""runtime.local.training asks for --bind-loopback: every worker of a local job is on
127.0.0.1, so each listens there only (the flag itself: tests/ml/training/test_loopback.py)."""

from __future__ import annotations

from ml.training import train
from runtime.local import LocalRuntime
from runtime.local.training import _jobs
from runtime.requests import TrainRequest
from runtime.workdir import Workdir


def test_the_local_runtime_asks_for_loopback(tmp_path):
    rt = LocalRuntime(Workdir.at(tmp_path / "wd"), out=lambda line: None)
    (job,) = _jobs(rt, TrainRequest(models=("cnn",)))
    assert train.build_parser().parse_args(job.command[4:]).bind_loopback
