"""ml.training.steps: which training call crosses a multiple of K steps, when each call runs several
steps (``steps_per_execution``) and callbacks see only its first and last batch.

Progress lines, the preemption check and the epoch-end save all hang on this answer
(test_preemption.py runs them through a real ``fit``); here the arithmetic alone, against
the steps each call runs counted one by one.
"""

from __future__ import annotations

import pytest

from ml.training.steps import crossed


@pytest.mark.parametrize("every", [1, 3, 5, 10])
def test_with_one_step_per_call_every_kth_step_is_crossed(every):
    assert [k for k in range(30) if crossed(k, k, every)] == list(range(every - 1, 30, every))


@pytest.mark.parametrize("per_call", [1, 2, 3, 4, 7, 10])
@pytest.mark.parametrize("every", [1, 3, 5, 10])
def test_a_call_crosses_when_one_of_its_steps_completes_a_multiple(per_call, every):
    for first in range(0, 40, per_call):
        last = first + per_call - 1
        steps_run = range(first + 1, last + 2)  # batch index i completes step i + 1
        assert crossed(first, last, every) == any(s % every == 0 for s in steps_run)


def test_a_call_that_passes_a_multiple_without_ending_on_it_still_crosses():
    assert crossed(3, 5, 5)  # steps 4..6 pass step 5
    assert not crossed(5, 8, 5)  # steps 6..9: none is a multiple of 5
    assert crossed(0, 9, 4)  # one call through steps 4 and 8: crossed once, not twice
