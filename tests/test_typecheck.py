"""The type checker in ``nox -s lint`` (mypy, ``[tool.mypy]`` in pyproject.toml) reads
everything a tier runs, and catches the call that once broke ``integration_existing``
while CI stayed green: a session calling a helper without an argument it had gained."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

from tests.test_layout import OURS

REPO = Path(__file__).resolve().parents[1]


def test_mypy_reads_every_package_of_ours_and_the_noxfile():
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mypy"]
    assert set(config["files"]) == {*OURS, "noxfile.py"}


def test_mypy_catches_a_session_calling_a_helper_without_an_argument(tmp_path):
    source = (REPO / "noxfile.py").read_text()
    broken = source.replace('_offline_node(session, "kind")', "_offline_node(session)")
    assert broken != source, "the call this test breaks is gone: break another"
    path = tmp_path / "noxfile.py"
    path.write_text(broken)
    config = ["--config-file", str(REPO / "pyproject.toml")]
    done = subprocess.run(
        [sys.executable, "-m", "mypy", *config, "--no-incremental", str(path)],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert 'Missing positional argument "provider" in call to "_offline_node"' in done.stdout
