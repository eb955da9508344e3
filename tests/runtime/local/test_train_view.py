"""runtime/local/train_view.py: `invoke status`'s training rows, read from the workers'
real ``/metrics`` pages (``ml.training.train_metrics``, served on loopback): figures summed per job,
a worker that does not answer or answers something else said in the row. The page is
outside input: fuzzed."""

from __future__ import annotations

import http.server
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ml.training.train_metrics import TrainMetrics
from runtime.local import train_view
from runtime.procs import free_ports


@pytest.fixture
def two_workers(monkeypatch):
    """Two workers of job cnn serving their pages, mid-epoch 2."""
    ports = free_ports(2)
    served = []
    for index, port in enumerate(ports):
        monkeypatch.setenv("DISTML_METRICS_ADDRESS", f"127.0.0.1:{port}")
        tm = TrainMetrics("cnn", index, job="cnn")
        tm.serve()
        tm.epoch(2)
        tm.steps_done(10, 1.0, 640)  # 640 examples/s each
        tm.read_loss(0.5)
        served.append(tm)
    yield [("cnn", i, f"http://127.0.0.1:{p}/metrics") for i, p in enumerate(ports)]
    for tm in served:
        tm.close()


def test_a_job_s_row_sums_its_workers_throughput(two_workers):
    assert train_view.rows(two_workers) == [
        ("training cnn", "2 worker(s) read, 1280 examples/s, step 10, epoch 2, loss 0.5000")
    ]


def test_a_worker_that_does_not_answer_is_said_and_the_rest_shown(two_workers):
    (gone,) = free_ports(1)
    workers = [*two_workers, ("cnn", 2, f"http://127.0.0.1:{gone}/metrics")]
    ((_, text),) = train_view.rows(workers)
    assert text.startswith("2 worker(s) read, 1280 examples/s") and "worker 2: " in text


def test_a_page_that_is_not_metrics_is_said(tmp_path):
    class Junk(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = b"{not: metrics}\n"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Junk)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
        ((_, text),) = train_view.rows([("cnn", 0, url)])
    finally:
        server.shutdown()
    assert text.startswith("0 worker(s) read, worker 0: not a metrics page")


def test_nothing_training_gives_no_row():
    assert train_view.rows(()) == []


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_the_page_parser_gives_figures_or_a_value_error(text):
    try:
        page = train_view.parse_page(text)
    except ValueError:
        return
    assert isinstance(page, train_view.WorkerPage)
