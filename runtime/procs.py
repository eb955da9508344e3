"""Process helpers for the local runtime: ports, liveness, stopping detached processes by
pid, log tails. Stopping a child's process group: ``common.process_group``."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
from pathlib import Path

import psutil

from common.poll import Done, Pending, poll
from common.process_group import signal_groups

REPO = Path(__file__).resolve().parents[1]


def python_env() -> dict[str, str]:
    """The environment every pod-contract step runs with here: this repository importable
    (``python -m ml <step>``), output unbuffered, TensorFlow's C++ logging quiet."""
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """``n`` distinct ports that were free on ``host`` a moment ago (bound together)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind((host, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """True if a server could listen on ``host:port`` now.

    The probe binds as servers do (uvicorn, TensorBoard: ``SO_REUSEADDR``), so connections
    a stopped or killed server left in TIME_WAIT, which block a plain bind for up to a
    minute but not a server's, do not count; a socket still listening does.
    """
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def cmdline(pid: int) -> str:
    """The command line of ``pid`` ('' if it is gone, a zombie or unreadable)."""
    try:
        return " ".join(psutil.Process(pid).cmdline()).strip()
    except psutil.Error:
        return ""


def is_alive(pid: int, must_contain: str = "") -> bool:
    """True if ``pid`` runs (not a zombie) and its command line contains ``must_contain``.

    The command-line check guards against a recycled pid belonging to someone else.
    """
    if pid <= 0:
        return False
    try:
        if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
            return False
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        pass
    return must_contain in cmdline(pid) if must_contain else True


def started_at(pid: int) -> float | None:
    """When ``pid`` started (seconds since the epoch, as psutil reports it); None if gone."""
    try:
        return psutil.Process(pid).create_time()
    except (psutil.Error, ValueError):
        return None


def is_ours(pid: int, must_contain: str, started: float | None) -> bool:
    """:func:`is_alive`, and, when the start time we recorded is known, started then: a pid
    the system recycled for another process (another work dir's server, say) is not ours."""
    if not is_alive(pid, must_contain):
        return False
    return started is None or started_at(pid) == started


def stop_pids(pids: list[int], must_contain: str, grace: float = 5.0) -> list[int]:
    """``common.process_group.stop_groups`` for detached processes we started earlier (by
    pid, checked against ``must_contain``); the pids that were running."""
    running = [pid for pid in pids if is_alive(pid, must_contain)]
    signal_groups(running, signal.SIGTERM)
    poll(
        lambda: _still_alive(running),
        lambda alive: Pending() if alive else Done(),
        timeout=grace,
        interval=0.1,
    )
    signal_groups(_still_alive(running), signal.SIGKILL)
    return running


def _still_alive(pids: list[int]) -> list[int]:
    """The pids that still run (reaping those that are our own exited children)."""
    for pid in pids:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
    return [pid for pid in pids if is_alive(pid)]


def stop_pid(
    pid: int, must_contain: str, grace: float = 10.0, started: float | None = None
) -> bool:
    """Stop a detached process (and its group) we started earlier (at ``started``, when
    recorded); False if it is not running, or the pid now belongs to another process."""
    if not is_ours(pid, must_contain, started):
        return False
    return bool(stop_pids([pid], must_contain, grace))


def tail(path: Path, lines: int = 30) -> str:
    """The last ``lines`` lines of a text file ('' if missing)."""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            data = f.read().decode(errors="replace")
    except OSError:
        return ""
    return "\n".join(data.splitlines()[-lines:])
