"""runtime/procs.py: the port probe every local server start asks first (free ports, TIME_WAIT,
listeners on loopback or every interface), and the check that a recorded pid is still the
process we started (its start time)."""

from __future__ import annotations

import socket
import subprocess
import sys

import psutil
import pytest

from common.poll import Done, Pending, poll
from runtime.procs import free_ports, is_ours, port_is_free, started_at


def test_free_ports_are_distinct_and_bindable():
    ports = free_ports(6)
    assert len(set(ports)) == 6
    assert all(port_is_free(p) for p in ports)


def _tcp_states(port: int) -> set[str]:
    return {c.status for c in psutil.net_connections("tcp") if c.laddr and c.laddr.port == port}


def _leave_time_wait() -> int:
    """A port whose server side closed a connection first (TIME_WAIT), nothing listening."""
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    conn, _ = server.accept()
    conn.close()  # the server closes first: its side goes to TIME_WAIT once the client has
    server.close()
    client.close()
    verdict = poll(
        lambda: _tcp_states(port),
        lambda states: Done() if psutil.CONN_TIME_WAIT in states else Pending(str(states)),
        timeout=5,
        interval=0.05,
    )
    assert isinstance(verdict, Done), f"no TIME_WAIT on port {port}: {verdict}"
    return port


def test_a_port_left_in_time_wait_by_a_killed_server_is_free():
    # A server killed under load leaves its connections in TIME_WAIT for up to a minute; a
    # new server (SO_REUSEADDR) can listen there at once, so the probe must not refuse it.
    port = _leave_time_wait()
    assert port_is_free(port)


def test_a_port_with_a_listener_is_not_free():
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", 0))
        s.listen()
        assert not port_is_free(s.getsockname()[1])


def test_a_port_with_a_listener_on_every_interface_is_not_free_on_loopback():
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("0.0.0.0", 0))
        s.listen()
        assert not port_is_free(s.getsockname()[1], "127.0.0.1")


@pytest.fixture
def sleeper():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield proc
    proc.kill()
    proc.wait()


def test_a_recorded_pid_is_ours_only_with_its_start_time(sleeper):
    started = started_at(sleeper.pid)
    assert started is not None
    assert is_ours(sleeper.pid, "time.sleep", started)
    # The same pid with another start time is a recycled pid: someone else's process.
    assert not is_ours(sleeper.pid, "time.sleep", started - 5.0)
    assert not is_ours(sleeper.pid, "ml.server.serve", started)
    sleeper.kill()
    sleeper.wait()
    assert not is_ours(sleeper.pid, "time.sleep", started)
    assert started_at(sleeper.pid) is None
