"""How the local runtime starts processes: for real, or (``invoke --dry``) printed only.

Every process the local runtime runs goes through one :class:`Executor`, so a dry run
walks the same code as a real one and prints each command (a worker's ``TF_CONFIG``
included) instead of starting it. Anything else that would change the machine (a
directory made or removed, a process stopped) asks :meth:`Executor.act` first.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

from runtime.procs import python_env

Out = Callable[[str], None]

# TensorFlow's C++ start-up noise: dropped from what the user sees (the logs keep it).
NOISE = (
    "I0000",
    "W0000",
    "E0000",
    "WARNING: All log messages",
    "To enable the following",
    "oneDNN custom operations",
    "rebuild TensorFlow",
    "cuda_",
    "Unable to register",
)


def interesting(line: str) -> bool:
    return bool(line.strip()) and not any(n in line for n in NOISE)


def shown(cmd: Sequence[str]) -> str:
    """A command as the user reads it: ``python -m ml train ...`` whatever the interpreter
    (the first word that names one; ``nice -n 10 python -m ml serve ...`` keeps its prefix)."""
    words = list(cmd)
    for i, word in enumerate(words):
        if Path(word).name.startswith("python"):
            words[i] = "python"
            break
    return " ".join(words)


class Executor:
    """Starts processes (``dry=False``) or says what it would start (``dry=True``)."""

    def __init__(self, out: Out, *, dry: bool = False) -> None:
        self.out = out
        self.dry = dry

    def act(self, what: str) -> bool:
        """True when the caller should go ahead; dry: prints ``would <what>``, False."""
        if self.dry:
            self.out(f"would {what}")
        return not self.dry

    def say(self, what: str, cmd: Sequence[str], env: str = "") -> None:
        self.out(f"would run ({what}): {env}{shown(cmd)}")

    def step(self, what: str, cmd: Sequence[str], log_path: Path | None = None) -> tuple[int, str]:
        """Run a step in the foreground, echoing its output; (exit code, output)."""
        if self.dry:
            self.say(what, cmd)
            return 0, ""
        self.out(f"{what}: {shown(cmd)}")
        lines: list[str] = []
        with (
            open(log_path or os.devnull, "a") as log,
            subprocess.Popen(
                list(cmd),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                text=True,
                errors="replace",
                env=python_env(),
            ) as proc,
        ):
            assert proc.stdout is not None
            for line in proc.stdout:
                log.write(line)
                if interesting(line):
                    self.out("  " + line.rstrip())
                lines.append(line)
            code = proc.wait()
        return code, "".join(lines)

    def background(self, what: str, cmd: Sequence[str], log_path: Path) -> subprocess.Popen | None:
        """Start a detached process (its own process group) logging to ``log_path``."""
        if self.dry:
            self.say(f"{what}, in the background", cmd)
            return None
        with log_path.open("a") as log:
            proc = subprocess.Popen(
                list(cmd),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=python_env(),
                start_new_session=True,
            )
        self.out(f"{what} starting (pid {proc.pid}): {shown(cmd)}")
        return proc

    def say_workers(self, name: str, cmd: Sequence[str], workers: int) -> None:
        """Dry: each worker's command with the TF_CONFIG it would get."""
        peers = [f"127.0.0.1:<port{i}>" for i in range(workers)]
        for i in range(workers):
            config = json.dumps(
                {"cluster": {"worker": peers}, "task": {"type": "worker", "index": i}}
            )
            self.say(f"{name} worker {i}", cmd, env=f"TF_CONFIG='{config}' ")
