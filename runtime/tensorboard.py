"""`invoke tensorboard`, what both runtimes share: the wait for TensorBoard to answer on
127.0.0.1, the messages, and one lifecycle (start, print the URL, stay until Ctrl-C, always
stop) with its exit codes.

Exit codes: Ctrl-C once TensorBoard is up is how this task is meant to end, so it exits 0
(as ``tensorboard`` and ``kubectl port-forward`` themselves do: a script running
``invoke tensorboard`` sees no failure when its user closes it); Ctrl-C before it was up
interrupts the task: 130, as every other task. Either way nothing is left behind.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from common.errors import DistmlError
from common.poll import Clock, Done, Failed, Pending, poll

HOST = "127.0.0.1"
READY_TIMEOUT_S = 120.0  # TensorBoard imports TensorFlow: about 8 s on this 2-core machine
CHECK_EVERY_S = 0.25
INTERRUPTED = 130

Out = Callable[[str], Any]


class NothingToShow(DistmlError):
    """No training run has written TensorBoard event files yet."""


def nothing_to_show(where: str) -> NothingToShow:
    return NothingToShow(
        f"nothing to show yet: no TensorBoard event files under {where} (no model has been "
        "trained here); run `invoke train-all` (or `invoke train --model-type M`) first"
    )


def port_in_use(port: int) -> DistmlError:
    return DistmlError(
        f"port {port} on {HOST} is in use; pass --port PORT (a free one) or stop what listens there"
    )


def url(port: int) -> str:
    return f"http://{HOST}:{port}/"


def answers(address: str) -> bool:
    """Whether an HTTP server answers ``address`` with a success."""
    try:
        with urllib.request.urlopen(address, timeout=2) as resp:
            return 200 <= resp.status < 300
    except (urllib.error.URLError, OSError, ValueError):
        return False


def wait_up(
    check: Callable[[], bool],
    gone: Callable[[], str | None],
    *,
    timeout: float,
    interval: float,
    clock: Clock = time,
) -> Done | Failed | Pending:
    """Poll ``check`` until it holds; ``gone()`` says why it never will (the process
    behind it ended), else None. The verdict: Done, Failed(reason) or Pending (deadline)."""

    def judge(up: bool) -> Done | Failed | Pending:
        if up:
            return Done()
        reason = gone()
        return Failed(reason) if reason else Pending()

    return poll(check, judge, timeout=timeout, interval=interval, clock=clock)


def wait_answering(
    address: str,
    gone: Callable[[], str | None],
    *,
    timeout: float = READY_TIMEOUT_S,
    clock: Clock = time,
    what: str = "TensorBoard",
) -> None:
    """Wait until ``address`` answers; ``gone()`` says why it never will (the process
    ended), else None. Raises DistmlError on that or at the deadline."""
    verdict = wait_up(
        lambda: answers(address), gone, timeout=timeout, interval=CHECK_EVERY_S, clock=clock
    )
    if isinstance(verdict, Failed):
        raise DistmlError(f"{what} did not come up: {verdict.reason}")
    if not isinstance(verdict, Done):
        raise DistmlError(f"{what} did not answer at {address} within {timeout:.0f} s")


def serve(
    out: Out,
    *,
    start: Callable[[], str],
    block: Callable[[], int],
    stop: Callable[[], str],
    dry: bool = False,
) -> int:
    """``start()`` (returns the URL once it answers), print it, ``block()`` until Ctrl-C
    (0) or until the server ends (its code); ``stop()`` always, and print what it did.
    ``dry``: ``start()`` and ``stop()`` print what they would do; nothing blocks."""
    up = False
    try:
        address = start()
        up = True
        if dry:
            out(f"would wait for {address} to answer, print it and serve until Ctrl-C")
            return 0
        out(f"TensorBoard ready: {address} (Ctrl-C stops it)")
        return block()
    except KeyboardInterrupt:
        if up:
            return 0
        out("interrupted before TensorBoard was ready")
        return INTERRUPTED
    finally:
        said = stop()
        if said:
            out(said)
