"""The volume's locks: an exclusive flock held for a block, with who holds it for the
waiters' messages. Part of the pod contract (``ml/contract/__init__.py`` names the lock files:
``lock_path``); standard library only, as the contract is.
"""

from __future__ import annotations

import fcntl
import os
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ml.contract import AnyPath


class LockHeld(Exception):
    """Another process held a volume lock for the whole wait; ``holder`` says which."""

    def __init__(self, path: AnyPath, holder: str, waited: float) -> None:
        super().__init__(f"{path} is held by {holder} (waited {waited:.0f} s)")
        self.path, self.holder, self.waited = str(path), holder, waited


@contextmanager
def volume_lock(
    path: AnyPath, what: str, *, wait_s: float, on_wait: Callable[[str], None]
) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (an flock, created if missing) for the block.

    When another process holds it, ``on_wait(who)`` is called once and the lock is tried
    every 0.2 s for ``wait_s`` seconds, then :class:`LockHeld`. The kernel releases the lock
    when its holder exits, however it exits (``kill -9`` included): no stale lock to clear.
    The holder writes ``what``, its pid and host into the file, for the waiters' message.
    """
    Path(str(path)).parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(str(path), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        _acquire(fd, path, wait_s, on_wait)
        holder = f"{what} (pid {os.getpid()} on {socket.gethostname()}, since "
        holder += time.strftime("%H:%M:%S") + ")"
        try:  # who holds it is for messages only: a full disk must not stop the lock
            os.ftruncate(fd, 0)
            os.pwrite(fd, holder.encode(), 0)
        except OSError:
            pass
        yield
    finally:
        os.close(fd)


def _acquire(fd: int, path: AnyPath, wait_s: float, on_wait: Callable[[str], None]) -> None:
    started = time.monotonic()
    told = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            pass
        try:
            holder = Path(str(path)).read_text().strip()
        except OSError:
            holder = ""
        waited = time.monotonic() - started
        if waited >= wait_s:
            raise LockHeld(path, holder or "another process", waited)
        # A holder writes its name just after it takes the lock: give it a moment to.
        if not told and (holder or waited >= 1.0):
            on_wait(holder or "another process")
            told = True
        time.sleep(0.2)
