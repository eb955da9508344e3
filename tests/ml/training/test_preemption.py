"""The contract's preemption exit code, held to TensorFlow's own preemption handler; the
save-and-resume rules with calls of several steps, through a real in-process ``fit``."""

from __future__ import annotations

import json
import signal

import pytest

from ml.contract import PREEMPTED_EXIT, PROGRESS_PREFIX
from ml.training.preemption import Preempted


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


# --- Calls of several steps (steps_per_execution): progress, saves and resume ----------

STEPS, EPOCHS = 7, 2


class _OneOfTwoWorkers:
    """The strategy as one worker of a 2-worker job sees it: the flag exchange is the real
    strategy call (here over this process's one replica); the two-process exchange itself
    is the e2e tier's (tests/e2e/test_preemption.py)."""

    num_replicas_in_sync = 2

    def __init__(self) -> None:
        import tensorflow as tf

        self._strategy = tf.distribute.get_strategy()

    def run(self, fn):
        return self._strategy.run(fn)

    def reduce(self, op, value, axis):
        return self._strategy.reduce(op, value, axis=axis)


def _fit(backup_dir, spe, ask_from=None):
    """Train ``cnn`` through ml.training.train's progress callback and
    ml.training.preemption's backup, as ml.training.train wires them; with ``ask_from`` =
    (epoch, step), SIGTERM "arrives" just before the first call that starts at or after
    that step. Returns (model, events, Preempted)."""
    import numpy as np
    import tensorflow as tf
    import tf_keras as keras

    from ml.model.architectures import build_model
    from ml.training.config import TrainConfig
    from ml.training.preemption import backup_callback
    from ml.training.progress import Run, progress_callback
    from ml.training.train_metrics import TrainMetrics

    rng = np.random.default_rng(0)
    images = rng.random((64, 28, 28, 1), dtype=np.float32)
    data = tf.data.Dataset.from_tensor_slices((images, rng.integers(0, 10, 64))).repeat()
    model = build_model("cnn", seed=1, steps_per_execution=spe)
    previous = signal.getsignal(signal.SIGTERM)
    backup = backup_callback(keras, _OneOfTwoWorkers(), str(backup_dir), STEPS)

    class Asker(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch

        def on_train_batch_begin(self, batch, logs=None):
            if ask_from is not None and (self.epoch, batch) >= ask_from:
                backup.stop_asked = True

    state: dict = {}
    run = Run(TrainConfig(epochs=EPOCHS), STEPS, 5, state, TrainMetrics("cnn", 0))
    progress = progress_callback(keras, run)
    try:
        model.fit(
            data.batch(8), epochs=EPOCHS, steps_per_epoch=STEPS, verbose=0,
            callbacks=[progress, Asker(), backup],
        )  # fmt: skip
        stopped = None
    except Preempted as e:
        stopped = e
    finally:
        signal.signal(signal.SIGTERM, previous)
    return model, state, stopped


def _events(text):
    return [json.loads(line[len(PROGRESS_PREFIX) :]) for line in text.splitlines()
            if line.startswith(PROGRESS_PREFIX)]  # fmt: skip


@pytest.mark.parametrize(
    "spe, ask_from, saved",
    [
        (3, (0, 3), (0, 6)),  # call 3-5 finishes step 5: a check; saved after step 6
        (3, (0, 6), (0, 7)),  # call 6-6 crosses no multiple of 5, but ends the epoch
        (1, (0, 3), (0, 5)),  # one step per call: every 5th step
        (10, (0, 0), (0, 7)),  # cut to the epoch's 7 steps: one call per epoch
    ],
)
def test_calls_of_several_steps_check_save_and_resume_at_call_ends(
    tmp_path, capsys, spe, ask_from, saved
):
    _, _, stopped = _fit(tmp_path, spe, ask_from)
    assert stopped is not None and (stopped.epoch, stopped.step) == saved
    events = _events(capsys.readouterr().out)
    steps = [(e["epoch"], e["step"]) for e in events if e["event"] == "step"]
    assert steps[-1] == saved  # the progress line of the saved call came first

    model, second, again = _fit(tmp_path, spe)
    assert again is None
    events = _events(capsys.readouterr().out)
    (resumed,) = [e for e in events if e["event"] == "resumed"]
    done = saved[0] * STEPS + saved[1]
    assert (resumed["epoch"] * STEPS + resumed["step"]) == done
    # Every step once, none twice: the restored optimizer counts all of them.
    assert int(model.optimizer.iterations) == EPOCHS * STEPS
    assert sum(row["steps_run"] for row in second["history"]) == EPOCHS * STEPS - done


@pytest.mark.parametrize(
    "spe, expected",
    [(3, [6, 7]), (1, [5, 7]), (5, [5, 7]), (10, [7])],
)
def test_progress_lines_come_at_the_call_that_passes_each_multiple(capsys, tmp_path, spe, expected):
    """log_every 5, 7 steps an epoch: with 3 steps per call the calls end at 3, 6, 7."""
    model, state, stopped = _fit(tmp_path, spe)
    assert stopped is None
    events = _events(capsys.readouterr().out)
    for epoch in range(EPOCHS):
        steps = [e["step"] for e in events if e["event"] == "step" and e["epoch"] == epoch]
        assert steps == expected
    assert [row["steps_run"] for row in state["history"]] == [STEPS] * EPOCHS
    assert int(model.optimizer.iterations) == EPOCHS * STEPS
