"""What a training worker shows while it trains, from one Keras callback: the progress lines
(``DISTML_PROGRESS {json}``, what the tasks read live), the learning-rate print, each
epoch's figures for ``metrics.json``, and the worker's Prometheus metrics
(``ml/training/train_metrics.py``).

:class:`Tracker` holds all of it and needs no TensorFlow; :func:`progress_callback` is the
thin Keras callback that feeds it (Keras is imported by the caller: tf-keras in training).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from ml.contract import PROGRESS_PREFIX
from ml.training.config import TrainConfig
from ml.training.steps import crossed
from ml.training.train_metrics import TrainMetrics


def emit(kind: str, **fields: Any) -> None:
    """One machine-readable progress line."""
    print(PROGRESS_PREFIX + json.dumps({"event": kind, **fields}), flush=True)


@dataclass
class Run:
    """One worker's run: its config, steps per epoch, how often to read the loss, the
    state the history goes into, its metrics and its share of a step's examples."""

    cfg: TrainConfig
    steps: int
    log_every: int
    state: dict[str, Any]
    tm: TrainMetrics
    examples_per_step: int = 0


class StepClock:
    """Time from an epoch's first step's start to its last step's end, and the steps run:
    the epoch's training alone, without its validation pass and end-of-epoch callbacks."""

    def __init__(self) -> None:
        self.started: float | None = None
        self.ended: float | None = None
        self.first = self.last = -1

    def begin(self, batch: int) -> None:
        if self.started is None:
            self.started, self.first = time.perf_counter(), batch

    def end(self, batch: int) -> None:
        """``batch``: the last step of the call (several with ``steps_per_execution``)."""
        self.ended, self.last = time.perf_counter(), batch

    @property
    def steps(self) -> int:
        return 0 if self.started is None else self.last - self.first + 1

    @property
    def seconds(self) -> float:
        return 0.0 if self.started is None or self.ended is None else self.ended - self.started


@dataclass
class Tracker:
    """The callback's state and decisions, one method per Keras hook."""

    run: Run
    epoch: int = 0
    clock: StepClock = field(default_factory=StepClock)
    means: dict[str, float] = field(default_factory=dict)
    call_first: int = 0
    call_started: float = 0.0

    def epoch_begin(self, epoch: int, lr: float) -> None:
        cfg, state = self.run.cfg, self.run.state
        if state.get("first_epoch") is None:
            state["first_epoch"] = epoch
        self.epoch, self.clock, self.means = epoch, StepClock(), {}
        self.run.tm.epoch(epoch + 1)
        print(f"epoch {epoch + 1}/{cfg.epochs}: learning rate {lr:.6g}", flush=True)

    def batch_begin(self, batch: int) -> None:
        """``batch``: the call's first step (it may run several)."""
        self.clock.begin(batch)
        self.call_first, self.call_started = batch, time.perf_counter()
        if "first_step" not in self.run.state:  # a restored backup starts past step 0
            self.run.state["first_step"] = batch
            self._announce_resume(batch)

    def batch_end(self, batch: int) -> bool:
        """``batch``: the call's last step. True when the loss is to be read now (every
        ``log_every`` steps and at the epoch's end): the caller reads it, on every worker
        alike (a collective), and hands it to :meth:`read`."""
        run = self.run
        self.clock.end(batch)
        n = batch - self.call_first + 1
        run.tm.steps_done(n, time.perf_counter() - self.call_started, n * run.examples_per_step)
        return crossed(self.call_first, batch, run.log_every) or batch + 1 == run.steps

    def read(self, batch: int, means: dict[str, float]) -> None:
        """The figures read after step ``batch``: a progress line and the loss gauge."""
        self.means = means
        loss = means.get("loss", float("nan"))
        self.run.tm.read_loss(loss)
        cfg = self.run.cfg
        emit("step", epoch=self.epoch, epochs=cfg.epochs, step=batch + 1, steps=self.run.steps,
             loss=loss)  # fmt: skip

    def epoch_end(self, epoch: int, logs: dict[str, Any] | None, lr: float) -> None:
        """The epoch's training figures as read after its last step (validation, which ran
        since, resets the metrics); in ``logs``, in place, so the callbacks after this one
        (TensorBoard, checkpoints) see them too."""
        if logs is not None:
            logs.update(self.means)
        row = {
            "epoch": epoch + 1,
            "learning_rate": lr,
            **{k: float(v) for k, v in (logs or {}).items() if k != "lr"},
            "steps_run": self.clock.steps,
            "step_seconds": round(self.clock.seconds, 4),
        }
        self.run.state.setdefault("history", []).append(row)
        emit("epoch", **row, epochs=self.run.cfg.epochs)

    def _announce_resume(self, step: int) -> None:
        """Say so when the first step of this run is not the job's first (a backup)."""
        epoch, cfg = self.epoch, self.run.cfg
        self.run.tm.resumed(epoch * self.run.steps + step)
        if epoch > 0 or step > 0:
            print(
                f"resuming from backup at epoch {epoch + 1}/{cfg.epochs}, after step "
                f"{step}/{self.run.steps}",
                flush=True,
            )
            emit("resumed", epoch=epoch, step=step)


def progress_callback(keras: Any, run: Run) -> Any:
    """The Keras callback feeding a :class:`Tracker` (``keras``: the module in use)."""
    from ml.model.architectures import read_metrics

    def lr_of(model: Any) -> float:
        return float(keras.backend.get_value(model.optimizer.learning_rate))

    class Progress(keras.callbacks.Callback):
        tracker = Tracker(run)

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            self.tracker.epoch_begin(int(epoch), lr_of(self.model))  # numpy ints on restore

        def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
            self.tracker.batch_begin(int(batch))

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            if self.tracker.batch_end(int(batch)):
                self.tracker.read(int(batch), read_metrics(self.model))

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            self.tracker.epoch_end(int(epoch), logs, lr_of(self.model))

    return Progress()
