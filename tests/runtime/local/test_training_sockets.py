"""runtime/local/training.py: every socket a real 2-worker local training run listens on is on
loopback.

TensorFlow's gRPC server binds every interface whatever TF_CONFIG says; the local runtime
runs its workers with ``--bind-loopback`` (ml/training/loopback.py). This test lists the listening
sockets of every process the run starts, from outside, as ``ss -ltnp`` would.
"""

from __future__ import annotations

import contextlib

import psutil

from runtime.local import LocalRuntime
from runtime.local.training import train
from runtime.requests import TrainRequest
from runtime.workdir import Workdir

# What a loopback-only listener shows: 127.0.0.1, ::1, or 127.0.0.1 on a dual-stack socket.
LOOPBACK = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}


def listening(pid: int) -> set[tuple[int, str, int]]:
    """(pid, address, port) of every socket ``pid`` and its descendants listen on."""
    found = set()
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return found
    for proc in procs:
        connections = getattr(proc, "net_connections", None) or proc.connections
        with contextlib.suppress(psutil.NoSuchProcess):
            found |= {
                (proc.pid, c.laddr.ip, c.laddr.port)
                for c in connections(kind="inet")
                if c.status == psutil.CONN_LISTEN
            }
    return found


def log_tails(wd: Workdir) -> str:
    return "\n".join(p.read_text()[-3000:] for p in sorted(wd.logs.rglob("worker-*.log")))


class SocketWatch:
    """The runner's display: at every update once the chief has printed a training step
    (both workers' servers are up by then: the step's collectives ran), lists the sockets
    of every running worker and of the processes they started."""

    def __init__(self) -> None:
        self.sockets: set[tuple[int, str, int]] = set()
        self.workers: set[int] = set()

    def update(self, jobs) -> None:
        for job in jobs:
            self.workers |= {w.proc.pid for w in job.workers}
            if "step" in job.progress:
                for worker in job.workers:
                    self.sockets |= listening(worker.proc.pid)

    def close(self) -> None:
        pass


def test_every_socket_a_local_training_run_listens_on_is_loopback(
    tmp_path, monkeypatch, shared_data_dir
):
    monkeypatch.setenv("DISTML_DATA_DIR", str(shared_data_dir))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # the shim's build
    wd = Workdir.at(tmp_path / "wd")
    wd.create()
    wd.update_state(up=True, runtime="local")
    rt = LocalRuntime(wd, out=lambda line: None)
    watch = SocketWatch()
    request = TrainRequest(models=("cnn",), workers=2, epochs=2, steps_per_epoch=20, max_restarts=0)
    assert train(rt, request, watch) == 0, log_tails(wd)
    # Both workers were seen listening (their gRPC servers): the listing saw them.
    assert watch.workers <= {pid for pid, _, _ in watch.sockets}, (watch.workers, watch.sockets)
    assert len(watch.workers) == 2
    wide = sorted(s for s in watch.sockets if s[1] not in LOOPBACK)
    assert wide == [], f"listening beyond loopback: {wide}"
