"""Lifecycle benchmark: wall time of each ``invoke`` step on the local runtime, quick profile.

    python benchmarks/lifecycle.py [--data-dir DIR] [--loadtest-duration 30s] [--out PATH]

Runs the project's own ``invoke`` (the one installed next to this Python) as a real
subprocess per step, exactly as a user types it, in a throwaway work dir
(``INVOKE_WORKDIR``; ``INVOKE_RUNTIME=local``; the model server on a free port through
``INVOKE_HTTP_PORT``) with ``DISTML_DATA_DIR`` passed through: ``up`` on a fresh work dir
(cold), ``up`` again (warm), ``train-all``, ``deploy``, ``loadtest``. ``down --purge``
always runs at the end, also after a failure or Ctrl-C, so nothing is left running and the
work dir is gone. A failing step stops the benchmark with its output's tail and exit 1.
One run: each step is a minute or less and runs once (``bench.py`` says so in its table).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ml import contract  # noqa: E402
from runtime.procs import free_ports  # noqa: E402

DEFAULT_LOADTEST_DURATION = "30s"
TAIL_LINES = 40
DOWN = ("down", "--purge")


class LifecycleError(Exception):
    """A step failed (or the teardown did): the message names it and shows its output's tail."""


def invoke_path() -> Path:
    """The ``invoke`` installed beside this interpreter (the project's venv)."""
    found = Path(sys.executable).parent / ("invoke.exe" if os.name == "nt" else "invoke")
    if not found.is_file():
        raise LifecycleError(
            f"no invoke beside {sys.executable}: run this with the project's venv "
            "(nox -s bench, or .nox/shared/bin/python benchmarks/lifecycle.py)"
        )
    return found


def steps(loadtest_duration: str) -> list[tuple[str, list[str]]]:
    """(label, invoke arguments) in order; the quick profile is the one measured."""
    return [
        ("up (cold: fresh work dir)", ["up"]),
        ("up (warm: run again)", ["up"]),
        ("train-all (quick profile)", ["train-all", "--profile", "quick"]),
        ("deploy", ["deploy"]),
        ("loadtest", ["loadtest", "--duration", loadtest_duration]),
    ]


def environment(workdir: Path, data_dir: str | None, http_port: int) -> dict[str, str]:
    env = {
        **os.environ,
        "INVOKE_WORKDIR": str(workdir),
        "INVOKE_RUNTIME": "local",
        "INVOKE_HTTP_PORT": str(http_port),
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "PYTHONUNBUFFERED": "1",
    }
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    if data_dir:
        env[contract.DATA_DIR_ENV] = str(data_dir)
    return env


def _tail(log: Path) -> str:
    lines = log.read_text(errors="replace").splitlines()
    return "\n".join(lines[-TAIL_LINES:])


def run_step(invoke: Path, args: Sequence[str], env: dict[str, str], log: Path) -> float:
    """Wall seconds of ``invoke ARGS`` (output to ``log``); a non-zero exit raises."""
    started = time.monotonic()
    with open(log, "wb") as out:
        code = subprocess.call([str(invoke), *args], cwd=REPO, env=env, stdout=out, stderr=out)
    seconds = time.monotonic() - started
    if code != 0:
        raise LifecycleError(
            f"`invoke {' '.join(args)}` failed (exit {code}) after {seconds:.1f} s; "
            f"the last {TAIL_LINES} lines of its output ({log}):\n{_tail(log)}"
        )
    return seconds


def measure(
    data_dir: str | None,
    loadtest_duration: str = DEFAULT_LOADTEST_DURATION,
    invoke: Path | None = None,
    progress: Callable[[str], None] = print,
    under: Path | None = None,
) -> dict[str, Any]:
    """Every step once, timed, then ``down --purge`` (always); the report as a dict.

    The work dir and the steps' logs go in a new directory ``under`` (default: the system
    temporary directory), removed after a good run and kept, for its logs, after a failure.
    """
    invoke = invoke or invoke_path()
    scratch = Path(tempfile.mkdtemp(prefix="distml-bench-lifecycle-", dir=under))
    workdir = scratch / "workdir"  # made by `up`, so `down --purge` may remove it
    env = environment(workdir, data_dir, free_ports(1)[0])
    rows: list[dict[str, Any]] = []
    failed = True
    try:
        for label, args in steps(loadtest_duration):
            progress(f"lifecycle: invoke {' '.join(args)} ...")
            seconds = run_step(invoke, args, env, scratch / f"{len(rows)}.log")
            rows.append({"step": label, "command": f"invoke {' '.join(args)}", "seconds": seconds})
            progress(f"lifecycle: {label}: {seconds:.1f} s")
        failed = False
    finally:
        rows.append(_teardown(invoke, env, scratch, workdir, failed, progress))
    shutil.rmtree(scratch, ignore_errors=True)
    return {
        "runtime": "local",
        "profile": "quick",
        "workers": contract.DEFAULT_WORKERS,
        "loadtest_duration": loadtest_duration,
        "runs": 1,
        "steps": rows,
    }


def _teardown(
    invoke: Path,
    env: dict[str, str],
    scratch: Path,
    workdir: Path,
    failed: bool,
    progress: Callable[[str], None],
) -> dict[str, Any]:
    """``down --purge``; after a failure its own failure is only reported (the first error
    is the one raised), after success it fails the benchmark."""
    progress(f"lifecycle: invoke {' '.join(DOWN)} ...")
    try:
        seconds = run_step(invoke, DOWN, env, scratch / "down.log")
        if workdir.exists():
            raise LifecycleError(f"`invoke {' '.join(DOWN)}` left the work dir {workdir}")
    except LifecycleError as e:
        if not failed:
            raise
        progress(f"lifecycle: the teardown failed too: {e}")
        return {"step": "down --purge", "command": f"invoke {' '.join(DOWN)}", "seconds": None}
    progress(f"lifecycle: down --purge: {seconds:.1f} s")
    return {"step": "down --purge", "command": f"invoke {' '.join(DOWN)}", "seconds": seconds}


def markdown(report: dict[str, Any]) -> str:
    lines = [
        f"Lifecycle on the {report['runtime']} runtime, {report['profile']} profile, "
        f"{report['workers']} workers per job, loadtest {report['loadtest_duration']}; "
        f"{report['runs']} run (each step once: a minute or less each, so not repeated):",
        "",
        "| step | command | wall s |",
        "|---|---|---|",
    ]
    for row in report["steps"]:
        seconds = "-" if row["seconds"] is None else f"{row['seconds']:.1f}"
        lines.append(f"| {row['step']} | `{row['command']}` | {seconds} |")
    return "\n".join(lines) + "\n"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python benchmarks/lifecycle.py", description=__doc__.split("\n\n")[0]
    )
    p.add_argument(
        "--data-dir",
        default=os.environ.get(contract.DATA_DIR_ENV),
        help="the Fashion-MNIST files (default: $DISTML_DATA_DIR, else as `invoke up` finds them)",
    )
    p.add_argument(
        "--loadtest-duration",
        default=DEFAULT_LOADTEST_DURATION,
        help=f"`invoke loadtest --duration` (default {DEFAULT_LOADTEST_DURATION})",
    )
    p.add_argument("--invoke", type=Path, help="the invoke to run (default: beside this python)")
    p.add_argument("--out", type=Path, help="write the report as JSON here")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        report = measure(args.data_dir, args.loadtest_duration, args.invoke)
    except LifecycleError as e:
        print(f"benchmarks/lifecycle.py: {e}", file=sys.stderr)
        return 1
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
