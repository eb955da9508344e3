"""integration.apiproxy: a loopback TCP proxy whose target file says, per connection, where
bytes go; re-pointing it sends the next connection to another server, the URL unchanged."""

from __future__ import annotations

import socket
import socketserver
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from hypothesis import given
from hypothesis import strategies as st

from integration import apiproxy


@contextmanager
def answering(word: bytes) -> Iterator[int]:
    """A TCP server on loopback that answers every line with ``word`` + the line."""

    class Echo(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            for line in self.rfile:
                self.wfile.write(word + line)

    with socketserver.ThreadingTCPServer(("127.0.0.1", 0), Echo) as server:
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        yield server.server_address[1]
        server.shutdown()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ask(port: int, line: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(line)
        s.shutdown(socket.SHUT_WR)
        got = b""
        while chunk := s.recv(4096):
            got += chunk
        return got


def test_each_connection_goes_where_the_target_file_says_then(tmp_path) -> None:
    target = tmp_path / "target"
    with answering(b"a:") as a, answering(b"b:") as b:
        target.write_text(f"127.0.0.1:{a}\n")
        port, ready = _free_port(), threading.Event()
        threading.Thread(target=apiproxy.serve, args=(port, target, ready), daemon=True).start()
        assert ready.wait(10)
        assert _ask(port, b"hello\n") == b"a:hello\n"
        target.write_text(f"127.0.0.1:{b}\n")  # re-pointed: the same URL, another server
        assert _ask(port, b"hello\n") == b"b:hello\n"
        big = b"x" * 200_000 + b"\n"
        assert _ask(port, big) == b"b:" + big


@pytest.mark.parametrize(
    ("text", "parsed"),
    [("127.0.0.1:6443\n", ("127.0.0.1", 6443)), ("h:1\nignored", ("h", 1))],
)
def test_parse_target(text, parsed) -> None:
    assert apiproxy.parse_target(text) == parsed


@given(st.text(max_size=40))
def test_parse_target_takes_only_host_port(text) -> None:
    try:
        host, port = apiproxy.parse_target(text)
    except ValueError:
        return
    assert host and host in text and 0 < port < 65536


def test_main_with_bad_arguments_prints_usage_and_returns_2(capsys) -> None:
    assert apiproxy.main(["x"]) == 2
    assert "usage" in capsys.readouterr().err
