"""ml/training/progress.py's Tracker, without TensorFlow: the progress lines, the epoch rows of
metrics.json and the worker's metrics, hook by hook as Keras calls them (a call of several
steps with ``steps_per_execution``; a run restored from a backup). The real callback in a
real job: tests/ml/training/test_train.py and tests/ml/training/test_train_metrics.py."""

from __future__ import annotations

import json

from ml.contract import PROGRESS_PREFIX
from ml.training.config import TrainConfig
from ml.training.progress import Run, Tracker


class Recorded:
    """A TrainMetrics stand-in that records each update (the real one: its own tests)."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def __getattr__(self, name: str):
        return lambda *args: self.calls.append((name, *args))


def events(capsys) -> list[dict]:
    out = capsys.readouterr().out
    return [json.loads(line[len(PROGRESS_PREFIX) :]) for line in out.splitlines()
            if line.startswith(PROGRESS_PREFIX)]  # fmt: skip


def test_an_epoch_of_calls_of_two_steps_reads_every_fifth_step_and_the_last(capsys):
    tm = Recorded()
    state: dict = {}
    t = Tracker(Run(TrainConfig(epochs=1), steps=6, log_every=5, state=state, tm=tm,
                    examples_per_step=64))  # fmt: skip
    t.epoch_begin(0, 0.01)
    reads = []
    for first in (0, 2, 4):  # three calls of two steps
        t.batch_begin(first)
        if t.batch_end(first + 1):
            reads.append(first + 1)
            t.read(first + 1, {"loss": 1.0 / (first + 2)})
    logs = {"accuracy": 0.5}
    t.epoch_end(0, logs, 0.01)
    assert reads == [5]  # steps 5 and 6 are in the last call: read once, at its end
    got = events(capsys)
    assert [e["event"] for e in got] == ["step", "epoch"]
    assert got[0]["step"] == 6 and got[0]["loss"] == 1 / 6
    assert logs["loss"] == 1 / 6 and state["history"][0]["steps_run"] == 6
    steps = [c for c in tm.calls if c[0] == "steps_done"]
    assert [(n, ex) for _, n, _, ex in steps] == [(2, 128)] * 3
    assert ("epoch", 1) in tm.calls and ("read_loss", 1 / 6) in tm.calls
    assert ("resumed", 0) in tm.calls  # a fresh start says 0


def test_a_run_restored_from_a_backup_says_where_it_resumed(capsys):
    tm = Recorded()
    t = Tracker(Run(TrainConfig(epochs=3), steps=10, log_every=5, state={}, tm=tm))
    t.epoch_begin(1, 0.01)
    t.batch_begin(4)
    assert ("resumed", 14) in tm.calls  # the job's step: epoch 1 of 10 steps, then 4
    out = capsys.readouterr().out
    assert "resuming from backup at epoch 2/3, after step 4/10" in out
    assert '"event": "resumed", "epoch": 1, "step": 4' in out
