"""Fixtures of the load test tests: one real 3 s Locust run against a well-behaved loopback
server, shared by the tests of its summary, files and replica chart; and that server with a
``/metrics`` page counting as distml's model server does (``metered_server``)."""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from loadtest import runner as lt
from tests.support.predict_server import MODEL, predict_server, write_payload


@pytest.fixture(scope="package")
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


class MeteredServer:
    """The loopback predict server with a ``/metrics`` page, counting as distml's server
    counts (ml/contract/serving_metrics.py: every predict answered, by code, and its latency),
    written by prometheus-client. ``extra`` predict requests are counted that nobody sent
    (a server that over-counts)."""

    def __init__(self, handler: type, extra_every: int = 0) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        from ml.contract import serving_metrics as sm

        self.registry = r = CollectorRegistry()
        self.requests = Counter(sm.REQUESTS, "r", sm.REQUEST_LABELS, registry=r)
        self.latency = Histogram(
            sm.LATENCY, "l", ("model", "route"), buckets=sm.LATENCY_BUCKETS, registry=r
        )
        self.in_flight = Gauge(sm.IN_FLIGHT, "f", ("model",), registry=r)
        self.in_flight.labels(MODEL)
        self.route = sm.PREDICT_ROUTE
        self.extra_every = extra_every
        self.handler = handler
        self.answered = itertools.count(1)  # next() is atomic: one number per answer

    def page(self) -> bytes:
        from prometheus_client.exposition import generate_latest

        return generate_latest(self.registry)


@contextlib.contextmanager
def metered_server(mode: str = "ok", extra_every: int = 0) -> Iterator[tuple[str, MeteredServer]]:
    """``predict_server(mode)`` whose handler also counts each answer and serves /metrics."""
    with predict_server(mode) as (url, handler):
        metered = MeteredServer(handler, extra_every)
        plain_post, plain_reply = handler.do_POST, handler._reply

        def do_get(self) -> None:
            if self.path != "/metrics":
                return plain_reply(self, 404, {"error": "no route"})
            body = metered.page()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_post(self) -> None:
            started = time.perf_counter()
            metered.in_flight.labels(MODEL).inc()
            self.code = 0
            try:
                plain_post(self)
            finally:
                metered.in_flight.labels(MODEL).dec()
                n = next(metered.answered)
                times = 2 if extra_every and n % extra_every == 0 else 1
                for _ in range(times):
                    metered.requests.labels(MODEL, metered.route, str(self.code), "1").inc()
                metered.latency.labels(MODEL, metered.route).observe(time.perf_counter() - started)

        def reply(self, status: int, obj: dict) -> None:
            self.code = status
            plain_reply(self, status, obj)

        handler.do_GET, handler.do_POST, handler._reply = do_get, do_post, reply
        yield url, metered
