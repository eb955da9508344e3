"""runtime/local/status.py: the status rows name the split of every figure, show the
serving model's card and the running server's own figures (its /metrics)."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def test_local_status_names_the_split_of_every_figure_and_shows_the_model_card(local_rt):
    from ml import contract
    from runtime.local.status import status_rows

    volume, svc = local_rt.wd.volume, local_rt.service
    metrics = Path(contract.metrics_path(volume, "cnn"))
    metrics.parent.mkdir(parents=True)
    metrics.write_text(
        json.dumps({"history": [{"val_accuracy": 0.81}], "final": {"val_accuracy": 0.81}})
    )
    candidate = {
        "model_type": "cnn",
        "status": "ok",
        "val_accuracy": 0.8712,
        "test_accuracy": 0.8655,
    }
    report = Path(contract.selection_report(volume))
    report.parent.mkdir(parents=True)
    report.write_text(json.dumps({"candidates": [candidate]}))
    record = {
        "version": 1,
        "source": "candidate cnn",
        "model_type": "cnn",
        "val_accuracy": 0.8712,
        "test_accuracy": 0.8655,
        "code_version": "distml:0123456789ab",
        "reason": "cnn has the highest validation accuracy (0.8712)",
        "params": {"profile": "quick", "epochs": 3, "extra": {"steps_per_epoch_resolved": 70}},
        "published_at": "2025-01-02T03:04:05Z",
    }
    version_dir = Path(contract.serving_dir(volume, svc)) / "1"
    version_dir.mkdir(parents=True)
    # Only the version's own publish.json (a volume from before the serving copy existed).
    (version_dir / contract.PUBLISH_FILE).write_text(json.dumps(record))
    rows = dict(status_rows(local_rt))
    assert rows["candidate cnn"] == (
        "last-epoch val acc 0.8100, selection: val acc 0.8712, test acc 0.8655"
    )
    assert rows["serving model"] == "version 1: cnn (candidate cnn), published 2025-01-02T03:04:05Z"
    assert rows["serving accuracy"] == "validation 0.8712 (chosen on), test 0.8655 (reported only)"
    assert rows["serving code"] == "distml:0123456789ab"
    assert rows["serving training"].startswith("profile quick, 3 epoch(s) x 70 steps")
    # The serving copy ml.selection.select keeps wins when it is of the serving version.
    Path(contract.serving_record(volume, svc)).write_text(
        json.dumps({**record, "code_version": "x"})
    )
    assert dict(status_rows(local_rt))["serving code"] == "x"


P = 'model="tf-mnist",route="/v1/models/{model_name}:predict"'
R = 'model="tf-mnist",route="/v1/models/{model_name}"'  # readiness
PAGE = f"""# TYPE distml_requests_total counter
distml_requests_total{{{P},code="200",version="1"}} 95
distml_requests_total{{{P},code="503",version=""}} 4
distml_requests_total{{{R},code="200",version=""}} 1
distml_requests_total{{model="",route="other",code="404",version=""}} 7
# TYPE distml_request_duration_seconds histogram
distml_request_duration_seconds_bucket{{{P},le="0.01"}} 50
distml_request_duration_seconds_bucket{{{P},le="0.1"}} 99
distml_request_duration_seconds_bucket{{{P},le="+Inf"}} 99
distml_request_duration_seconds_bucket{{{R},le="0.01"}} 1
distml_request_duration_seconds_bucket{{{R},le="0.1"}} 1
distml_request_duration_seconds_bucket{{{R},le="+Inf"}} 1
# TYPE distml_requests_in_flight gauge
distml_requests_in_flight{{model="tf-mnist"}} 2
"""


@contextlib.contextmanager
def metrics_page(page: str, status: int = 200) -> Iterator[str]:
    """A loopback server answering GET /metrics with ``page``: yields its base URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = page.encode()
            self.send_response(status if self.path == "/metrics" else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


def test_the_running_server_s_own_figures_are_shown():
    from runtime.local.status import live_rows

    with metrics_page(PAGE) as url:
        rows = dict(live_rows(url, "tf-mnist"))
    # Every route of the model (the readiness GET too), not another model's 404s.
    assert rows["server requests"] == "100 since start (200 96, 503 4)"
    assert rows["server errors"] == "4.00% answered 5xx"
    # 51 of 100 within 10 ms: p50 = 10 x 50/51 ms; p95 = 10 + 90 x 44/49 ms; p99 = 10 + 90 x 48/49.
    assert rows["server latency"] == "p50/p95/p99 9.8/90.8/98.2 ms"
    assert rows["server in flight"] == "2"


def test_a_server_without_metrics_says_so():
    from runtime.local.status import live_rows

    with metrics_page("", status=404) as url:
        ((label, text),) = live_rows(url, "tf-mnist")
    assert label == "server metrics"
    assert text == f"not available: {url}/metrics answered HTTP 404"
