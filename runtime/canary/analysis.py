"""The canary's loop: set the weight, measure every interval, print the gates, act.

The runtime supplies how the traffic is split (``Split``: the local server's weights, or
the cluster's replicas) and how an interval is measured (``measure``: the server's
``/metrics`` or Prometheus, plus the labelled sample sent to each version). This module
only sequences them, on a ``Clock`` (``time``, or a fake one in tests), and guarantees the
ending: whatever stops the loop before a decision to promote (a rollback decision, ``abort``
from the control, Ctrl-C, SIGTERM, an error in the loop itself) rolls back, and the record
says why; once promoting, nothing rolls back, and a promotion or rollback that does not
finish says what is left and the command that ends it.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from common.errors import DistmlError
from common.poll import Clock
from runtime.canary.gates import Figures, Gate, Thresholds, judge, overall
from runtime.canary.policy import Action, Canary, Decision, Policy

#: How often a wait between measurements looks at the manual control.
CONTROL_EVERY_S = 1.0


class MeasurementError(DistmlError):
    """An interval could not be measured (Prometheus or the server did not answer)."""


class Stopped(KeyboardInterrupt):
    """SIGTERM during the canary: unwinds as Ctrl-C does, so the canary rolls back."""


class Split(Protocol):
    def set_weight(self, weight: int, shadow: int = 0) -> None:
        """Send ``weight`` % of the traffic to the canary (and mirror ``shadow`` % of the
        rest to it, its answers discarded); return once it is so."""

    def promote(self, result: Result) -> None:
        """All traffic on the new version, as the stable; the canary's objects gone.
        ``result`` is the record to keep with it."""

    def rollback(self, result: Result) -> None:
        """The canary gone; the stable, untouched, takes all traffic again. ``result``
        (the decision's reason, every interval's figures) is the record to keep."""


#: Figures of (stable, canary) over the last ``seconds``; raises MeasurementError.
Measure = Callable[[float], tuple[Figures, Figures]]
#: The manual control: "promote", "abort", or None to let the analysis decide.
Control = Callable[[], str | None]


@dataclass(frozen=True)
class Interval:
    weight: int
    stable: Figures | None
    canary: Figures | None
    gates: tuple[Gate, ...]
    decision: Decision
    error: str = ""
    shadow: int = 0  # the share mirrored to the canary (the shadow phase), else 0

    def line(self, number: int) -> str:
        """One live line: the step's weight (or the shadow's share and the canary's
        agreement with the stable), every gate's figures, the decision."""
        what = ", ".join(map(str, self.gates)) or f"no figures: {self.error}"
        d = self.decision
        where = f"shadow {self.shadow}%" if self.shadow else f"canary {self.weight}%"
        agreed = self.canary.agreement_text() if self.shadow and self.canary else ""
        return f"[{number}] {where}: {what}{agreed} -> {d.action.value} ({d.reason})"


@dataclass
class Result:
    decision: Decision
    intervals: list[Interval] = field(default_factory=list)

    @property
    def promoted(self) -> bool:
        return self.decision.action is Action.PROMOTE


def record_of(result: Result) -> dict[str, Any]:
    """What is kept with the version, promoted or rejected: the decision and its figures."""
    return {
        "decision": result.decision.action.value,
        "reason": result.decision.reason,
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "intervals": [
            {
                "weight": i.weight,
                "shadow": i.shadow,
                "stable": asdict(i.stable) if i.stable else None,
                "canary": asdict(i.canary) if i.canary else None,
                "gates": {g.name: [g.outcome.value, g.detail] for g in i.gates},
                "decision": i.decision.action.value,
                "error": i.error,
            }
            for i in result.intervals
        ],
    }


@contextmanager
def sigterm_unwinds() -> Iterator[None]:
    """SIGTERM raises Stopped while the canary runs (the main thread only)."""

    def stop(signum: int, frame: object) -> None:
        raise Stopped(f"signal {signum}")

    try:
        previous = signal.signal(signal.SIGTERM, stop)
    except ValueError:  # not the main thread: nothing to install
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _wait(seconds: float, clock: Clock, control: Control) -> str | None:
    """Wait ``seconds``, looking at the control every CONTROL_EVERY_S; its word, if any."""
    deadline = clock.monotonic() + seconds
    while (left := deadline - clock.monotonic()) > 0:
        clock.sleep(min(CONTROL_EVERY_S, left))
        if word := control():
            return word
    return None


class _Step:
    """The current step's figures so far: each look judges every request since the step
    began (``Figures.then``), so a low-traffic step gathers what the gates need."""

    def __init__(self) -> None:
        self.so_far: tuple[Figures, Figures] | None = None

    def add(self, stable: Figures, canary: Figures) -> tuple[Figures, Figures]:
        if self.so_far is not None:
            stable, canary = self.so_far[0].then(stable), self.so_far[1].then(canary)
        self.so_far = (stable, canary)
        return self.so_far


def _measure(
    canary: Canary, step: _Step, measure: Measure, t: Thresholds, interval_s: float
) -> Interval:
    """One look: this interval's figures (kept in the record), the step's judged."""
    weight, shadow = canary.weight, canary.shadow
    try:
        stable, new = measure(interval_s)
    except MeasurementError as e:
        return Interval(weight, None, None, (), canary.record(None), str(e), shadow)
    gates = judge(*step.add(stable, new), t)
    return Interval(weight, stable, new, gates, canary.record(overall(gates)), "", shadow)


def _manual(word: str) -> Decision:
    if word == "promote":
        return Decision(Action.PROMOTE, 100, "promoted by hand")
    return Decision(Action.ROLLBACK, 0, "aborted by hand")


def analyse(
    policy: Policy,
    thresholds: Thresholds,
    split: Split,
    measure: Measure,
    control: Control,
    clock: Clock,
    out: Callable[[str], None],
) -> Result:
    """Run the canary to its end: promoted, or rolled back (then re-raises what stopped
    it, if it was not a decision)."""
    canary, step = Canary(policy), _Step()
    result = Result(Decision(Action.HOLD, canary.weight, "starting"))
    with sigterm_unwinds():
        try:
            split.set_weight(canary.weight, canary.shadow)
            while result.decision.action not in (Action.PROMOTE, Action.ROLLBACK):
                if word := _wait(canary.interval_s, clock, control):
                    result.decision = _manual(word)
                    break
                interval = _measure(canary, step, measure, thresholds, canary.interval_s)
                result.intervals.append(interval)
                result.decision = interval.decision
                out(interval.line(len(result.intervals)))
                if interval.decision.action is Action.STEP:
                    split.set_weight(interval.decision.weight)
                    step = _Step()  # a new weight counts afresh
        except BaseException as e:
            result.decision = Decision(Action.ROLLBACK, 0, f"stopped: {type(e).__name__} {e}")
            out(f"canary stopped ({result.decision.reason}): rolling back")
            _end(split, result, canary.weight, out)
            raise
        # Decided: from here nothing turns a promotion into a rollback (its copy may
        # serve already); a stop or an error says what is left and how to finish.
        _end(split, result, canary.weight, out)
    return result


def _end(split: Split, result: Result, weight: int, out: Callable[[str], None]) -> None:
    """Promote or roll back, as decided; if that fails or is stopped, say what may be
    left and how to end it, then re-raise."""
    try:
        (split.promote if result.promoted else split.rollback)(result)
    except BaseException as e:
        why = f"{type(e).__name__} {e}".strip()
        if result.promoted:
            out(
                f"the promotion did not finish ({why}); it is not rolled back, as its copy "
                "may serve already: `invoke status` shows what serves, and `invoke canary "
                "--promote` finishes it while the canary is still there"
            )
        else:
            out(
                f"the rollback did not finish ({why}): the canary may still answer up to "
                f"{weight}% of the requests; `invoke canary --abort` ends it"
            )
        raise
