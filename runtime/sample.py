"""The sample request the tasks print and the load test sends, written by the ``ml.sample``
pod-contract step (this side imports nothing from ``ml/`` but ``ml.contract``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from common.errors import DistmlError

REPO = Path(__file__).resolve().parents[1]


def write_sample_request(
    root: Path, source_dir: str | None, out: Callable[[str], None], *, synthetic_ok: bool = False
) -> Path:
    """``root/sample-request.json`` (and ``root/sample.png``), written by ``ml.sample`` unless
    the request is there already.

    Raises:
        DistmlError: the step failed (no Fashion-MNIST files and not ``synthetic_ok``); the
            message is the step's own.
    """
    from ml import contract  # when needed: importing runtime/ loads nothing from ml/

    request = root / contract.SAMPLE_REQUEST
    if request.is_file():
        return request
    argv = contract.sample(root, source_dir, synthetic_ok=synthetic_ok, python=sys.executable)
    done = subprocess.run(
        argv, capture_output=True, text=True, stdin=subprocess.DEVNULL, env=_step_env()
    )
    if done.returncode != 0:
        reason = done.stderr.strip() or f"python -m ml.sample exited with {done.returncode}"
        raise DistmlError(reason)
    written = json.loads(done.stdout.strip().splitlines()[-1])
    out(f"sample input: {written['png']} ({written['what']})")
    return Path(written["request"])


def _step_env() -> dict[str, str]:
    """This process's environment with the repository on PYTHONPATH (``ml`` importable)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env
