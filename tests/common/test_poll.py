"""common.poll: the one loop every wait is built on (fake clock, no sleeping)."""

from __future__ import annotations

from common.poll import Done, Failed, Pending, api_note, first_line, poll
from tests.support.fakekube import FakeClock


def _sequence(*values):
    it = iter(values)
    return lambda: next(it)


def _judge(obs):
    if obs == "ok":
        return Done(42)
    if obs == "broken":
        return Failed("it broke")
    return Pending(f"state {obs}")


def test_done_returns_the_value_and_prints_each_status_once():
    clock, lines = FakeClock(), []
    verdict = poll(
        _sequence("a", "a", "b", "ok"),
        _judge,
        timeout=60,
        interval=2,
        clock=clock,
        on_change=lines.append,
    )
    assert verdict == Done(42)
    assert lines == ["state a", "state b"]
    assert clock.sleeps == [2, 2, 2]


def test_failed_is_returned_at_once():
    clock = FakeClock()
    assert poll(_sequence("a", "broken", "ok"), _judge, timeout=60, clock=clock) == Failed(
        "it broke"
    )
    assert clock.now == 2


def test_timeout_returns_the_last_pending_and_never_sleeps_past_the_deadline():
    clock = FakeClock()
    verdict = poll(lambda: "x", _judge, timeout=5, interval=2, clock=clock)
    assert verdict == Pending("state x")
    assert clock.sleeps == [2, 2, 1]
    assert clock.now == 5


class Blip(Exception):
    pass


def test_retried_errors_are_tolerated_then_fail_after_the_grace():
    clock, lines = FakeClock(), []

    def observe():
        if clock.now < 4 or clock.now >= 10:
            raise Blip("connection refused\nmore detail")
        return "a"

    verdict = poll(
        observe,
        _judge,
        timeout=100,
        interval=2,
        clock=clock,
        on_change=lines.append,
        retry_on=(Blip,),
        retry_for=6,
        what="Job x",
    )
    assert isinstance(verdict, Failed) and isinstance(verdict.cause, Blip)
    assert verdict.reason == "the cluster API kept failing for 6s: connection refused\nmore detail"
    assert clock.now == 16  # errors from t=10; the grace of 6 s ends at t=16
    assert lines == [
        "Job x: API call failed, retrying: connection refused",
        "state a",
        "Job x: API call failed, retrying: connection refused",
    ]


def test_errors_not_listed_propagate():
    def observe():
        raise KeyError("bug")

    try:
        poll(observe, _judge, timeout=10, clock=FakeClock(), retry_on=(Blip,))
    except KeyError:
        return
    raise AssertionError("a KeyError from observe must not be swallowed")


def test_a_timeout_during_api_errors_says_so():
    def observe():
        raise Blip("i/o timeout")

    verdict = poll(observe, _judge, timeout=5, clock=FakeClock(), retry_on=(Blip,), retry_for=30)
    assert verdict == Pending("not observed yet (last API error: i/o timeout)")
    assert isinstance(verdict, Pending) and isinstance(verdict.error, Blip)
    assert api_note(verdict.error) == " (last API error: i/o timeout)"


def test_a_timeout_after_the_api_recovered_has_no_error():
    clock = FakeClock()

    def observe():
        if clock.now < 2:
            raise Blip("i/o timeout")
        return "x"

    verdict = poll(observe, _judge, timeout=5, clock=clock, retry_on=(Blip,))
    assert verdict == Pending("state x")
    assert isinstance(verdict, Pending) and verdict.error is None
    assert api_note(verdict.error) == ""


def test_first_line_shortens_and_names_empty_errors():
    assert first_line(ValueError("")) == "ValueError"
    assert first_line(ValueError("x" * 300), limit=10) == "x" * 9 + "…"
    assert first_line(ValueError("  a \t b  \nsecond line")) == "a b"
