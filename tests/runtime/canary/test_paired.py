"""The model gate's comparison (runtime/canary/paired.py) and its decision (gates.accuracy):
pairs counted by hand, the sample step's report read whatever it holds, the decision over
simulated pairs of versions (the false-rollback rate and the smallest drop caught, from
which the sample's size was chosen), and a version with one class mostly wrong."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ml.contract.canary_commands import SAMPLE_IMAGES
from runtime.canary.gates import Figures, Outcome, Thresholds, accuracy
from runtime.canary.paired import SampleError, paired, read_report, worse_p

T = Thresholds()


def test_pairs_are_counted_image_by_image():
    p = paired(labels="0123", stable="0120", canary="0023")
    # image 1: only the stable right (lost); image 3: only the canary right (gained)
    assert (p.images, p.stable_only, p.canary_only) == (4, 1, 1)
    assert p.per_class[1] == (1, 1, 0) and p.per_class[3] == (1, 0, 1)
    assert p.drop == 0 and p.class_drop(1) == 1.0


@pytest.mark.parametrize(
    "labels,stable,canary", [("01", "0", "01"), ("", "", ""), ("0a", "00", "00"), ("٠", "0", "0")]
)
def test_answers_that_are_not_a_comparison_are_refused(labels, stable, canary):
    with pytest.raises(SampleError):
        paired(labels, stable, canary)


def test_mcnemar_against_the_binomial_written_out():
    from math import comb

    assert worse_p(7, 3) == pytest.approx(sum(comb(10, k) for k in range(7, 11)) / 2**10)
    assert worse_p(0, 0) == 1.0


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=10,
)


@given(st.dictionaries(st.sampled_from(["accuracy", "labels", "predicted", "x"]), json_values))
def test_any_report_is_read_or_refused_with_a_sample_error(found):
    try:
        accuracies, p = read_report(json.loads(json.dumps(found)), 1, 2)
    except SampleError:
        return
    assert all(isinstance(v, float) for v in accuracies.values())
    assert p is None or p.images == len(found["labels"])


def test_a_real_report_pairs_the_two_versions():
    found = {
        "accuracy": {"1": 0.5, "2": 1.0},
        "labels": "0101",
        "predicted": {"1": "0000", "2": "0101"},
    }
    accuracies, p = read_report(found, stable=1, canary=2)
    assert accuracies == {"1": 0.5, "2": 1.0} and (p.stable_only, p.canary_only) == (0, 2)
    with pytest.raises(SampleError, match="no answers of versions 1 and 3"):
        read_report(found, stable=1, canary=3)


def simulate(rng, images, drop, disagree=0.06, trials=2000):
    """How often the gate fails a canary ``drop`` below the stable on ``images`` images, the
    two disagreeing on ``disagree`` of them (lost and gained drawn around the drop)."""
    shares = [(disagree + drop) / 2, (disagree - drop) / 2, 1 - disagree]
    draws = rng.multinomial(images, shares, size=trials)
    return float(
        np.mean([worse_p(int(lost), int(gained)) <= T.model_alpha for lost, gained, _ in draws])
    )


@pytest.mark.parametrize(
    ("images", "drop", "at_least", "at_most"),
    [
        (SAMPLE_IMAGES, 0.0, 0.0, 0.006),  # an equal version: rolled back ~ alpha (0.2 %)
        (SAMPLE_IMAGES, 0.015, 0.90, 1.0),  # the smallest drop caught >= 90 %: stated
        (SAMPLE_IMAGES, 0.02, 0.99, 1.0),
        (SAMPLE_IMAGES, 0.01, 0.35, 0.65),  # 1 point: about half
        (1000, 0.02, 0.2, 0.5),  # the old sample's size: a 2-point drop a third of the time
    ],
)
def test_the_decision_against_the_true_drop_and_the_sample_size(images, drop, at_least, at_most):
    rate = simulate(np.random.default_rng(5), images, drop)
    assert at_least <= rate <= at_most, rate


def figures_of(labels, stable, canary):
    p = paired(labels, stable, canary)
    acc = lambda answers: float(np.mean([a == b for a, b in zip(answers, labels, strict=True)]))  # noqa: E731
    return Figures(500, 0, 0.02, acc(stable)), Figures(500, 0, 0.02, acc(canary), p)


def test_one_class_mostly_wrong_fails_though_the_total_is_within_two_points():
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 10, SAMPLE_IMAGES)
    stable = np.where(rng.random(SAMPLE_IMAGES) < 0.9, labels, (labels + 1) % 10)
    canary = stable.copy()
    wrong = (labels == 6) & (rng.random(SAMPLE_IMAGES) < 0.25)  # class 6: a quarter lost
    canary[wrong] = (labels[wrong] + 1) % 10
    better = (labels != 6) & (stable != labels) & (rng.random(SAMPLE_IMAGES) < 0.08)
    canary[better] = labels[better]  # ... the others a little better
    s, c = figures_of(*("".join(map(str, a)) for a in (labels, stable, canary)))
    assert abs(s.accuracy - c.accuracy) < 0.02
    gate = accuracy(s, c, T)
    assert gate.outcome is Outcome.FAIL and "class 6 recall" in gate.detail, gate


def test_an_identical_copy_and_a_better_version_pass():
    rng = np.random.default_rng(1)
    labels = rng.integers(0, 10, SAMPLE_IMAGES)
    stable = np.where(rng.random(SAMPLE_IMAGES) < 0.9, labels, (labels + 3) % 10)
    better = np.where(rng.random(SAMPLE_IMAGES) < 0.3, labels, stable)
    text = lambda a: "".join(map(str, a))  # noqa: E731
    for canary in (stable, better):
        gate = accuracy(*figures_of(text(labels), text(stable), text(canary)), T)
        assert gate.outcome is Outcome.PASS, gate
