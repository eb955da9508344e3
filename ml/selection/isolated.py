"""Evaluate SavedModels in a child process, so that a model that kills the process judging
it is one skipped candidate, not the end of the selection.

A SavedModel can crash the interpreter that loads or runs it: TensorFlow's ``Abort`` op, a
failed CHECK in a kernel (SIGABRT), a segfault in native code (SIGSEGV), the kernel's OOM
killer (SIGKILL). No ``except`` catches those. ``IsolatedEvaluator`` keeps one child
process (multiprocessing's ``spawn``: a fresh interpreter, none of the parent's TensorFlow
state) and hands it one SavedModel at a time; the child answers with
``ml.selection.evaluate.evaluate_saved_model``'s scores or its ``CandidateError``. When the
child dies instead, ``evaluate`` raises ``CandidateError`` naming the signal (or exit
status), and the next call starts a fresh child. The child's TensorFlow start-up (a few
seconds) is paid once per selection, and once more after each death.
"""

from __future__ import annotations

import signal
import traceback
from contextlib import suppress
from multiprocessing import get_context
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

from ml.selection.evaluate import CandidateError, evaluate_saved_model

#: Seconds a child may take to exit once its connection is closed (it is idle then, or
#: already dead); after that it is killed.
EXIT_WAIT_S = 10.0


class IsolatedEvaluator:
    """``evaluate_saved_model`` in a child process that may die; a context manager that
    ends its child on exit."""

    def __init__(self) -> None:
        self._child: tuple[BaseProcess, Connection] | None = None

    def __enter__(self) -> IsolatedEvaluator:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def evaluate(self, path: str | Path, images: Any, labels: Any) -> dict[str, float]:
        """``evaluate_saved_model(path, images, labels)``, run by the child.

        Raises:
            CandidateError: the child's (the model cannot be served or scored), or the
                child died while evaluating it: which signal killed it.
            RuntimeError: the child failed otherwise (a bug), with its traceback.
        """
        process, conn = self._child or self._start()
        answer = None
        with suppress(EOFError, OSError):  # it died before reading, or before answering
            conn.send((str(path), images, labels))
            if conn in wait([conn, process.sentinel]):  # an answer, or the child's death
                answer = conn.recv()
        if answer is None:
            raise CandidateError(f"{path}: {self._died()}")
        status, value = answer
        if status == "ok":
            return value
        if status == "candidate":
            raise CandidateError(value)
        raise RuntimeError(f"evaluating {path} failed in the child process:\n{value}")

    def close(self) -> None:
        """End the child (it exits when its connection closes), if there is one."""
        if self._child is not None:
            self._end(*self._child)
            self._child = None

    def _start(self) -> tuple[BaseProcess, Connection]:
        ctx = get_context("spawn")
        ours, theirs = ctx.Pipe()
        process = ctx.Process(target=_serve, args=(theirs,), name="distml-evaluate", daemon=True)
        process.start()
        theirs.close()  # the child's end: once it dies, reading ours ends with EOFError
        self._child = process, ours
        return self._child

    def _died(self) -> str:
        """Why the child is gone (after its pipe closed); forgets it."""
        assert self._child is not None
        process = self._child[0]
        self.close()
        return f"its evaluation process {_how_it_ended(process.exitcode)}"

    @staticmethod
    def _end(process: BaseProcess, conn: Connection) -> None:
        conn.close()
        process.join(EXIT_WAIT_S)
        if process.exitcode is None:  # busy or stuck: it does not get to finish
            process.kill()
            process.join()


def _how_it_ended(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = str(-exitcode)
        return (
            f"died with signal {name} while loading or running the model (a crash in "
            "TensorFlow or native code: its message, if any, is on stderr above)"
        )
    return f"exited with status {exitcode} while loading or running the model"


def _serve(conn: Connection) -> None:
    """The child: evaluate each (path, images, labels) received until the parent closes
    the connection; answer ("ok", scores), ("candidate", why) or ("bug", traceback)."""
    while True:
        try:
            path, images, labels = conn.recv()
        except EOFError:
            return
        try:
            answer: tuple[str, Any] = ("ok", evaluate_saved_model(path, images, labels))
        except CandidateError as e:
            answer = ("candidate", str(e))
        except Exception:  # a bug: the parent raises it with this traceback
            answer = ("bug", traceback.format_exc())
        conn.send(answer)
