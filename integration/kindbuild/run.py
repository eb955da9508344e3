"""Running commands: heavy ones politely (nice, ionice, few Go workers), all logged."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

GO = shutil.which("go") or "/usr/local/go/bin/go"
# Parallel Go compile jobs. 2 CPUs and other work on the machine: never more than 2.
GO_JOBS = os.environ.get("DISTML_KIND_GO_JOBS", "2")


class BuildError(RuntimeError):
    """A build step failed; the message names the command."""


def polite(cmd: Sequence[str]) -> list[str]:
    """``cmd`` at the lowest CPU and I/O priority."""
    return ["nice", "-n", "19", "ionice", "-c3", *cmd]


def go_env(**extra: str) -> dict[str, str]:
    """The environment for ``go``: static binaries, module mode, ``-p`` capped."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(GO).parent}:{env.get('PATH', '')}"
    env.update(
        CGO_ENABLED="0",
        GOFLAGS=f"-mod=mod -buildvcs=false -trimpath -p={GO_JOBS}",
        GOTOOLCHAIN="local",
    )
    env.update(extra)
    return env


def run(
    cmd: Sequence[str],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    heavy: bool = False,
    capture: bool = False,
    stdin: bytes | None = None,
) -> str:
    """Run ``cmd``; raise :class:`BuildError` naming it when it fails."""
    argv = polite(cmd) if heavy else list(cmd)
    print("+", shlex.join(argv), flush=True)
    done = subprocess.run(
        argv,
        cwd=cwd,
        env=dict(env) if env is not None else None,
        input=stdin,
        stdout=subprocess.PIPE if capture else None,
        check=False,
    )
    if done.returncode != 0:
        raise BuildError(f"exit {done.returncode}: {shlex.join(argv)}")
    return done.stdout.decode() if capture else ""


def go(*args: str, cwd: Path, env: Mapping[str, str] | None = None) -> str:
    """A heavy ``go`` command in ``cwd``."""
    return run([GO, *args], cwd=cwd, env=env or go_env(), heavy=True)
