"""The canary's decisions: sequences of measurements in, hold/step/promote/rollback out."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runtime.canary.gates import Outcome
from runtime.canary.policy import Action, Canary, Policy

P, F, I, E = Outcome.PASS, Outcome.FAIL, Outcome.INCONCLUSIVE, None  # noqa: E741
HOLD, STEP, PROMOTE, ROLLBACK = Action.HOLD, Action.STEP, Action.PROMOTE, Action.ROLLBACK


def run(policy: Policy, outcomes) -> list[tuple[Action, int]]:
    canary = Canary(policy)
    return [(d.action, d.weight) for d in map(canary.record, outcomes)]


@pytest.mark.parametrize(
    "policy,outcomes,expected",
    [
        pytest.param(
            Policy(steps=(10, 50), count=2),
            [P, P, P, P],
            [(HOLD, 10), (STEP, 50), (HOLD, 50), (PROMOTE, 100)],
            id="passes step up, then promote",
        ),
        pytest.param(
            Policy(steps=(10, 50), count=1),
            [P, P],
            [(STEP, 50), (PROMOTE, 100)],
            id="count 1: one pass per step",
        ),
        pytest.param(Policy(count=1, failure_limit=0), [F], [(ROLLBACK, 0)], id="failure limit 0"),
        pytest.param(
            Policy(steps=(10, 50), count=1, failure_limit=1),
            [F, P, F],
            [(HOLD, 10), (STEP, 50), (ROLLBACK, 0)],
            id="failure limit counts over the whole canary",
        ),
        pytest.param(
            Policy(steps=(20,), count=1, consecutive_error_limit=2),
            [E, E, P],
            [(HOLD, 20), (HOLD, 20), (PROMOTE, 100)],
            id="errors up to the limit: held",
        ),
        pytest.param(
            Policy(steps=(20,), count=1, consecutive_error_limit=2),
            [E, E, E],
            [(HOLD, 20), (HOLD, 20), (ROLLBACK, 0)],
            id="one error past the limit: rollback",
        ),
        pytest.param(
            Policy(steps=(20,), count=2, consecutive_error_limit=1),
            [E, P, E, P],
            [(HOLD, 20), (HOLD, 20), (HOLD, 20), (PROMOTE, 100)],
            id="a measurement that works resets the error count",
        ),
        pytest.param(
            Policy(steps=(20,), count=1, inconclusive_limit=1),
            [I, I],
            [(HOLD, 20), (ROLLBACK, 0)],
            id="inconclusive past its limit: rollback",
        ),
        pytest.param(
            Policy(steps=(20,), count=1, inconclusive_limit=1),
            [I, P],
            [(HOLD, 20), (PROMOTE, 100)],
            id="inconclusive then a pass: promoted",
        ),
        pytest.param(
            Policy(steps=(20,), count=2, inconclusive_limit=1, failure_limit=3),
            [I, F, I, F, P, P],
            [(HOLD, 20)] * 5 + [(PROMOTE, 100)],
            id="inconclusive counts only in a row",
        ),
    ],
)
def test_decisions(policy, outcomes, expected):
    assert run(policy, outcomes) == expected


def test_each_decision_says_why():
    canary = Canary(Policy(steps=(10, 50), count=1, failure_limit=1))
    reasons = [canary.record(o).reason for o in (F, P, E, F)]
    assert reasons == [
        "failure 1 of 1 allowed",
        "step 2 of 2",
        "measurement error 1",
        "2 failed measurement(s)",
    ]


@pytest.mark.parametrize(
    "bad",
    [
        {"steps": ()},
        {"steps": (0, 50)},
        {"steps": (10, 100)},
        {"steps": (50, 10)},
        {"steps": (10, 10)},
        {"interval_s": 0},
        {"count": 0},
        {"failure_limit": -1},
    ],
)
def test_nonsense_policies_are_refused(bad):
    with pytest.raises(ValueError):
        Policy(**bad)


@given(st.lists(st.sampled_from([P, F, I, E]), max_size=40))
def test_it_ends_once_and_only_promotes_after_enough_passes(outcomes):
    policy = Policy(steps=(10, 25, 50), count=2, failure_limit=1)
    canary = Canary(policy)
    for i, outcome in enumerate(outcomes):
        decision = canary.record(outcome)
        assert 0 <= decision.weight <= 100
        if decision.action is PROMOTE:
            assert outcomes[: i + 1].count(P) >= policy.intervals_at_least
        if decision.action in (PROMOTE, ROLLBACK):
            return
        assert decision.weight in policy.steps


def test_a_shadow_phase_comes_first_at_no_users_share():
    canary = Canary(Policy(steps=(10, 50), count=2, shadow_interval_s=5))
    assert (canary.weight, canary.shadow, canary.interval_s) == (0, 10, 5)
    decisions = [canary.record(P) for _ in range(2)]
    assert [(d.action, d.weight) for d in decisions] == [(HOLD, 0), (STEP, 10)]
    assert decisions[1].reason == "shadow passed: the first step"
    assert (canary.weight, canary.shadow, canary.interval_s) == (10, 0, 30)
    assert Policy(steps=(10, 50), shadow_interval_s=5).intervals_at_least == 6


def test_a_failure_in_the_shadow_phase_rolls_back_before_any_user_saw_it():
    canary = Canary(Policy(shadow_interval_s=5))
    assert (canary.record(F).action, canary.weight) == (ROLLBACK, 0)


def test_a_shadow_interval_must_be_positive():
    with pytest.raises(ValueError, match="shadow interval"):
        Policy(shadow_interval_s=0)
