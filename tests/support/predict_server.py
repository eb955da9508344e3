"""Helpers of the load test tests: a stdlib HTTP server in the test process that imitates the
KServe V1 ``:predict`` endpoint (well-behaved or flaky), a request body, and checks of
Locust's processes and charts. Locust itself always runs in a child process (it must never
be imported here: gevent monkey-patches the process)."""

from __future__ import annotations

import base64
import contextlib
import json
import struct
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import psutil

from common.poll import Done, Pending, poll

MODEL = "fashion"


PREDICT_PATH = f"/v1/models/{MODEL}:predict"


class _PredictHandler(BaseHTTPRequestHandler):
    """Imitates ``POST /v1/models/<name>:predict``; ``mode`` picks the misbehaviour."""

    mode: ClassVar[str] = "ok"  # "flaky": of every 4 requests, one 500 and one bad 200
    counter: ClassVar[int] = 0
    lock: ClassVar[threading.Lock] = threading.Lock()
    hosts: ClassVar[set[str]] = set()  # Host headers seen

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with self.lock:
            type(self).counter += 1
            n = self.counter
            self.hosts.add(self.headers.get("Host", ""))
        if self.path != PREDICT_PATH:
            return self._reply(404, {"error": f"no route {self.path}"})
        try:
            instances = json.loads(body)["instances"]
        except (ValueError, KeyError):
            return self._reply(400, {"error": "bad body"})
        if self.mode == "flaky" and n % 4 == 1:
            return self._reply(500, {"error": "model exploded"})
        width = 9 if self.mode == "flaky" and n % 4 == 3 else 10
        row = [1.0 / width] * width
        self._reply(200, {"predictions": [row for _ in instances], "model_version": 1})

    def _reply(self, status: int, obj: dict) -> None:
        out = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextlib.contextmanager
def predict_server(mode: str = "ok") -> Iterator[tuple[str, type[_PredictHandler]]]:
    """A loopback predict server on a free port: yields (base URL, handler class)."""
    handler = type("Handler", (_PredictHandler,), {"mode": mode, "counter": 0, "hosts": set()})

    class Server(ThreadingHTTPServer):
        daemon_threads = True

        def handle_error(self, request, client_address) -> None:
            pass  # Locust drops connections mid-request when it stops: not our concern

    server = Server(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.daemon = True
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", handler
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def write_payload(path: Path) -> Path:
    png = b"\x89PNG\r\n\x1a\n" + b"\0" * 64  # the fake server does not decode it
    path.write_text(json.dumps({"instances": [{"b64": base64.b64encode(png).decode()}]}))
    return path


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", data[16:24])


def wait_for(condition: Callable[[], object], timeout: float, what: str) -> object:
    verdict = poll(condition, lambda v: Done(v) if v else Pending(), timeout=timeout, interval=0.05)
    if isinstance(verdict, Done):
        return verdict.value
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def locust_processes(root: psutil.Process) -> list[psutil.Process]:
    found = []
    for p in root.children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if "locust" in " ".join(p.cmdline()) and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
    return found


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
