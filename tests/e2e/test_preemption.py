"""e2e tier: SIGTERM to a real 2-worker MultiWorkerMirroredStrategy job.

Both workers agree on a step, save it and exit with PREEMPTED_EXIT within the stop
deadline; started again, the job resumes after that step (not at the epoch's start) and
runs exactly the steps that were left.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from common.process_group import stop_groups
from ml.contract import PREEMPTED_EXIT, PROGRESS_PREFIX
from runtime.local.jobs import STOP_GRACE_S, tf_config
from runtime.procs import free_ports

# 3 steps per call: divides neither 40 nor the check interval (ml.training.preemption.CHECK_EVERY).
EPOCHS, STEPS, SPE = 2, 40, 3


@pytest.fixture
def data_dir(required_data_dir: Path) -> Path:
    return required_data_dir


class Workers:
    """A job's worker processes; worker 0's progress events, as the runner reads them."""

    def __init__(
        self, volume: Path, data_dir: Path, epochs: int = EPOCHS, steps: int = STEPS
    ) -> None:
        ports = free_ports(2)
        cmd = [
            sys.executable, "-m", "ml", "train", "--volume", str(volume), "--model-type", "cnn",
            "--source-dir", str(data_dir), "--epochs", str(epochs),
            "--steps-per-epoch", str(steps), "--log-every", "1",
            "--steps-per-execution", str(SPE),
        ]  # fmt: skip
        self.events: list[dict] = []
        self.output: list[str] = []
        self.procs = []
        for i in range(2):
            env = dict(os.environ, TF_CONFIG=tf_config(ports, i), TF_NUM_INTRAOP_THREADS="1")
            self.procs.append(
                subprocess.Popen(
                    cmd,
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    start_new_session=True,
                )
            )
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.procs[0].stdout:
            self.output.append(line)
            if line.startswith(PROGRESS_PREFIX):
                self.events.append(json.loads(line[len(PROGRESS_PREFIX) :]))

    def wait_for_step(self, epoch: int, step: int, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while not any(
            e["event"] == "step" and e["epoch"] == epoch and e["step"] >= step for e in self.events
        ):
            assert all(p.poll() is None for p in self.procs), "".join(self.output[-40:])
            assert time.monotonic() < deadline, "".join(self.output[-40:])
            time.sleep(0.1)

    def codes(self, timeout: float) -> list[int | None]:
        deadline = time.monotonic() + timeout
        for p in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=max(0.0, deadline - time.monotonic()))
        return [p.poll() for p in self.procs]

    def stop(self) -> None:
        stop_groups(self.procs, grace=1.0)
        self.reader.join(timeout=5)


def test_sigterm_saves_the_agreed_step_and_the_restarted_job_resumes_after_it(tmp_path, data_dir):
    volume = tmp_path / "volume"
    first = Workers(volume, data_dir)
    try:
        first.wait_for_step(epoch=0, step=12)  # mid-epoch
        for p in first.procs:
            os.killpg(p.pid, signal.SIGTERM)  # what a pod deletion sends
        sent = time.monotonic()
        codes = first.codes(timeout=STOP_GRACE_S)
        took = time.monotonic() - sent
    finally:
        first.stop()
    print("".join(first.output[-15:]), f"exit codes {codes} after {took:.2f} s")
    assert codes == [PREEMPTED_EXIT, PREEMPTED_EXIT], "".join(first.output[-40:])
    (saved,) = [e for e in first.events if e["event"] == "preempted"]
    print(f"SIGTERM to exit: {took:.2f} s, of which the save took {saved['save_seconds']} s")
    assert saved["epoch"] == 0 and 12 <= saved["step"] < STEPS
    assert any((volume / "checkpoints" / "cnn" / "backup" / "chief").glob("ckpt-*.index"))
    done_before = max(e["step"] for e in first.events if e["event"] == "step")
    assert done_before == saved["step"]  # nothing ran past the saved step

    second = Workers(volume, data_dir)
    try:
        assert second.codes(timeout=600) == [0, 0], "".join(second.output[-40:])
        second.reader.join(timeout=10)
    finally:
        second.stop()
    (resumed,) = [e for e in second.events if e["event"] == "resumed"]
    assert (resumed["epoch"], resumed["step"]) == (0, saved["step"])
    # A progress line per call (log every step): the first call after the saved step.
    steps = [(e["epoch"], e["step"]) for e in second.events if e["event"] == "step"]
    assert steps[0] == (0, min(saved["step"] + SPE, STEPS)) and steps[-1] == (EPOCHS - 1, STEPS)
    metrics = json.loads((volume / "candidates" / "cnn" / "metrics.json").read_text())
    assert (metrics["resumed_from_epoch"], metrics["resumed_from_step"]) == (0, saved["step"])
    ran = sum(row["steps_run"] for row in metrics["history"])
    assert saved["step"] + ran == EPOCHS * STEPS  # every step once, none twice


def test_short_epochs_are_checked_at_their_last_step(tmp_path, data_dir):
    """Fewer steps per epoch than the check interval: the epoch's last step is a check."""
    volume = tmp_path / "volume"
    workers = Workers(volume, data_dir, epochs=50, steps=3)
    try:
        workers.wait_for_step(epoch=1, step=1)
        for p in workers.procs:
            os.killpg(p.pid, signal.SIGTERM)
        codes = workers.codes(timeout=STOP_GRACE_S)
    finally:
        workers.stop()
    assert codes == [PREEMPTED_EXIT, PREEMPTED_EXIT], "".join(workers.output[-40:])
    (saved,) = [e for e in workers.events if e["event"] == "preempted"]
    assert saved["step"] == 3  # saved at an epoch's end (its one call: SPE cut to 3)
