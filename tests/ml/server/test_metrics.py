"""ml.server.metrics in process, around a small ASGI app (no kserve, no web framework): it
writes the names ml/contract/serving_metrics.py's readers read; each request is counted once by
route template, model, code and answering version, timed, and in flight only while
answered; unknown paths are one route, ``other``; the scrape and the health probes are not
counted; a server's metrics are its own, and its exposition holds the default registry's
too. (The real server: test_metrics_http.py.)"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ml.contract.serving_metrics import (
    BATCH_SIZE,
    IN_FLIGHT,
    LATENCY,
    LATENCY_BUCKETS,
    OTHER_ROUTE,
    REQUESTS_TOTAL,
    UNCOUNTED_PATHS,
)
from ml.server.header_timeout import FIRST_BYTE
from ml.server.metrics import MetricsMiddleware, RouteTemplates, ServerMetrics, answered_by
from tests.ml.server.scrape import Scrape, increase
from tests.support.serve_fuzz import FUZZ

MODEL = "tf-mnist"
TEMPLATES = [
    ("GET", "/v1/models/{model_name}"),
    ("POST", "/v1/models/{model_name}:predict"),
    ("GET", "/v2"),
    ("POST", "/v2/models/{model_name}/infer"),
]
PREDICT = "/v1/models/{model_name}:predict"


class App:
    """An ASGI app answering ``status`` (200 with ``answered_by(version)`` when a version is
    set), or raising, or going away without an answer; it records the in-flight gauge it
    sees while answering."""

    def __init__(self, metrics: ServerMetrics) -> None:
        self.metrics = metrics
        self.status, self.version, self.fail, self.vanish = 200, None, False, False
        self.seen_in_flight: list[float] = []

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        self.seen_in_flight.append(in_flight(self.metrics))
        if self.fail:
            raise RuntimeError("the handler failed")
        if self.vanish:
            return
        if self.version is not None:
            answered_by(self.version)
        await send({"type": "http.response.start", "status": self.status, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})


def in_flight(metrics: ServerMetrics) -> float:
    return Scrape(metrics.exposition(None)[0].decode()).total(IN_FLIGHT)


def served(version: int | None = 3) -> tuple[ServerMetrics, App, MetricsMiddleware]:
    metrics = ServerMetrics(MODEL, lambda: version)
    app = App(metrics)
    return metrics, app, MetricsMiddleware(app, metrics, RouteTemplates(TEMPLATES, MODEL))


def request(middleware: MetricsMiddleware, method: str, path: str) -> list[dict]:
    """One HTTP request through ``middleware``; the messages it sent."""
    sent: list[dict] = []

    async def receive() -> dict:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {"type": "http", "method": method, "path": path, "headers": []}
    asyncio.run(middleware(scope, receive, send))
    return sent


def scrape(metrics: ServerMetrics) -> Scrape:
    return Scrape(metrics.exposition(None)[0].decode())


def counted(metrics: ServerMetrics) -> dict[tuple[str, ...], float]:
    return scrape(metrics).counts(REQUESTS_TOTAL, "model", "route", "code", "version")


def test_each_request_is_counted_once_by_route_model_code_and_version() -> None:
    metrics, app, middleware = served()
    app.version = 3
    for _ in range(2):
        request(middleware, "POST", f"/v1/models/{MODEL}:predict")
    app.version, app.status = None, 400
    request(middleware, "POST", f"/v2/models/{MODEL}/infer")
    app.status = 404
    request(middleware, "POST", "/v1/models/mnist:predict")  # another model: no model label
    request(middleware, "GET", "/no/such/path")
    request(middleware, "GET", f"/v2/models/{MODEL}/versions/1/infer")
    app.status = 405
    request(middleware, "DELETE", f"/v1/models/{MODEL}")  # the template of the path
    assert counted(metrics) == {
        (MODEL, PREDICT, "200", "3"): 2,
        (MODEL, "/v2/models/{model_name}/infer", "400", ""): 1,
        ("", PREDICT, "404", ""): 1,
        ("", OTHER_ROUTE, "404", ""): 2,
        (MODEL, "/v1/models/{model_name}", "405", ""): 1,
    }
    latency = scrape(metrics).counts(f"{LATENCY}_count", "model", "route")
    assert sum(latency.values()) == 7 and latency[(MODEL, PREDICT)] == 2


@pytest.mark.parametrize("path", UNCOUNTED_PATHS)
def test_the_scrape_and_health_probes_are_answered_and_not_counted(path) -> None:
    metrics, app, middleware = served()
    assert request(middleware, "GET", path)[0]["status"] == 200
    assert counted(metrics) == {} and app.seen_in_flight == [0]


def test_a_request_is_in_flight_while_answered_only() -> None:
    metrics, app, middleware = served()
    request(middleware, "POST", f"/v1/models/{MODEL}:predict")
    request(middleware, "GET", "/elsewhere")
    assert app.seen_in_flight == [1, 1]
    assert in_flight(metrics) == 0
    assert scrape(metrics).matching(IN_FLIGHT, model=MODEL), "0 from the start, not absent"


def test_a_handler_that_raises_counts_500_and_one_that_answers_nothing_499() -> None:
    metrics, app, middleware = served()
    app.fail = True
    with pytest.raises(RuntimeError, match="the handler failed"):
        request(middleware, "POST", f"/v1/models/{MODEL}:predict")
    app.fail, app.vanish = False, True
    assert request(middleware, "POST", f"/v1/models/{MODEL}:predict") == []
    assert counted(metrics) == {(MODEL, PREDICT, "500", ""): 1, (MODEL, PREDICT, "499", ""): 1}
    assert in_flight(metrics) == 0


def test_latency_is_a_histogram_with_the_objective_buckets() -> None:
    metrics, _, middleware = served()
    request(middleware, "POST", f"/v1/models/{MODEL}:predict")
    buckets = scrape(metrics).matching(f"{LATENCY}_bucket", route=PREDICT)
    assert [float(s.labels["le"]) for s in buckets] == [*LATENCY_BUCKETS, float("inf")]
    assert buckets[-1].value == 1


def test_latency_counts_from_the_first_byte_when_the_protocol_says_when() -> None:
    metrics, _, middleware = served()
    sent: list[dict] = []

    async def receive() -> dict:
        return {"type": "http.request", "body": b""}

    async def send(message: dict) -> None:
        sent.append(message)

    path = f"/v1/models/{MODEL}:predict"
    scope = {"type": "http", "method": "POST", "path": path, FIRST_BYTE: time.perf_counter() - 5}
    asyncio.run(middleware(scope, receive, send))
    assert sent and 5 <= scrape(metrics).total(f"{LATENCY}_sum") < 6


def test_model_info_is_the_version_served_at_each_scrape() -> None:
    version: list[int | None] = [None]
    metrics = ServerMetrics(MODEL, lambda: version[0])
    for now, label in ((None, ""), (1, "1"), (2, "2")):
        version[0] = now
        (info,) = scrape(metrics).matching("distml_model_info")
        assert (info.labels, info.value) == ({"model": MODEL, "version": label}, 1)


def test_refusals_before_any_route_and_batch_sizes() -> None:
    metrics = ServerMetrics(MODEL, lambda: 1)
    metrics.refused_early(408, 1.5)
    metrics.observe_batch(requests=3, images=7)
    assert counted(metrics) == {("", OTHER_ROUTE, "408", ""): 1}
    assert scrape(metrics).total(f"{LATENCY}_sum") == 1.5
    assert scrape(metrics).total(f"{BATCH_SIZE}_sum", model=MODEL) == 7
    assert scrape(metrics).total(f"{BATCH_SIZE}_count", model=MODEL) == 1


def test_servers_count_apart_and_expose_the_default_registry_too() -> None:
    first, _, middleware = served()
    second, _, _ = served()
    request(middleware, "GET", "/v2")
    assert sum(counted(first).values()) == 1 and counted(second) == {}
    text = scrape(second).text
    assert "python_info{" in text, "the default registry's collectors are exposed"
    assert text.count("# TYPE distml_requests_total counter") == 1
    body, content_type = second.exposition("application/openmetrics-text; version=1.0.0")
    assert content_type.startswith("application/openmetrics-text")
    assert body.decode().count("# EOF") == 1 and body.decode().endswith("# EOF\n")


def test_a_request_that_went_through_adds_one_sample_per_label_set() -> None:
    metrics, app, middleware = served()
    before = counted(metrics)
    app.version = 5
    request(middleware, "POST", f"/v1/models/{MODEL}:predict")
    assert increase(before, counted(metrics)) == {(MODEL, PREDICT, "200", "5"): 1}


PATH_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=40)
PATHS = st.builds(lambda s: "/" + s, PATH_TEXT) | st.sampled_from(
    [t.replace("{model_name}", MODEL) for _, t in TEMPLATES]
    + [t.replace("{model_name}", "x/y") for _, t in TEMPLATES]
)


@FUZZ
@given(method=st.sampled_from(["GET", "POST", "PUT", "DELETE", "HEAD"]), path=PATHS)
def test_any_path_gets_a_template_or_other_and_the_served_model_or_none(method, path) -> None:
    route, model = RouteTemplates(TEMPLATES, MODEL).match(method, path)
    assert route in {t for _, t in TEMPLATES} | {OTHER_ROUTE}
    assert model in {MODEL, ""}
    assert (route == OTHER_ROUTE) <= (model == "")
