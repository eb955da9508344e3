"""Load test: duration parsing, the verdict, and real headless Locust runs on loopback.

The runs go against a stdlib HTTP server in this process that imitates the KServe V1
``:predict`` endpoint; Locust itself always runs in a child process (it must never be
imported here: gevent monkey-patches the process).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import psutil
import pytest

from common.poll import Done, Pending, poll
from loadtest import __main__ as cli
from loadtest import plan
from loadtest import runner as lt
from loadtest import summary as ls

ROOT = Path(__file__).resolve().parents[1]
MODEL = "fashion"
PREDICT_PATH = f"/v1/models/{MODEL}:predict"


# --------------------------------------------------------------------------- helpers


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


# --------------------------------------------------------------------------- pure parts


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30s", 30), ("2m", 120), ("90", 90), (" 1m30s ", 90), ("1h", 3600), ("5S", 5), (7, 7)],
)
def test_parse_duration(text, seconds):
    assert plan.parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "abc", "30x", "1.5m", "-5", "0", "0s", "s", "m30", True])
def test_parse_duration_rejects_junk(text):
    with pytest.raises(ValueError, match="invalid duration"):
        plan.parse_duration(text)


def _summary(requests=100, failures=0, replicas=None) -> dict:
    samples = [{"t_s": float(i), "ready": r} for i, r in enumerate(replicas or [])]
    return {
        "requests": requests,
        "failures": failures,
        "url": "http://x",
        "errors": [{"error": "HTTP 500: boom"}] if failures else [],
        "replicas": samples,
        "replicas_start": samples[0]["ready"] if samples else None,
        "replicas_peak": max(s["ready"] for s in samples) if samples else None,
    }


@pytest.mark.parametrize(
    ("summary", "kwargs", "expected"),
    [
        (_summary(), {}, []),
        (_summary(failures=1), {}, ["1 of 100 requests failed (failure ratio 0.01 > allowed 0)"]),
        (_summary(failures=1), {"max_failure_ratio": 0.01}, []),
        (_summary(failures=2), {"max_failure_ratio": 0.01}, ["2 of 100 requests failed"]),
        (_summary(requests=0), {}, ["no requests were made"]),
        (_summary(replicas=[1, 1, 3, 2]), {"expect_scale_out": True}, []),
        (_summary(replicas=[2, 2, 2]), {"expect_scale_out": True}, ["peaked at 2 (started at 2)"]),
        (_summary(replicas=[0, 1, 1]), {"expect_scale_out": True}, ["no scale-out"]),
        (_summary(), {"expect_scale_out": True}, ["not sampled"]),
        (_summary(replicas=[1, 1]), {}, []),  # scale-out not asked for
        (
            _summary(requests=0, replicas=[1]),
            {"expect_scale_out": True},
            ["no requests", "no scale-out"],
        ),
    ],
)
def test_check(summary, kwargs, expected):
    """One problem per expected fragment, in order."""
    problems = ls.check(summary, **kwargs)
    assert len(problems) == len(expected), problems
    for problem, fragment in zip(problems, expected, strict=True):
        assert fragment in problem


def test_check_names_the_most_common_error():
    (problem,) = ls.check(_summary(failures=5))
    assert problem.endswith("most common: HTTP 500: boom")


@pytest.mark.parametrize(
    ("csv_error", "message"),
    [
        ("CatchResponseError('HTTP 500: boom')", "HTTP 500: boom"),
        (
            "CatchResponseError('connection error: Pool(host=\\'127.0.0.1\\', port=9)')",
            "connection error: Pool(host='127.0.0.1', port=9)",
        ),
        ("ConnectionRefusedError(111, 'refused')", "ConnectionRefusedError(111, 'refused')"),
        ("CatchResponseError(broken", "CatchResponseError(broken"),
    ],
)
def test_failure_messages_are_unwrapped(csv_error, message):
    assert ls.unwrap_error(csv_error) == message


def test_importing_loadtest_is_cheap():
    code = (
        "import sys, loadtest, loadtest.__main__, loadtest.runner, loadtest.locust_process, "
        "loadtest.replica_watch, loadtest.summary, loadtest.chart, loadtest.plan\n"
        "heavy = [m for m in ('locust', 'gevent', 'matplotlib', 'tensorflow', 'ml')"
        " if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=30)


def test_bad_arguments(tmp_path):
    payload = write_payload(tmp_path / "body.json")
    (tmp_path / "junk.json").write_text('{"inputs": []}')
    for kwargs, error in [
        ({"payload_path": tmp_path / "missing.json"}, FileNotFoundError),
        ({"payload_path": tmp_path / "junk.json"}, ValueError),
        ({"concurrency": 0}, ValueError),
        ({"duration": "soon"}, ValueError),
        ({"url": "127.0.0.1:8080"}, ValueError),
        ({"spawn_rate": 0}, ValueError),
    ]:
        args = {"url": "http://127.0.0.1:9", "model_name": MODEL, "payload_path": payload}
        args.update(kwargs)
        with pytest.raises(error):
            lt.run_loadtest(out_dir=tmp_path / "out", log=lambda _: None, **args)
    base = ["--url", "http://127.0.0.1:9", "--model", MODEL, "--out", str(tmp_path / "o")]
    for argv in [
        [],
        [*base, "--payload", str(tmp_path / "missing.json")],
        [*base, "--payload", str(payload), "--duration", "abc"],
        [*base, "--payload", str(payload), "--concurrency", "0"],
        [*base, "--payload", str(payload), "--max-failure-ratio", "2"],
    ]:
        with pytest.raises(SystemExit) as exc:
            cli.main(argv)
        assert exc.value.code == 2, argv
    assert not (tmp_path / "o").exists()  # nothing ran


# --------------------------------------------------------------------------- real runs


def test_locust_failing_to_start_is_an_error(tmp_path, monkeypatch):
    broken = tmp_path / "broken_locustfile.py"
    broken.write_text("raise RuntimeError('this locustfile is broken')\n")
    monkeypatch.setattr(plan, "LOCUSTFILE", broken)
    with pytest.raises(RuntimeError, match="Locust failed") as exc:
        lt.run_loadtest(
            "http://127.0.0.1:9",  # never contacted
            MODEL,
            write_payload(tmp_path / "body.json"),
            tmp_path / "out",
            duration="5s",
            log=lambda _: None,
        )
    assert "this locustfile is broken" in str(exc.value)
    assert not (tmp_path / "out" / "summary.json").exists()


@pytest.fixture(scope="module")
def ok_run(tmp_path_factory) -> tuple[dict, Path, set[str], list[str]]:
    """One real 3 s run, 5 users, against a well-behaved server (shared by several tests)."""
    tmp = tmp_path_factory.mktemp("loadtest-ok")
    lines: list[str] = []
    with predict_server("ok") as (url, handler):
        summary = lt.run_loadtest(
            url,
            MODEL,
            write_payload(tmp / "body.json"),
            tmp / "out",
            concurrency=5,
            duration="3s",
            host_header="fashion.default.example.com",
            log=lines.append,
        )
    return summary, tmp / "out", set(handler.hosts), lines


def test_real_run_summary(ok_run):
    summary, out, _hosts, _lines = ok_run
    assert summary["requests"] > 0
    assert summary["failures"] == 0
    assert summary["failure_ratio"] == 0.0
    assert summary["rps"] > 0
    for key in ("p50_ms", "p95_ms", "p99_ms"):
        assert isinstance(summary[key], float), key
    assert summary["p50_ms"] <= summary["p95_ms"] <= summary["p99_ms"]
    assert summary["duration_s"] == 3
    assert summary["concurrency"] == 5
    assert summary["spawn_rate"] == 5.0  # default: all users at once
    assert summary["model"] == MODEL
    assert summary["url"].startswith("http://127.0.0.1:")
    assert summary["started_at"].endswith("+00:00")
    assert summary["replicas"] == [] and summary["replicas_peak"] is None
    assert json.loads((out / "summary.json").read_text()) == summary
    assert ls.check(summary) == []


def test_real_run_files(ok_run):
    summary, out, _hosts, _lines = ok_run
    for name in ("locust_stats.csv", "locust_stats_history.csv", "locust_failures.csv"):
        assert (out / name).stat().st_size > 0, name
    assert ls.history(out), "no Aggregated rows in the stats history"
    # The CSVs hold every request, including the last second's (see the locustfile).
    per_second = ls.read_csv_rows(out / "locust_per_second.csv")
    assert sum(int(r["Requests"]) for r in per_second) == summary["requests"]
    width, height = png_size(out / "chart.png")
    assert width >= 800 and height >= 500
    assert (out / "chart.png").stat().st_size > 10_000


def test_real_run_reaches_the_endpoint_with_host_header(ok_run):
    _summary, _out, hosts, lines = ok_run
    assert hosts == {"fashion.default.example.com"}
    assert lines[0].startswith("loadtest: 5 users")
    assert "requests" in lines[-1]


def test_failures_are_counted_and_fail_the_cli(tmp_path, capsys):
    """Via the CLI: 1 in 4 answers is a 500, 1 in 4 a 200 with 9 classes -> exit 1."""
    payload = write_payload(tmp_path / "body.json")
    with predict_server("flaky") as (url, _handler):
        argv = ["--url", url, "--model", MODEL, "--payload", str(payload)]
        code = cli.main([*argv, "--out", str(tmp_path / "out"), "--duration", "3s"])
    assert code == 1
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["failures"] > 0
    assert 0.3 < summary["failure_ratio"] < 0.7
    errors = {e["error"] for e in summary["errors"]}
    assert "HTTP 500: model exploded" in errors
    assert "a prediction row is not 10 numbers" in errors
    problems = ls.check(summary)
    assert len(problems) == 1 and f"{summary['failures']} of {summary['requests']}" in problems[0]
    assert ls.check(summary, max_failure_ratio=0.9) == []
    err = capsys.readouterr().err
    assert "FAIL" in err and "requests failed" in err


def test_replica_sampler_is_recorded_and_charted(tmp_path, ok_run):
    calls: list[float] = []

    def sampler() -> int:
        calls.append(time.monotonic())
        return 1 if len(calls) == 1 else 3

    with predict_server("ok") as (url, _handler):
        summary = lt.run_loadtest(
            url,
            MODEL,
            write_payload(tmp_path / "body.json"),
            tmp_path / "out",
            duration="2s",
            replica_sampler=sampler,
            expected_replicas=8,
            log=lambda _: None,
        )
    samples = summary["replicas"]
    assert len(samples) >= 2
    assert samples[0]["ready"] == 1 and samples[0]["t_s"] < 1  # sampled before Locust starts
    assert {s["ready"] for s in samples[1:]} == {3}
    assert [s["t_s"] for s in samples] == sorted(s["t_s"] for s in samples)
    assert summary["replicas_start"] == 1 and summary["replicas_peak"] == 3
    assert summary["replicas_expected"] == 8  # what the autoscaler should reach, charted
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["replicas_expected"] == 8
    assert ls.check(summary, expect_scale_out=True) == []
    # The chart gets a third panel: taller than the two-panel chart of ok_run.
    assert png_size(tmp_path / "out" / "chart.png")[1] > png_size(ok_run[1] / "chart.png")[1]


def test_replicas_that_turn_ready_after_the_load_count_with_settle(tmp_path):
    """An HPA decides during the load and its pods turn ready after it: with ``settle_s``
    sampling goes on until they do (and stops as soon as they have)."""
    load_over = threading.Event()
    ready_at: list[float] = []

    def sampler() -> int:
        if not load_over.is_set():
            return 1
        ready_at.append(time.monotonic())
        return 2 if len(ready_at) >= 3 else 1  # ready a few samples after the load

    lines: list[str] = []

    def log(line: str) -> None:
        lines.append(line)
        if line.startswith("loadtest: load done"):
            load_over.set()

    with predict_server("ok") as (url, _handler):
        summary = lt.run_loadtest(
            url,
            MODEL,
            write_payload(tmp_path / "body.json"),
            tmp_path / "out",
            duration="1s",
            replica_sampler=sampler,
            log=log,
            settle_s=30,
        )
    assert summary["replicas_start"] == 1 and summary["replicas_peak"] == 2
    assert summary["replicas"][-1]["t_s"] > summary["duration_s"]  # sampled after the load
    assert summary["replicas"][-1]["t_s"] < summary["duration_s"] + 20  # not the whole 30 s
    assert ls.check(summary, expect_scale_out=True) == []


def test_timeout_stops_locust(tmp_path):
    me = psutil.Process()
    with predict_server("ok") as (url, _handler), pytest.raises(TimeoutError, match="stopped"):
        lt.run_loadtest(
            url,
            MODEL,
            write_payload(tmp_path / "body.json"),
            tmp_path / "out",
            duration="1s",
            timeout_margin_s=0,  # Locust needs longer than that just to start
            log=lambda _: None,
        )
    assert locust_processes(me) == []


@pytest.mark.skipif(os.name != "posix", reason="SIGINT to a child process is POSIX")
def test_ctrl_c_leaves_no_locust_behind(tmp_path):
    payload = write_payload(tmp_path / "body.json")
    out = tmp_path / "out"
    with predict_server("ok") as (url, _handler):
        code = (
            "from loadtest.runner import run_loadtest\n"
            f"run_loadtest({url!r}, {MODEL!r}, {str(payload)!r}, {str(out)!r},"
            " duration='60s')\n"
        )
        runner = subprocess.Popen(
            [sys.executable, "-c", code],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            parent = psutil.Process(runner.pid)
            locusts = wait_for(lambda: locust_processes(parent), 30, "Locust to start")
            # ...and to be sending load (a history row with all 5 users).
            wait_for(
                lambda: any(r.get("User Count") == "5" for r in ls.history(out)),
                30,
                "Locust to run its users",
            )
            runner.send_signal(signal.SIGINT)
            _stdout, stderr = runner.communicate(timeout=30)
        finally:
            if runner.poll() is None:
                runner.kill()
                runner.wait()
    assert runner.returncode != 0
    assert "KeyboardInterrupt" in stderr
    for p in locusts:
        wait_for(lambda p=p: gone(p.pid), 10, f"Locust process {p.pid} to be gone")
