"""SIGTERM in a multi-worker job: agree on a step, save it, exit with PREEMPTED_EXIT.

A pod that is deleted (a replaced job, a drain, an eviction, a reclaimed spot VM) or a
worker process stopped by `invoke` gets SIGTERM, and only some grace seconds before
SIGKILL. The workers of a MultiWorkerMirroredStrategy job cannot save on their own (saving
is collective: every worker must save at the same step), and a worker that just exits
leaves its peers blocked in their next all-reduce. So:

- SIGTERM only sets a flag;
- every ``CHECK_EVERY`` steps and at each epoch's last step, all workers all-reduce their
  flags (a few bytes), so all of them learn at the same step that someone was told to stop;
- then every worker saves the BackupAndRestore state at that step, and raises
  :class:`Preempted`; ``ml.train`` exits with :data:`PREEMPTED_EXIT`, which the local
  runner restarts without counting it against ``--max-restarts`` (on a cluster the
  kubelet restarts such a worker in place, and the training operator counts that);
- the restarted job resumes from that step (BackupAndRestore's batch-level restore).

tf-keras has this as ``BackupAndRestore(save_before_preemption=True)``, but enables it only
on Google Cloud (``distributed_file_utils.support_on_demand_checkpoint_callback`` asks the
GCE metadata server); everywhere else the argument does nothing. A single worker (no
``TF_CONFIG``) keeps Python's default: SIGTERM ends it at once.
"""

from __future__ import annotations

import signal
import time
from typing import Any

# PREEMPTED_EXIT is the contract's: the code TensorFlow's own preemption handler exits with
# off Google Cloud (failure_handling.BorgTerminationConfig). It stays importable from here
# for the callers outside ml/ that still do (tests/test_runtime.py, tests/e2e).
__all__ = ["CHECK_EVERY", "Preempted", "backup_callback"]

# Steps between two flag exchanges: a save starts at most this many steps after SIGTERM.
CHECK_EVERY = 5


class Preempted(Exception):
    """Raised out of ``fit`` once the state of ``epoch``/``step`` (1-based) is saved."""

    def __init__(self, epoch: int, step: int, save_s: float) -> None:
        super().__init__(f"preempted: saved epoch {epoch + 1} step {step} in {save_s:.2f} s")
        self.epoch, self.step, self.save_s = epoch, step, save_s


def backup_callback(keras: Any, strategy: Any, backup_dir: str, steps_per_epoch: int) -> Any:
    """BackupAndRestore that saves at each epoch's end and, in a multi-worker job, on SIGTERM.

    Create it right after the strategy: from then on SIGTERM only sets the flag, so a
    notice that comes while the data loads is acted on at the first check in ``fit``, and
    one that comes after the last check lets the worker finish and export (seconds).
    """
    import tensorflow as tf

    multi_worker = strategy.num_replicas_in_sync > 1

    class PreemptibleBackup(keras.callbacks.BackupAndRestore):
        def __init__(self) -> None:
            # An integer save_freq (one epoch's steps) turns on batch-level restore, so a
            # mid-epoch save resumes at its step rather than at the epoch's start.
            super().__init__(backup_dir=backup_dir, save_freq=steps_per_epoch)
            self.stop_asked = False
            self._began = False
            if multi_worker:
                signal.signal(signal.SIGTERM, self._on_sigterm)

        def _on_sigterm(self, signum: int, frame: Any) -> None:
            self.stop_asked = True

        def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
            if not self._began:  # after a mid-epoch restore, count from the restored step,
                self._began = True  # so the periodic saves still fall at epoch ends
                self._batches_count = int(batch)
            super().on_train_batch_begin(batch, logs)

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            super().on_train_batch_end(batch, logs)
            step = int(batch) + 1
            last_of_epoch = step == steps_per_epoch
            if last_of_epoch and self._current_epoch == self.params.get("epochs", 0) - 1:
                return  # the last step of all: finishing takes less than a save and restart
            due = step % CHECK_EVERY == 0 or last_of_epoch
            if multi_worker and due and self._anyone_asked():
                started = time.monotonic()
                self._backup(epoch=self._current_epoch, batch=batch)
                saved = time.monotonic() - started
                raise Preempted(int(self._current_epoch), step, saved)

        def _anyone_asked(self) -> bool:
            """The same answer on every worker: did any of them get SIGTERM?"""
            flag = 1.0 if self.stop_asked else 0.0
            value = strategy.run(lambda: tf.constant(flag))
            return float(strategy.reduce(tf.distribute.ReduceOp.SUM, value, axis=None)) > 0

    return PreemptibleBackup()
