"""runtime/local/tensorboard.py: a real TensorBoard over the volume's event files, answered over
HTTP, stopped by Ctrl-C with no process left; the refusals (nothing to show, a busy port),
a TensorBoard that dies at start, and --dry."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from common.errors import DistmlError
from common.poll import Done, Failed, Pending, poll
from ml import contract
from runtime.local import LocalRuntime
from runtime.procs import free_ports, port_is_free
from runtime.requests import TensorboardRequest
from runtime.workdir import Workdir

REPO = Path(__file__).resolve().parents[3]


def write_run(volume: Path, model: str = "cnn", split: str = "train") -> Path:
    """A real event file as Keras's TensorBoard callback leaves one (``epoch_loss``
    scalars), written with TensorBoard's own record writer (no TensorFlow needed)."""
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.record_writer import RecordWriter

    run = Path(contract.tensorboard_dir(volume, model)) / split
    run.mkdir(parents=True)
    path = run / f"events.out.tfevents.{int(time.time())}.test.1.v2"
    with path.open("wb") as f:
        writer = RecordWriter(f)
        first = event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2")
        writer.write(first.SerializeToString())
        for step in range(3):
            value = summary_pb2.Summary.Value(tag="epoch_loss", simple_value=1.0 / (step + 1))
            event = event_pb2.Event(
                wall_time=time.time(), step=step, summary=summary_pb2.Summary(value=[value])
            )
            writer.write(event.SerializeToString())
    return path


@pytest.fixture
def wd(tmp_path) -> Workdir:
    workdir = Workdir.at(tmp_path / "wd")
    workdir.create()
    workdir.update_state(up=True, runtime="local")
    return workdir


def _get(url: str) -> object:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.loads(resp.read())


def test_a_real_tensorboard_shows_the_runs_and_ctrl_c_leaves_nothing(wd):
    """Through the invoke CLI, as a user runs it (about 8-10 s here: TensorBoard imports
    TensorFlow at start)."""
    write_run(wd.volume)
    (port,) = free_ports(1)
    task = subprocess.Popen(
        [sys.executable, "-m", "invoke", "tensorboard", "--runtime", "local", "--port", str(port)],
        cwd=REPO,
        env={**os.environ, "INVOKE_WORKDIR": str(wd.root)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(task.stdout), daemon=True)
    reader.start()
    url = f"http://127.0.0.1:{port}/"
    ready = f"TensorBoard ready: {url} (Ctrl-C stops it)\n"
    boards: list[psutil.Process] = []
    try:
        verdict = poll(
            lambda: ready in lines,
            lambda seen: Done() if seen else Failed("exited") if task.poll() else Pending(),
            timeout=120,
            interval=0.1,
        )
        assert isinstance(verdict, Done), "".join(lines)
        boards = psutil.Process(task.pid).children(recursive=True)
        assert any("tensorboard.main" in " ".join(p.cmdline()) for p in boards)
        # The run written above, read by TensorBoard over V/tensorboard.
        runs = poll(
            lambda: _get(f"{url}data/runs"),
            lambda got: Done(got) if got else Pending(),
            timeout=30,
            interval=0.2,
        )
        assert isinstance(runs, Done) and runs.value == ["cnn/train"]
    finally:
        task.send_signal(signal.SIGINT)  # Ctrl-C
        code = task.wait(timeout=60)
        reader.join(timeout=10)
    assert code == 0, "".join(lines)
    assert lines[-1].startswith("TensorBoard stopped (log: ")
    assert not [p.pid for p in boards if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert port_is_free(port)


def test_nothing_to_show_says_to_train_first(wd):
    task = subprocess.run(
        [sys.executable, "-m", "invoke", "tensorboard", "--runtime", "local"],
        cwd=REPO,
        env={**os.environ, "INVOKE_WORKDIR": str(wd.root)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert task.returncode == 1
    assert (
        f"error: nothing to show yet: no TensorBoard event files under {wd.volume}/tensorboard "
        "(no model has been trained here); run `invoke train-all`"
    ) in task.stderr
    assert not (wd.logs / "tensorboard.log").exists()  # nothing was started


def test_a_busy_port_names_the_flag_and_starts_nothing(wd):
    write_run(wd.volume)
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        with pytest.raises(
            DistmlError, match=rf"^port {port} on 127\.0\.0\.1 is in use; pass --port"
        ):
            LocalRuntime(wd, out=lambda line: None).tensorboard(TensorboardRequest(port=port))
    assert not (wd.logs / "tensorboard.log").exists()


def test_a_tensorboard_that_dies_at_start_shows_its_log(wd, tmp_path):
    write_run(wd.volume)
    dying = tmp_path / "python"
    dying.write_text("#!/bin/sh\necho 'E0101 TensorBoard could not bind' >&2\nexit 3\n")
    dying.chmod(0o755)
    lines: list[str] = []
    rt = LocalRuntime(wd, out=lines.append)
    rt.python = str(dying)
    with pytest.raises(DistmlError) as err:
        rt.tensorboard(TensorboardRequest(port=free_ports(1)[0]))
    assert str(err.value).startswith("TensorBoard did not come up: TensorBoard exited with code 3")
    assert str(err.value).endswith("E0101 TensorBoard could not bind")
    assert lines[-1].startswith("TensorBoard stopped")


def test_dry_prints_the_command_and_starts_nothing(tmp_path):
    wd = Workdir.at(tmp_path / "nothing-here")
    lines: list[str] = []
    rt = LocalRuntime(wd, out=lines.append, dry=True)
    assert rt.tensorboard(TensorboardRequest(port=6123)) == 0
    assert lines == [
        f"would run (TensorBoard, in the background): python -m tensorboard.main --logdir "
        f"{wd.volume}/tensorboard --host 127.0.0.1 --port 6123",
        "would wait for http://127.0.0.1:6123/ to answer, print it and serve until Ctrl-C",
        "would then stop TensorBoard (its process group)",
    ]
    assert not wd.root.exists()
