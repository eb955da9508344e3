"""The one poll loop: observe, judge, print what changed, until done, failed or the deadline.

Every wait in distml is this loop with its own ``observe`` (read the world) and ``judge``
(turn one observation into a verdict)::

    verdict = poll(lambda: kube.get(...), judge_job, timeout=600, on_change=out)
    if isinstance(verdict, Done):
        return verdict.value
    raise WaitError(...)  # Failed: verdict.reason; Pending: timed out, verdict.status

``judge`` answers ``Done(value)``, ``Failed(reason)`` or ``Pending(status line)``. A status
line is printed through ``on_change`` only when it differs from the previous one, never
once per poll. Errors of the types in ``retry_on`` raised by ``observe`` (a cluster API
blip) are retried until they have lasted ``retry_for`` seconds; then the poll returns
``Failed`` with ``cause`` set. ``clock`` is anything with ``monotonic()`` and
``sleep(seconds)``: the ``time`` module, or a fake one in tests.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

T = TypeVar("T")
O = TypeVar("O")  # noqa: E741  (an observation)


class Clock(Protocol):
    def monotonic(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


@dataclass(frozen=True)
class Done(Generic[T]):
    """What was waited for happened; ``value`` is what the wait returns."""

    value: T = None  # type: ignore[assignment]


@dataclass(frozen=True)
class Failed:
    """It will not happen: ``reason`` says why; ``cause`` is the exception behind it, if any
    (the last API error when the cluster API kept failing)."""

    reason: str
    cause: BaseException | None = None


@dataclass(frozen=True)
class Pending:
    """Not yet. ``status`` is the line to show (printed when it changes). Returned by
    ``poll`` itself when the deadline passed: a timeout; ``error`` is then the API error
    that was still going on (its note is already in ``status``)."""

    status: str = ""
    error: BaseException | None = field(default=None, compare=False)


Verdict = Done[Any] | Failed | Pending


def first_line(exc: BaseException | None, limit: int = 240) -> str:
    """The first line of an error's message (its type name when it has none), whitespace
    runs collapsed, shortened."""
    text = str(exc or "").strip()
    line = " ".join((text.splitlines()[0] if text else type(exc).__name__).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def api_note(exc: BaseException | None) -> str:
    """`` (last API error: ...)`` for a status or headline; '' without an error."""
    return f" (last API error: {first_line(exc)})" if exc is not None else ""


@dataclass
class _Retries:
    """Tolerates observe() errors until they have lasted ``grace`` seconds."""

    what: str
    grace: float
    since: float | None = None
    last: BaseException | None = None

    def failed(self, exc: BaseException, now: float, say: Callable[[str], Any]) -> Failed | None:
        self.last = exc
        if self.since is None:
            self.since = now
            say(f"{self.what}: API call failed, retrying: {first_line(exc)}")
            return None
        if now - self.since >= self.grace:
            lasted = now - self.since
            return Failed(f"the cluster API kept failing for {lasted:.0f}s: {exc}", cause=exc)
        return None


def poll(
    observe: Callable[[], O],
    judge: Callable[[O], Verdict],
    *,
    timeout: float,
    interval: float = 2.0,
    clock: Clock = time,
    on_change: Callable[[str], Any] | None = None,
    retry_on: tuple[type[BaseException], ...] = (),
    retry_for: float = 30.0,
    what: str = "",
) -> Verdict:
    """Observe and judge every ``interval`` seconds until Done or Failed (returned as is),
    or until ``timeout`` seconds have passed (the last Pending is returned)."""
    say = on_change or (lambda line: None)
    start = clock.monotonic()
    end = start + timeout
    retries = _Retries(what or "poll", retry_for)
    last_status: str | None = None
    pending = Pending("not observed yet")  # the last verdict (Done and Failed are returned)
    while True:
        try:
            observation = observe()
        except retry_on as exc:
            failed = retries.failed(exc, clock.monotonic(), say)
            if failed is not None:
                return failed
        else:
            retries.since = None
            verdict = judge(observation)
            if isinstance(verdict, Done | Failed):
                return verdict
            pending = verdict
            if pending.status and pending.status != last_status:
                last_status = pending.status
                say(pending.status)
        now = clock.monotonic()
        if now >= end:
            if retries.last is not None and retries.since is not None:
                return Pending(pending.status + api_note(retries.last), error=retries.last)
            return pending
        clock.sleep(max(0.0, min(interval, end - now)))
