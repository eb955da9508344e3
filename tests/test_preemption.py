"""The contract's preemption exit code, held to TensorFlow's own preemption handler."""

from __future__ import annotations

import pytest

from ml.contract import PREEMPTED_EXIT
from ml.preemption import Preempted


def test_the_preempted_exit_code_is_the_one_tensorflows_handler_uses_off_google_cloud():
    from tensorflow.python.distribute.failure_handling import failure_handling

    config = failure_handling.BorgTerminationConfig()  # what applies off Google Cloud
    with pytest.raises(SystemExit) as exit_:
        config.exit_fn()
    assert exit_.value.code == PREEMPTED_EXIT
    assert PREEMPTED_EXIT < 128  # never mistaken for "killed by a signal" (128 + N)


def test_preempted_says_where_it_saved():
    e = Preempted(epoch=0, step=15, save_s=0.052)
    assert (e.epoch, e.step) == (0, 15)
    assert str(e) == "preempted: saved epoch 1 step 15 in 0.05 s"
