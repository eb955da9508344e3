"""The one way tests run a task: ``python -m invoke ARGS`` in the repository, on a work dir
of the test's own, with extra settings as environment variables (``INVOKE_…``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def invoke_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "invoke", *args]


def invoke_env(wd: Path, **settings: str) -> dict[str, str]:
    return {**os.environ, "INVOKE_WORKDIR": str(wd), **settings}


def invoke(
    wd: Path, *args: str, timeout: float = 120, **settings: str
) -> subprocess.CompletedProcess:
    """Run the task and return what it did; the command and its output are printed, which
    pytest shows for a failing test only."""
    result = subprocess.run(
        invoke_command(*args),
        cwd=REPO,
        env=invoke_env(wd, **settings),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    print(f"$ invoke {' '.join(args)}  -> {result.returncode}\n{result.stdout}\n{result.stderr}")
    return result
