"""The canary's loop on a fake clock: what it sets, when it measures, how it ends."""

from __future__ import annotations

import os
import signal

import pytest

from common.errors import DistmlError
from runtime.canary.analysis import MeasurementError, Stopped, analyse, record_of
from runtime.canary.gates import Figures, Thresholds
from runtime.canary.policy import Action, Policy
from tests.support.fakekube import FakeClock

STABLE = Figures(400, 0, 0.02, 0.90)
GOOD = Figures(200, 0, 0.02, 0.90)
BAD = Figures(100, 20, 0.02, 0.90)
FEW = Figures(3, 0, 0.02, 0.90)
POLICY = Policy(steps=(10, 50), interval_s=30, count=2, failure_limit=0)


class RecordingSplit:
    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.calls: list[tuple[float, str]] = []
        self.results: list = []
        self.shadows: list[int] = []

    def set_weight(self, weight: int, shadow: int = 0) -> None:
        self.calls.append((self.clock.now, f"weight {weight}"))
        self.shadows.append(shadow)

    def promote(self, result) -> None:
        self.calls.append((self.clock.now, "promote"))
        self.results.append(result)

    def rollback(self, result) -> None:
        self.calls.append((self.clock.now, "rollback"))
        self.results.append(result)


def measures(*figures):
    """A measure that answers the stable's figures beside each canary figure in turn
    (an exception instance is raised instead)."""
    it = iter(figures)
    asked = []

    def measure(seconds):
        asked.append(seconds)
        canary = next(it)
        if isinstance(canary, BaseException):
            raise canary
        return STABLE, canary

    measure.asked = asked
    return measure


def go(measure, control=lambda: None, policy=POLICY):
    clock = FakeClock()
    split, lines = RecordingSplit(clock), []
    result = analyse(policy, Thresholds(), split, measure, control, clock, lines.append)
    return result, split.calls, lines


def test_a_good_canary_steps_up_every_count_intervals_then_is_promoted():
    measure = measures(GOOD, GOOD, GOOD, GOOD)
    result, calls, lines = go(measure)
    assert result.promoted
    assert calls == [(0, "weight 10"), (60, "weight 50"), (120, "promote")]
    assert measure.asked == [30] * 4  # each measurement reads its own interval
    assert len(lines) == 4
    assert lines[1] == (
        "[2] canary 10%: traffic pass (400 of 184 requests, 33.3% of 1200), "
        "errors pass (0.0% vs 0.0%, p=1), latency pass (p99 20 ms, at most 100 ms), "
        "accuracy pass (90.0% vs 90.0% - 2.0%) "
        "-> step (step 2 of 2)"
    )


def test_each_look_judges_the_steps_requests_so_far_and_a_new_step_counts_afresh():
    # 90 canary requests an interval are too few alone (the step needs about 160 at 18 %);
    # the step's second look has 180. The record keeps each interval's own figures.
    low = Figures(90, 0, 0.02, 0.90)
    result, _, lines = go(measures(low, low, low, low, low, low), policy=POLICY)
    assert [i.decision.action for i in result.intervals] == [
        Action.HOLD, Action.HOLD, Action.STEP, Action.HOLD, Action.HOLD, Action.PROMOTE,
    ]  # fmt: skip
    assert "traffic inconclusive (90 of" in lines[0] and "traffic pass (180 of" in lines[1]
    assert "traffic inconclusive (90 of" in lines[3]  # the new step starts from nothing
    assert {i.canary.requests for i in result.intervals} == {90}


def test_failures_spread_over_a_steps_intervals_add_up_to_a_rollback():
    # 4 failures of 200 an interval are within chance alone (p=0.012); 8 of 400 are not.
    some = Figures(200, 4, 0.02, 0.90)
    result, _, lines = go(measures(some, some, some))
    assert not result.promoted and len(result.intervals) == 2
    assert "errors pass (2.0% vs 0.0%, p=0.012)" in lines[0]
    assert "errors fail" in lines[1]


def test_a_bad_canary_is_rolled_back_at_its_first_failure():
    result, calls, lines = go(measures(GOOD, GOOD, BAD))
    assert result.decision.action is Action.ROLLBACK
    assert calls == [(0, "weight 10"), (60, "weight 50"), (90, "rollback")]
    assert lines[-1].startswith("[3] canary 50%: ") and "errors fail (20.0%" in lines[-1]


def test_measurement_errors_hold_then_roll_back_past_the_limit():
    errors = [MeasurementError("Prometheus did not answer")] * 5
    result, calls, lines = go(measures(*errors))
    assert calls[-1] == (150, "rollback")
    assert result.decision.reason == "5 errors in a row"
    assert lines[0] == (
        "[1] canary 10%: no figures: Prometheus did not answer -> hold (measurement error 1)"
    )


def test_too_few_requests_hold_then_roll_back():
    result, _, _ = go(measures(FEW, FEW, FEW, FEW))
    assert (result.decision.action, result.decision.reason) == (
        Action.ROLLBACK,
        "inconclusive 4 times in a row",
    )


@pytest.mark.parametrize(
    "word,action,last",
    [("promote", Action.PROMOTE, "promote"), ("abort", Action.ROLLBACK, "rollback")],
)
def test_the_manual_control_acts_within_a_second(word, action, last):
    clock_reads = []

    def control():
        clock_reads.append(1)
        return word if len(clock_reads) == 45 else None  # 15 s into the second interval

    result, calls, _ = go(measures(GOOD), control)
    assert result.decision.action is action
    assert calls == [(0, "weight 10"), (45, last)]


def test_an_error_in_the_loop_rolls_back_and_is_raised():
    with pytest.raises(ZeroDivisionError):
        go(measures(GOOD, ZeroDivisionError("bug")))


def test_ctrl_c_rolls_back_and_is_raised():
    clock = FakeClock()
    split = RecordingSplit(clock)

    def interrupt(now):
        if now >= 40:
            raise KeyboardInterrupt

    clock.hooks.append(interrupt)
    with pytest.raises(KeyboardInterrupt):
        analyse(POLICY, Thresholds(), split, measures(GOOD, GOOD), lambda: None, clock, print)
    assert split.calls == [(0, "weight 10"), (40, "rollback")]


def test_sigterm_rolls_back_and_the_handler_is_restored():
    clock = FakeClock()
    split = RecordingSplit(clock)
    clock.hooks.append(lambda now: now == 10 and os.kill(os.getpid(), signal.SIGTERM))
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Stopped):
        analyse(POLICY, Thresholds(), split, measures(GOOD), lambda: None, clock, print)
    assert split.calls == [(0, "weight 10"), (10, "rollback")]
    assert signal.getsignal(signal.SIGTERM) == before


class FailingEnd(RecordingSplit):
    """A split whose promotion or rollback is stopped half way (``error`` raised)."""

    def __init__(self, clock: FakeClock, error: BaseException) -> None:
        super().__init__(clock)
        self.error = error

    def promote(self, result) -> None:
        super().promote(result)
        raise self.error

    def rollback(self, result) -> None:
        super().rollback(result)
        raise self.error


@pytest.mark.parametrize(
    "error", [KeyboardInterrupt(), DistmlError("timed out")], ids=["ctrl-c", "error"]
)
def test_a_promotion_stopped_half_way_is_never_rolled_back(error):
    # Its copy may serve already: a rollback on top would set aside the version serving.
    clock, lines = FakeClock(), []
    split = FailingEnd(clock, error)
    with pytest.raises(type(error)):
        analyse(POLICY, Thresholds(), split, measures(*[GOOD] * 4), lambda: None, clock,
                lines.append)  # fmt: skip
    assert [c for _, c in split.calls if not c.startswith("weight")] == ["promote"]
    assert "it is not rolled back" in lines[-1] and "`invoke canary --promote`" in lines[-1]


def test_a_rollback_that_does_not_finish_says_the_share_left_and_how_to_end_it():
    clock, lines = FakeClock(), []
    split = FailingEnd(clock, DistmlError("the end Job stayed Pending"))
    with pytest.raises(DistmlError):
        analyse(POLICY, Thresholds(), split, measures(GOOD, GOOD, BAD), lambda: None, clock,
                lines.append)  # fmt: skip
    assert lines[-1] == (
        "the rollback did not finish (DistmlError the end Job stayed Pending): the canary may "
        "still answer up to 50% of the requests; `invoke canary --abort` ends it"
    )


def test_the_shadow_phase_mirrors_first_then_steps_and_its_line_shows_the_agreement():
    from dataclasses import replace

    shadowed = replace(GOOD, agreement=(195, 5))
    measure = measures(shadowed, shadowed, GOOD, GOOD, GOOD, GOOD)
    clock = FakeClock()
    split, lines = RecordingSplit(clock), []
    policy = Policy(steps=(10, 50), interval_s=30, count=2, shadow_interval_s=10)
    result = analyse(policy, Thresholds(), split, measure, lambda: None, clock, lines.append)
    assert result.promoted
    assert split.shadows == [10, 0, 0]  # mirrored at the first step's share, then none
    assert measure.asked == [10, 10, 30, 30, 30, 30]
    assert lines[0].startswith("[1] shadow 10%: traffic pass")
    assert ", agreement 97.5% of 200 images -> hold" in lines[0]
    assert lines[1].endswith("-> step (shadow passed: the first step)")
    assert lines[2].startswith("[3] canary 10%:")
    assert [i["shadow"] for i in record_of(result)["intervals"]] == [10, 10, 0, 0, 0, 0]
