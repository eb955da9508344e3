"""SIGTERM in a multi-worker job: agree on a step, save it, exit with PREEMPTED_EXIT.

A pod that is deleted (a replaced job, a drain, an eviction, a reclaimed spot VM) or a
worker process stopped by `invoke` gets SIGTERM, and only some grace seconds before
SIGKILL. The workers of a MultiWorkerMirroredStrategy job cannot save on their own (saving
is collective: every worker must save at the same step), and a worker that just exits
leaves its peers blocked in their next all-reduce. So:

- SIGTERM only sets a flag;
- after every call of the train function that finishes a multiple of ``CHECK_EVERY``
  steps (a call runs ``steps_per_execution`` steps, ``ml.training.steps``) and after each epoch's
  last call, all workers all-reduce their flags (a few bytes), so all of them learn at
  the same step that someone was told to stop;
- then every worker saves the BackupAndRestore state at that step, and raises
  :class:`Preempted`; ``ml.training.train`` exits with :data:`PREEMPTED_EXIT`, which the local
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

from ml.training.steps import crossed

# PREEMPTED_EXIT is the contract's: the code TensorFlow's own preemption handler exits with
# off Google Cloud (failure_handling.BorgTerminationConfig). It stays importable from here
# for the callers outside ml/ that still do (tests/runtime/local/test_jobs.py, tests/e2e).
__all__ = ["CHECK_EVERY", "Preempted", "backup_callback"]

# Steps between two flag exchanges: a save starts at the end of the first call (of
# steps_per_execution steps) that finishes a multiple of this many steps after SIGTERM.
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
            # An integer save_freq turns on batch-level restore, so a mid-epoch save
            # resumes at its step rather than at the epoch's start. The periodic saves are
            # ours (on_train_batch_end): tf_keras counts save_freq in calls, which run
            # several steps each (steps_per_execution) and restart mid-epoch after a resume.
            # So on_train_batch_end does not call tf_keras's, whose only other work
            # (backup_if_preempted) is off without save_before_preemption.
            super().__init__(backup_dir=backup_dir, save_freq=steps_per_epoch)
            self.stop_asked = False
            self._call_first = 0
            if multi_worker:
                signal.signal(signal.SIGTERM, self._on_sigterm)

        def _on_sigterm(self, signum: int, frame: Any) -> None:
            self.stop_asked = True

        def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
            self._call_first = int(batch)  # the call's first step
            super().on_train_batch_begin(batch, logs)

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            last = int(batch)  # the call's last step: what a save now holds
            # tf_keras recorded the call's first step; a restore resumes after the saved one.
            self._training_state._ckpt_saved_batch.assign(last)
            step = last + 1
            last_of_epoch = step == steps_per_epoch
            final = last_of_epoch and self._current_epoch == self.params.get("epochs", 0) - 1
            # The last call of all is not checked: finishing takes less than a restart.
            due = crossed(self._call_first, last, CHECK_EVERY) or last_of_epoch
            stop = multi_worker and due and not final and self._anyone_asked()
            if last_of_epoch or stop:
                started = time.monotonic()
                self._backup(epoch=self._current_epoch, batch=last)
                if stop:
                    raise Preempted(int(self._current_epoch), step, time.monotonic() - started)

        def _anyone_asked(self) -> bool:
            """The same answer on every worker: did any of them get SIGTERM?"""
            flag = 1.0 if self.stop_asked else 0.0
            value = strategy.run(lambda: tf.constant(flag))
            return float(strategy.reduce(tf.distribute.ReduceOp.SUM, value, axis=None)) > 0

    return PreemptibleBackup()
