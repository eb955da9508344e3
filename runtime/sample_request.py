"""The sample request the tasks print and the load test sends, written by the ``ml.data.sample``
pod-contract step (this side imports nothing from ``ml/`` but ``ml.contract``)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from common.errors import DistmlError
from ml import contract
from runtime.procs import python_env


def write_sample_request(
    root: Path, source_dir: str | None, out: Callable[[str], None], *, synthetic_ok: bool = False
) -> Path:
    """``root/sample-request.json`` (and ``root/sample.png``), written by ``ml.data.sample`` unless
    the request is there already.

    Raises:
        DistmlError: the step failed (no Fashion-MNIST files and not ``synthetic_ok``); the
            message is the step's own.
    """
    request = root / contract.SAMPLE_REQUEST
    if request.is_file():
        return request
    argv = contract.sample(root, source_dir, synthetic_ok=synthetic_ok, python=sys.executable)
    done = subprocess.run(
        argv, capture_output=True, text=True, stdin=subprocess.DEVNULL, env=python_env()
    )
    if done.returncode != 0:
        reason = done.stderr.strip() or f"python -m ml sample exited with {done.returncode}"
        raise DistmlError(reason)
    written = json.loads(done.stdout.strip().splitlines()[-1])
    out(f"sample input: {written['png']} ({written['what']})")
    return Path(written["request"])
