"""integration/canary_check.py's judgement of what deploy --canary said (the run itself
needs the kind cluster: nox -s integration -- standard --offline --with-monitoring)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from integration import canary_check as cc
from runtime.canary.gates import Figures, Thresholds, judge

SAID = """\
canary: version 5 beside version 4 in every predictor pod, ...
[1] canary 20%: traffic pass (612 of 50 requests, 20.1% of 3050), errors pass (...) -> hold
[2] canary 20%: traffic pass (600 of 50 requests, 19.9% of 3011), errors pass (...) -> step
[3] canary 50%: traffic pass (1352 of 50 requests, 50.0% of 2705), errors pass (...) -> hold
"""


def test_the_shares_are_read_off_the_interval_lines():
    assert cc.shares(SAID) == [(20, 20.1, 3050), (20, 19.9, 3011), (50, 50.0, 2705)]
    assert cc.share_problems(cc.shares(SAID), (20, 50)) == []


def test_a_step_missing_or_off_its_weight_is_a_problem():
    off = SAID.replace("50.0% of 2705", "53.1% of 2705")
    assert cc.share_problems(cc.shares(off), (20, 50)) == [
        "an interval at 50% measured 53.1% of 2705 requests (tolerance 2 points)"
    ]
    assert cc.share_problems(cc.shares(SAID), (10, 20, 50)) == ["no interval measured at 10%"]


@given(st.integers(0, 10_000), st.integers(0, 10_000))
def test_the_pattern_reads_what_the_traffic_gate_writes(stable, canary):
    (gate, *_) = judge(Figures(stable, 0), Figures(canary, 0), Thresholds())
    line = f"[1] canary 20%: {gate}, errors pass (x) -> hold"
    found = cc.shares(line)
    if stable + canary == 0:
        assert found == []  # no share to read: nothing was answered
    else:
        ((weight, share, total),) = found
        assert weight == 20 and total == stable + canary
        assert abs(share - 100 * canary / total) <= 0.05
