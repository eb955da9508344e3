"""tasks/__init__.py (the task collection) through ``python -m invoke``: `invoke --list` is fast
and lists the lifecycle, and bad flags exit non-zero with a message."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from runtime.workdir import Workdir

REPO = Path(__file__).resolve().parents[2]


def invoke(*args: str, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    import os

    env = dict(os.environ, **(env_extra or {}))
    return subprocess.run(
        [sys.executable, "-m", "invoke", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_invoke_list_is_fast_and_lists_the_lifecycle():
    result = invoke("--list")
    assert result.returncode == 0
    for name in ("up", "train-all", "train", "deploy", "rollback", "loadtest", "status", "down"):
        assert f"  {name} " in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["train-all", "--workers", "two"], "--workers must be a whole number, got 'two'"),
        (["train"], "--model-type is required"),
        (["up", "--runtime", "k8s"], "unknown runtime 'k8s'"),
        (["deploy", "--predictor", "onnx"], "--predictor must be one of kserve, tfserving"),
    ],
    ids=["non-numeric workers", "train without a model", "unknown runtime", "unknown predictor"],
)
def test_bad_flags_exit_non_zero_with_a_message(tmp_path, args, message):
    wd = Workdir.at(tmp_path / "wd")
    wd.create()
    wd.update_state(up=True, runtime="local")
    result = invoke(*args, env_extra={"INVOKE_WORKDIR": str(wd.root)})
    assert result.returncode != 0
    assert message in result.stderr
