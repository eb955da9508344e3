"""loadtest/metrics_text.py: a ``/metrics`` page read into counts, Prometheus's
``histogram_quantile`` reproduced, and, property-based (hypothesis), any text refused with a
MetricsTextError or read, never another exception; pages written by prometheus-client
itself read back to exactly what was counted. (Against the real server's page and the real
Prometheus's ``histogram_quantile``: tests/k8s/grafana/test_dashboard_prometheus.py.)"""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import generate_latest

from loadtest.metrics_text import INF, Counts, MetricsTextError, histogram_quantile, parse_page
from ml.contract import serving_metrics as sm
from tests.support.serve_fuzz import FUZZ

MODEL = "tf-mnist"
PREDICT = sm.PREDICT_ROUTE
READY = "/v1/models/{model_name}"


class Server:
    """The metrics distml's server writes (ml/contract/serving_metrics.py), in a registry."""

    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.requests = Counter(sm.REQUESTS, "r", sm.REQUEST_LABELS, registry=r)
        self.latency = Histogram(
            sm.LATENCY, "l", ("model", "route", "version"), buckets=sm.LATENCY_BUCKETS, registry=r
        )
        self.in_flight = Gauge(sm.IN_FLIGHT, "f", ("model",), registry=r)
        self.canary = Gauge(sm.CANARY_WEIGHT, "c", ("model", "version"), registry=r)

    def answer(
        self, code: int, seconds: float, route: str = PREDICT, model: str = MODEL, version="1"
    ):
        self.requests.labels(model, route, str(code), version).inc()
        self.latency.labels(model, route, version).observe(seconds)

    def page(self) -> str:
        return generate_latest(self.registry).decode()


def test_a_page_reads_into_counts_by_route_and_code():
    server = Server()
    for code, seconds in [(200, 0.004), (200, 0.03), (200, 0.03), (400, 0.001), (503, 0.2)]:
        server.answer(code, seconds)
    server.answer(200, 0.002, route=READY)  # a readiness probe: not the predict route
    server.answer(404, 0.001, route=sm.OTHER_ROUTE, model="")
    server.in_flight.labels(MODEL).set(3)
    page = parse_page(server.page())
    predict = page.counts(MODEL)
    assert predict.by_code == {"200": 3, "400": 1, "503": 1}
    assert predict.buckets[0.005] == 2 and predict.buckets[0.035] == 4 and predict.buckets[INF] == 5
    assert predict.error_ratio() == pytest.approx(1 / 5)
    assert page.counts(MODEL, route=None).total == 6  # every route of the model
    assert page.in_flight(MODEL) == 3
    assert page.in_flight("nope") is None and page.version(MODEL) is None


def test_each_versions_served_traffic_reads_apart_during_a_canary():
    server = Server()
    server.canary.labels(MODEL, "2").set(25)
    for version, code, seconds in [("1", 200, 0.004), ("1", 200, 0.004), ("2", 503, 0.2)]:
        server.answer(code, seconds, version=version)
    server.answer(200, 0.01, route=sm.INFER_ROUTE, version="2")
    server.answer(200, 0.01, route="/v2/models/{model_name}/versions/{model_version}/infer")
    page = parse_page(server.page())
    stable, canary = page.served(MODEL, "1"), page.served(MODEL, "2")
    assert stable.by_code == {"200": 2} and stable.buckets[INF] == 2
    assert canary.by_code == {"503": 1, "200": 1} and canary.error_ratio() == 0.5
    assert canary.quantile(0.99) > 0.1
    assert page.canary_weight(MODEL) == {"2": 25}
    assert page.canary_weight("other") == {}


def test_counts_since_an_earlier_read_and_after_a_restart():
    before = Counts({"200": 10, "500": 2}, {0.1: 8, INF: 12})
    after = Counts({"200": 15, "500": 2, "400": 1}, {0.1: 12, INF: 18})
    assert after.since(before) == Counts({"200": 5, "500": 0, "400": 1}, {0.1: 4, INF: 6})
    restarted = Counts({"200": 3}, {0.1: 3, INF: 3})  # below the earlier count: all new
    assert restarted.since(before).by_code == {"200": 3}
    assert Counts().quantile(0.5) is None and Counts().error_ratio() is None


B = {0.01: 10.0, 0.1: 60.0, 1.0: 100.0, INF: 100.0}


@pytest.mark.parametrize(
    ("q", "buckets", "expected"),
    [
        (0.5, B, 0.01 + 0.09 * (40 / 50)),  # rank 50 in (0.01, 0.1]: 40 of its 50
        (0.05, B, 0.01 * 0.5),  # the first bucket starts at 0
        (0.99, B, 0.1 + 0.9 * (39 / 40)),
        (1.0, {0.1: 5.0, INF: 6.0}, 0.1),  # in +Inf: the highest finite bound
        (0.5, {0.1: 0.0, INF: 0.0}, math.nan),  # nothing observed
        (0.5, {0.1: 3.0}, math.nan),  # no +Inf bucket
        (0.5, {INF: 3.0}, math.nan),  # fewer than two buckets
        (-0.1, B, -INF),
        (1.1, B, INF),
        (0.5, {0.1: 8.0, 0.2: 6.0, INF: 10.0}, 0.1 * 5 / 8),  # made monotonic first
        (0.5, {-1.0: 6.0, 0.1: 8.0, INF: 10.0}, -1.0),  # a first bound <= 0 is returned
    ],
)
def test_histogram_quantile_is_prometheus_s(q, buckets, expected):
    got = histogram_quantile(q, buckets)
    assert (math.isnan(got) and math.isnan(expected)) or got == pytest.approx(expected)


@pytest.mark.parametrize(
    "text",
    [
        "distml_requests_total{model=",  # a broken label set
        "# TYPE distml_requests_total fruit\ndistml_requests_total 1",
        "distml_requests_total one",
        'distml_request_duration_seconds_bucket{model="m",route="r",le="soon"} 1',
        "<html><body>404</body></html>",
    ],
)
def test_what_is_not_a_page_is_refused_with_a_message(text):
    with pytest.raises(MetricsTextError):
        parse_page(text)


# --------------------------------------------------------------------------- property-based

NAMES = st.sampled_from(
    [sm.REQUESTS_TOTAL, f"{sm.LATENCY}_bucket", sm.IN_FLIGHT, f"{sm.MODEL_INFO}_info", "x"]
)
LABEL_VALUE = st.text(max_size=8) | st.sampled_from([MODEL, PREDICT, "+Inf", "0.1", "200"])
LABELS = st.dictionaries(st.sampled_from(["model", "route", "code", "le", "version"]), LABEL_VALUE)
VALUE = st.sampled_from(["1", "0", "NaN", "+Inf", "-1", "1e3", "x", ""]) | st.floats().map(repr)


def _escaped(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


@st.composite
def near_pages(draw) -> str:
    """Pages of distml's names, labels and values, with junk now and then."""
    lines = []
    for _ in range(draw(st.integers(0, 8))):
        labels = ",".join(f'{k}="{_escaped(v)}"' for k, v in draw(LABELS).items())
        lines.append(f"{draw(NAMES)}{{{labels}}} {draw(VALUE)}")
        if draw(st.integers(0, 5)) == 0:
            lines.append(draw(st.text(max_size=20)))
    return "\n".join(lines) + "\n"


@FUZZ
@given(text=st.text(max_size=300) | near_pages())
def test_any_text_is_read_or_refused_with_a_metrics_text_error(text):
    try:
        page = parse_page(text)
    except MetricsTextError as e:
        assert str(e)
        return
    for route in (PREDICT, None):
        counts = page.counts(MODEL, route=route)
        for q in (0.5, 0.95, 0.99):
            x = counts.quantile(q)
            assert x is None or not math.isnan(x)
        counts.error_ratio()
    page.in_flight(MODEL)
    page.version(MODEL)


ANSWERS = st.lists(
    st.tuples(st.sampled_from([200, 400, 413, 500, 503]), st.floats(0, 20)), max_size=40
)


@FUZZ
@given(answers=ANSWERS)
def test_a_page_prometheus_client_writes_reads_back_to_what_was_counted(answers):
    server = Server()
    for code, seconds in answers:
        server.answer(code, seconds)
    counts = parse_page(server.page()).counts(MODEL)
    by_code: dict[str, float] = {}
    for code, _ in answers:
        by_code[str(code)] = by_code.get(str(code), 0) + 1
    assert counts.by_code == by_code
    for bound in (*sm.LATENCY_BUCKETS, INF):
        assert counts.buckets.get(bound, 0) == sum(1 for _, s in answers if s <= bound)
    if not answers:
        assert counts.quantile(0.5) is None
