"""e2e tier: faults on the local runtime, as a careless user or neighbour causes them.

A server killed under load and brought back on its port at once; two deploys at once; a
publish landing while a deploy waits; a full disk. Real processes, TF, server. Run: nox -s e2e
"""

from __future__ import annotations

import contextlib
import errno
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
from pathlib import Path

import psutil
import pytest

from common.poll import Done, Pending, poll
from ml import contract
from runtime.procs import free_ports
from tests.support.e2e_kit import (
    SERVICE,
    deployed,
    invoke,
    invoke_in_background,
    processes_mentioning,
)

TRAIN_SMALL = ("train", "--model-type", "cnn", "--workers", "1", "--epochs", "1")
SERVED = re.compile(r"serving tf-mnist version (\d+)")


def versions(wd: Path) -> list[int]:
    serving = wd / "volume" / "serving" / SERVICE
    if not serving.is_dir():
        return []
    return sorted(int(p.name) for p in serving.iterdir() if p.name.isdigit())


def hidden_leftovers(wd: Path) -> list[str]:
    """Temp files and half-published copies: what no fault may leave behind."""
    found = [p.name for p in wd.iterdir() if p.name.startswith(".state.")]
    serving = wd / "volume" / "serving" / SERVICE
    if serving.is_dir():
        found += [p.name for p in serving.iterdir() if p.name.startswith(".publish-")]
    return found


@pytest.fixture(scope="module")
def served(tmp_path_factory, required_data_dir):
    """up -> a small training run of one model -> deploy: a running service to break."""
    wd = tmp_path_factory.mktemp("faults") / "wd"
    with deployed(wd, required_data_dir, *TRAIN_SMALL, "--steps-per-epoch", "5") as s:
        yield s


def _load(port: int, stop: threading.Event, body: bytes) -> None:
    """Keep-alive requests until the server goes away (or ``stop``)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    with contextlib.suppress(OSError, http.client.HTTPException):
        while not stop.is_set():
            conn.request("POST", f"/v1/models/{SERVICE}:predict", body)
            conn.getresponse().read()
    conn.close()


def _time_wait_on(port: int) -> bool:
    return any(
        c.laddr and c.laddr.port == port and c.status == psutil.CONN_TIME_WAIT
        for c in psutil.net_connections("tcp")
    )


def test_a_server_killed_under_load_comes_back_on_its_port_at_once(served):
    wd, port = served["wd"], served["port"]
    state = json.loads((wd / "state.json").read_text())
    body = (wd / "sample-request.json").read_bytes()
    idle = [http.client.HTTPConnection("127.0.0.1", port, timeout=10) for _ in range(3)]
    for conn in idle:  # kept open between requests, as browsers and load tools do
        conn.request("POST", f"/v1/models/{SERVICE}:predict", body)
        conn.getresponse().read()
    stop = threading.Event()
    clients = [threading.Thread(target=_load, args=(port, stop, body)) for _ in range(4)]
    for t in clients:
        t.start()
    os.kill(state["server"]["pid"], signal.SIGKILL)
    for t in clients:
        t.join(timeout=30)
    stop.set()
    for conn in idle:
        conn.close()
    assert _time_wait_on(port), "the kill left no TIME_WAIT: the test would prove nothing"
    r = invoke(wd, "deploy", "--http-port", str(port))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert f"at http://127.0.0.1:{port}" in r.stdout


def test_a_port_in_use_is_refused_before_anything_is_published(served):
    wd, port = served["wd"], served["port"]
    assert invoke(wd, "down").returncode == 0
    before = versions(wd)
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        r = invoke(wd, "deploy", "--http-port", str(taken))
    assert r.returncode == 1 and f"port {taken} on 127.0.0.1 is in use" in r.stderr
    assert versions(wd) == before
    assert invoke(wd, "deploy", "--http-port", str(port)).returncode == 0


def test_two_deploys_at_once_take_turns_and_each_reports_its_own_version(served):
    wd = served["wd"]
    before = versions(wd)
    first, second = (invoke_in_background(wd, "deploy", "--force") for _ in range(2))
    outs = [p.communicate(timeout=600) for p in (first, second)]
    for proc, (out, err) in zip((first, second), outs, strict=True):
        print(out, err)
        assert proc.returncode == 0, out[-3000:] + err[-3000:]
    reported = sorted(int(SERVED.search(out)[1]) for out, _ in outs)
    assert reported == [before[-1] + 1, before[-1] + 2] == versions(wd)[-2:]
    assert sum("waiting for invoke deploy" in out for out, _ in outs) == 1
    report = json.loads((wd / "volume" / "reports" / "selection.json").read_text())
    assert report["version"] == before[-1] + 2
    assert hidden_leftovers(wd) == []


def test_a_publish_landing_while_deploy_waits_is_served_and_accepted(served):
    # Another publisher (a second selection, a cluster job on the same volume) lands its
    # version right after this deploy's: the server goes straight to the newest.
    wd = served["wd"]
    serving = wd / "volume" / "serving" / SERVICE
    latest = versions(wd)[-1]
    staged = serving.parent / ".elsewhere-staged"
    shutil.copytree(serving / str(latest), staged)  # staged beforehand: lands in one rename
    deploy = invoke_in_background(wd, "deploy", "--force")
    try:
        verdict = poll(
            lambda: (serving / str(latest + 1)).is_dir(),
            lambda seen: Done() if seen else Pending(),
            timeout=300,
            interval=0.01,
        )
        assert isinstance(verdict, Done), "the deploy published nothing"
        os.rename(staged, serving / str(latest + 2))
        out, err = deploy.communicate(timeout=300)
    finally:
        if deploy.poll() is None:
            deploy.kill()
    print(out, err)
    assert deploy.returncode == 0, out[-3000:] + err[-3000:]
    assert int(SERVED.search(out)[1]) in (latest + 1, latest + 2)


LOOPBACK = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}


def listeners_of_processes_mentioning(text: str) -> dict[int, tuple[str, set[tuple[str, int]]]]:
    """pid -> (command line, every (address, port) it listens on), for our processes."""
    found = {}
    for pid in processes_mentioning(text):
        with contextlib.suppress(psutil.Error):
            proc = psutil.Process(pid)
            connections = getattr(proc, "net_connections", None) or proc.connections  # psutil<6
            sockets = {
                (c.laddr.ip, c.laddr.port)
                for c in connections(kind="inet")
                if c.status == psutil.CONN_LISTEN
            }
            found[pid] = (" ".join(proc.cmdline()), sockets)
    return found


def test_every_process_the_lifecycle_starts_listens_on_loopback_only(served):
    # The model server is up; a 2-worker training job and TensorBoard join it.
    wd = served["wd"]
    two_workers = ("--workers", "2", "--epochs", "1", "--steps-per-epoch", "40")
    train = invoke_in_background(wd, "train", "--model-type", "cnn", *two_workers)
    board = invoke_in_background(wd, "tensorboard", "--port", str(free_ports(1)[0]))
    seen: dict[int, set[tuple[str, int]]] = {}

    def observe() -> dict[int, tuple[str, set[tuple[str, int]]]]:
        now = listeners_of_processes_mentioning(str(wd))
        for pid, (_, sockets) in now.items():
            seen.setdefault(pid, set()).update(sockets)
        return now

    def judge(now: dict[int, tuple[str, set[tuple[str, int]]]]) -> Done | Pending:
        listening = [cmd for cmd, sockets in now.values() if sockets]
        kinds = {
            k
            for cmd in listening
            for k in (contract.step_mark("train"), contract.step_mark("serve"), "tensorboard")
            if k in cmd
        }
        workers = sum(contract.step_mark("train") in cmd for cmd in listening)
        return Done() if len(kinds) == 3 and workers == 2 else Pending(str(listening))

    try:
        verdict = poll(observe, judge, timeout=300, interval=0.2)
        assert isinstance(verdict, Done), f"not every process was seen listening: {verdict}"
    finally:
        board.send_signal(signal.SIGINT)
        board.communicate(timeout=60)
        out, err = train.communicate(timeout=600)
    assert train.returncode == 0, out[-3000:] + err[-3000:]
    wide = {(pid, ip, port) for pid, s in seen.items() for ip, port in s if ip not in LOOPBACK}
    assert wide == set(), f"listening beyond loopback: {wide}"


@pytest.fixture
def full_disk(tmp_path):
    """A small tmpfs of its own: the work dir is its mount point (skips where no tmpfs can be
    mounted: mounting needs root)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2200m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {made.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill(disk: Path) -> None:
    """Take every free byte of ``disk``."""
    with (disk / "filler").open("wb", buffering=0) as f:
        os.posix_fallocate(f.fileno(), 0, shutil.disk_usage(disk).free)
        with contextlib.suppress(OSError):
            while True:  # what fallocate's rounding left
                f.write(b"\0" * 4096)
    assert shutil.disk_usage(disk).free == 0


def test_a_full_disk_is_one_clear_line_and_loses_nothing(full_disk, required_data_dir):
    wd = full_disk
    assert invoke(wd, "up", "--source-dir", str(required_data_dir)).returncode == 0
    assert invoke(wd, *TRAIN_SMALL, "--steps-per-epoch", "3").returncode == 0
    shutil.rmtree(wd / "volume" / "datasets")  # so up has something to write again
    state = (wd / "state.json").read_text()
    _fill(wd)
    for args in (
        ("up", "--source-dir", str(required_data_dir)),
        (*TRAIN_SMALL, "--steps-per-epoch", "3"),
        ("deploy", "--http-port", str(free_ports(1)[0])),
    ):
        r = invoke(wd, *args)
        assert r.returncode != 0, args
        errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and "Traceback" not in r.stdout + r.stderr, args
        assert re.search("full|space", errors[0]), errors
        assert hidden_leftovers(wd) == [], args
        assert (wd / "state.json").read_text() == state, "the state stays intact"
    assert versions(wd) == []
    (wd / "filler").unlink()
    r = invoke(wd, "down", "--purge")
    assert r.returncode == 0 and "a mount point" in r.stdout, r.stdout + r.stderr
    assert wd.is_dir() and list(wd.iterdir()) == []


def test_the_fill_helper_really_fills(full_disk):
    _fill(full_disk)
    with pytest.raises(OSError) as e, (full_disk / "more").open("wb", buffering=0) as f:
        f.write(b"x" * 65536)
    assert e.value.errno == errno.ENOSPC
