"""The real model server as a process, for the tests that talk to it over HTTP
(tests/ml/server/test_serve_http.py, tests/ml/server/test_metrics_http.py, test_clients.py):
``Server`` runs ``python -m ml serve`` on a free 127.0.0.1 port with the test limits
(tests/support/serve_requests.py), its output in a log file; ``wait_for`` polls a condition
with a deadline; ``http_json`` is one request, its status and JSON answer;
``export_test_model`` is the model they serve. Light at import (no TensorFlow, no KServe)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.ml.server.scrape import Scrape
from tests.support.serve_requests import MAX_BODY_BYTES, MAX_INSTANCES, MODEL, Raw

REPO = Path(__file__).resolve().parents[3]
STARTUP_SECONDS = 90


_handed_out: set[int] = set()


def free_port() -> int:
    """A free 127.0.0.1 port, never the same twice, never 8081 (KServe's default gRPC port,
    which the tests check stays unused)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port != 8081 and port not in _handed_out:
            _handed_out.add(port)
            return port


def wait_for(condition: Callable[[], Any], timeout: float, what: str, log: Callable = str) -> Any:
    """Poll ``condition`` until it returns a truthy value or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}\n{log()}")
        time.sleep(0.05)


class Server:
    """``python -m ml serve`` as a subprocess, its output in a log file."""

    def __init__(self, model_dir: Path, log_path: Path, *extra: str) -> None:
        self.model_dir = model_dir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        command = [
            sys.executable, "-m", "ml", "serve", "--model-dir", str(model_dir),
            "--model-name", MODEL, "--host", "127.0.0.1", "--http-port", str(self.port),
            "--poll-interval", "0.2", "--max-instances", str(MAX_INSTANCES),
            "--max-body-bytes", str(MAX_BODY_BYTES), *extra,
        ]  # fmt: skip
        with open(log_path, "wb") as log:
            self.proc = subprocess.Popen(
                command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT
            )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def log_tail(self) -> str:
        return "--- server log (tail) ---\n" + "\n".join(self.log().splitlines()[-40:])

    def get(self, path: str) -> tuple[int, Any]:
        return http_json("GET", self.url + path)

    def scrape(self) -> Scrape:
        """``GET /metrics``, parsed."""
        with urllib.request.urlopen(self.url + "/metrics", timeout=30) as response:
            return Scrape(response.read().decode())

    def predict(self, body: Any, model: str = MODEL, **headers: str) -> tuple[int, Any]:
        data = body.data if isinstance(body, Raw) else json.dumps(body).encode()
        content_type = body.content_type if isinstance(body, Raw) else "application/json"
        headers = {"Content-Type": content_type, **headers}
        return http_json("POST", f"{self.url}/v1/models/{model}:predict", data, headers)

    def _answers(self, path: str, statuses: tuple[int, ...]) -> bool:
        assert self.proc.poll() is None, f"server exited with {self.proc.returncode}"
        try:
            return self.get(path)[0] in statuses
        except OSError:  # not listening yet
            return False

    def wait_live(self) -> None:
        wait_for(lambda: self._answers("/", (200,)), STARTUP_SECONDS, "liveness", self.log_tail)

    def wait_ready(self) -> None:
        wait_for(
            lambda: self._answers(f"/v1/models/{MODEL}", (200,)),
            STARTUP_SECONDS,
            "readiness",
            self.log_tail,
        )

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)

    def listening(self) -> set[tuple[str, int]]:
        """(ip, port) of every listening TCP and bound UDP socket of the server's processes."""
        import psutil

        proc = psutil.Process(self.proc.pid)
        found = set()
        for p in (proc, *proc.children(recursive=True)):
            conns = getattr(p, "net_connections", None) or p.connections  # psutil 6 / 5
            for c in conns(kind="inet"):
                if c.status in (psutil.CONN_LISTEN, psutil.CONN_NONE) and c.laddr:
                    found.add((c.laddr.ip, c.laddr.port))
        return found


def http_json(
    method: str, url: str, data: bytes | None = None, headers: dict | None = None
) -> tuple[int, Any]:
    request = urllib.request.Request(url, data=data, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        with e:
            return e.code, json.loads(e.read())


def export_test_model(path: Path) -> Path:
    """A randomly initialised cnn, exported to ``path`` (its outputs vary across images)."""
    from ml.model.architectures import build_model
    from ml.model.export import export_model

    export_model(build_model("cnn", seed=7), path)
    return path
