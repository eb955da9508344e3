"""The canary's gates as tables: figures in, each gate's outcome out."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.canary.gates import Figures, Outcome, Thresholds, judge, needed, overall

P, F, I = Outcome.PASS, Outcome.FAIL, Outcome.INCONCLUSIVE  # noqa: E741
T = Thresholds(min_requests=50, latency_factor=1.5, accuracy_margin=0.02)
GOOD = Figures(requests=400, errors=0, p99_s=0.020, accuracy=0.90)


@pytest.mark.parametrize(
    "canary,expected",
    [
        pytest.param(GOOD, (P, P, P, P), id="as good as the stable: every gate passes"),
        # 50 % of the traffic, the stable failing none: the step needs 258 (runtime/canary/stats)
        pytest.param(Figures(257, 0, 0.02, 0.9), (P, P, P, P), id="257 at 39 %: enough (209)"),
        pytest.param(Figures(100, 0, 0.02, 0.9), (I, I, I, P), id="100 at 20 %: not (132)"),
        pytest.param(Figures(400, 1, 0.02, 0.9), (P, P, P, P), id="1 failure: p=0.5"),
        pytest.param(Figures(400, 8, 0.02, 0.9), (P, P, P, P), id="8 failures: p=0.004"),
        pytest.param(Figures(400, 9, 0.02, 0.9), (P, F, P, P), id="9 failures: p=0.002"),
        pytest.param(Figures(5, 5, 0.02, 0.9), (I, F, I, P), id="5 of 5 failed: no wait"),
        pytest.param(Figures(10, 0, 0.02, 0.9), (I, I, I, P), id="few requests, no errors"),
        pytest.param(Figures(400, 0, 0.099, 0.9), (P, P, P, P), id="p99 within objective"),
        pytest.param(Figures(400, 0, 0.150, 0.9), (P, P, F, P), id="p99 over objective"),
        pytest.param(Figures(400, 0, None, 0.9), (P, P, I, P), id="no latency read"),
        pytest.param(Figures(400, 0, 0.02, 0.881), (P, P, P, P), id="accuracy 1.9 pt lower"),
        pytest.param(Figures(400, 0, 0.02, 0.879), (P, P, P, F), id="accuracy 2.1 pt lower"),
        pytest.param(Figures(400, 0, 0.02, 0.95), (P, P, P, P), id="more accurate"),
        pytest.param(Figures(400, 0, 0.02, None), (P, P, P, I), id="sample not scored"),
    ],
)
def test_each_gate_against_a_healthy_stable(canary, expected):
    gates = judge(GOOD, canary, T)
    assert [g.name for g in gates] == ["traffic", "errors", "latency", "accuracy"]
    assert tuple(g.outcome for g in gates) == expected


def test_the_accuracy_margin_is_inclusive():
    at_margin = Figures(400, 0, 0.02, 0.88)
    assert (
        judge(Figures(400, 0, 0.02, 0.90), at_margin, Thresholds(accuracy_margin=0.025))[3].outcome
        is P
    )


def test_a_slow_stable_lets_the_canary_be_slow_by_the_factor_only():
    slow_stable = Figures(400, 0, 0.200, 0.9)
    assert judge(slow_stable, Figures(400, 0, 0.300, 0.9), T)[2].outcome is P
    assert judge(slow_stable, Figures(400, 0, 0.301, 0.9), T)[2].outcome is F


def test_an_erring_stable_is_compared_by_the_test_not_a_margin():
    # The stable fails 5 %: a canary at 8 % is within chance (p=0.004), at 9 % it is not;
    # and the step then needs 836 canary requests, so a 5-point excess is seen.
    stable = Figures(1000, 50, 0.02, 0.9)
    assert [g.outcome for g in judge(stable, Figures(1000, 80, 0.02, 0.9), T)][:2] == [P, P]
    assert [g.outcome for g in judge(stable, Figures(1000, 90, 0.02, 0.9), T)][:2] == [P, F]
    assert judge(stable, Figures(500, 25, 0.02, 0.9), T)[0].outcome is I


def test_three_times_the_stables_failures_fail_once_the_traffic_shows_it():
    # What a fixed one-point margin let through at any traffic.
    stable_rate, canary_rate = 0.004, 0.012
    outcomes = {
        n: judge(Figures(n, round(n * stable_rate)), Figures(n, round(n * canary_rate)), T)[1]
        for n in (250, 5000)
    }
    assert outcomes[250].outcome is not F and outcomes[5000].outcome is F, outcomes


def test_each_gate_prints_its_figures():
    line = ", ".join(str(g) for g in judge(GOOD, Figures(400, 9, 0.150, 0.85), T))
    assert line == (
        "traffic pass (400 of 258 requests, 50.0% of 800), errors fail (2.2% vs 0.0%, p=0.0019), "
        "latency fail (p99 150 ms, at most 100 ms), accuracy fail (85.0% vs 90.0% - 2.0%)"
    )


@pytest.mark.parametrize(
    "outcomes,expected",
    [((P, P), P), ((P, I), I), ((I, F), F), ((P, F, I), F), ((I, I), I)],
)
def test_a_failure_beats_inconclusive_beats_pass(outcomes, expected):
    from runtime.canary.gates import Gate

    assert overall(tuple(Gate(str(i), o, "") for i, o in enumerate(outcomes))) is expected


@pytest.mark.parametrize(
    "bad",
    [
        {"min_requests": 0},
        {"error_alpha": 0},
        {"error_detect": 1},
        {"error_power": 1.5},
        {"accuracy_margin": 1.5},
        {"latency_objective_s": 0},
        {"latency_factor": 0.5},
    ],
)
def test_nonsense_thresholds_are_refused(bad):
    with pytest.raises(ValueError):
        Thresholds(**bad)


figures = st.builds(
    lambda n, e, p, a: Figures(n, min(e, n), p, a),
    st.integers(0, 10_000),
    st.integers(0, 10_000),
    st.one_of(st.none(), st.floats(0, 10)),
    st.one_of(st.none(), st.floats(0, 1)),
)


#: The first look at a (share, failure rate) computes the requests a step needs (up to about
#: 0.3 s, then cached): no per-example deadline for the tests that draw them at random.
SLOW_FIRST = settings(deadline=None)


@SLOW_FIRST
@given(figures)
def test_a_canary_with_the_stables_own_figures_never_fails(stable):
    assert all(g.outcome is not F for g in judge(stable, stable, T))


@SLOW_FIRST
@given(figures, figures)
def test_too_few_requests_never_pass(stable, canary):
    if canary.requests < max(T.min_requests, needed(stable, canary, T)):
        assert overall(judge(stable, canary, T)) is not P


@SLOW_FIRST
@given(figures, st.integers(0, 50))
def test_more_failures_never_turn_a_fail_into_a_pass(canary, more):
    stable = Figures(2000, 20, 0.02, 0.9)
    worse = Figures(canary.requests + more, canary.errors + more, canary.p99_s, canary.accuracy)
    if judge(stable, canary, T)[1].outcome is F:
        assert judge(stable, worse, T)[1].outcome is F
