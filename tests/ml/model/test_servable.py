"""ml.model.servable: what every answer must be (any array in, the rule out), and the
contract checked the way the server loads a version (the malformed exports themselves are
refused by the selection in tests/ml/selection/test_evaluate.py)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from ml.model.servable import SUM_TOLERANCE, NotServable, check_probabilities

ROWS = hnp.arrays(
    np.float32,
    hnp.array_shapes(min_dims=2, max_dims=2, min_side=1, max_side=4).map(lambda s: (s[0], 10)),
    elements=st.floats(-2, 2, width=32) | st.sampled_from([np.nan, np.inf, 0.1]),
)


@given(ROWS)
def test_only_rows_of_finite_probabilities_summing_to_one_pass(rows: np.ndarray) -> None:
    good = (
        np.isfinite(rows).all(axis=1)
        & ((rows >= 0) & (rows <= 1)).all(axis=1)
        & (np.abs(rows.sum(axis=1, dtype=np.float64) - 1) <= SUM_TOLERANCE)
    )
    if good.all():
        assert check_probabilities(rows, len(rows)) is not None
    else:
        with pytest.raises(NotServable, match=f"for instance {int(np.argmin(good))} "):
            check_probabilities(rows, len(rows))


def test_softmax_rows_pass_and_a_wrong_shape_does_not() -> None:
    rows = np.exp(np.random.default_rng(0).normal(size=(5, 10))).astype(np.float32)
    rows /= rows.sum(axis=1, keepdims=True)
    assert check_probabilities(rows, 5).shape == (5, 10)
    with pytest.raises(NotServable, match=r"shape \(5, 10\) for 4 image\(s\)"):
        check_probabilities(rows, 4)
