"""The dashboard's PromQL against Debian's real Prometheus 2.42 on a loopback port, scraping
the real model server (``python -m ml serve``, serving a small random cnn exported here)
with the labels distml's scrape job attaches, read through ``k8s.monitoring.prometheus`` as on a
cluster (FakeKube's service proxy bridged to it): so a typo in a query fails here, not on a
cluster. Beside it, on the same real server: the load test's ``/metrics`` reader
(loadtest/metrics_text.py) reads exactly the requests sent, and its ``histogram_quantile``
is Prometheus's own."""

from __future__ import annotations

import json
from collections.abc import Iterator
from urllib.parse import urlparse

import pytest

from integration import dashboard_check
from k8s.monitoring import prometheus
from k8s.monitoring.grafana import dashboard
from k8s.monitoring.prometheus import PrometheusRef
from loadtest.metrics_text import histogram_quantile, parse_page
from loadtest.server_view import fetch
from ml.contract import serving_metrics as sm
from tests.support.fakekube import FakeKube
from tests.support.loopback_prometheus import LoopbackPrometheus, loopback_prometheus
from tests.support.served_model import send

NS, SVC = "kubeflow", "tf-mnist"
REF = PrometheusRef(NS, prometheus.OWN_SERVICE, prometheus.PORT)
OK, BAD = 12, 3  # predict requests sent: answered 200, answered 400


def _counted(prom: LoopbackPrometheus, n: int) -> bool:
    found = prom.query(sm.predict_requests(NS, SVC))
    return bool(found) and float(found[0]["value"][1]) == n


@pytest.fixture(scope="module")
def scraped(server, tmp_path_factory) -> Iterator[tuple[LoopbackPrometheus, FakeKube]]:
    """Prometheus scraping the server, which answered OK + BAD predict requests: one of
    each first, scraped, then the rest, scraped, so that every series read has two
    different samples in the last minute (a series first scraped already counting
    has no increase to show)."""
    workdir = tmp_path_factory.mktemp("prometheus")
    with loopback_prometheus(workdir, {"p1": urlparse(server).netloc}, NS, SVC) as prom:
        prom.wait_scraped(1)
        send(server, 1, 1)
        prom.wait_for("the first requests scraped", lambda: _counted(prom, 2))
        send(server, OK - 1, BAD - 1)
        prom.wait_for(f"{OK + BAD} predict requests scraped", lambda: _counted(prom, OK + BAD))
        kube = FakeKube()
        prom.serve_on(kube, REF)
        yield prom, kube


def test_every_panel_of_the_dashboard_has_data_from_the_real_server(scraped):
    _prom, kube = scraped
    assert dashboard_check.check_panels(kube, REF, NS, SVC) == []
    assert dashboard_check.nan_panels(kube, REF, NS, SVC) == []  # requests in every window
    version = prometheus.instant(kube, REF, sm.model_version(NS, SVC))
    assert version == [({"version": "1"}, 1.0)]


def test_a_service_with_no_series_makes_every_panel_named(scraped):
    _prom, kube = scraped
    problems = dashboard_check.check_panels(kube, REF, NS, "no-such-isvc")
    board = json.loads(dashboard.PATH.read_text())
    for title, _ in dashboard.queries(board, dashboard.SERVICE_ROW):
        assert any(f"panel {title!r}" in p for p in problems), title
    # No training ran here: the training row, asked for, is named whole (but the panel
    # that needs a one-worker baseline, which is never checked).
    training = dashboard_check.check_panels(kube, REF, NS, SVC, dashboard.TRAINING_ROW)
    for title, _ in dashboard.queries(board, dashboard.TRAINING_ROW):
        named = any(f"panel {title!r}" in p for p in training)
        assert named == (title not in dashboard.MAY_BE_EMPTY), title
    assert any(p.startswith("variable $isvc:") for p in problems)


def test_the_load_test_reads_exactly_what_the_real_server_answered(server, scraped):
    page = parse_page(fetch(f"{server}/metrics"))
    assert page.counts(SVC).by_code == {"200": OK, "400": BAD}
    assert page.counts(SVC).buckets[float("inf")] == OK + BAD
    assert page.in_flight(SVC) == 0 and page.version(SVC) == "1"


@pytest.mark.parametrize("q", [0.5, 0.9, 0.95, 0.99])
def test_histogram_quantile_is_prometheus_s_on_the_real_buckets(scraped, q):
    _prom, kube = scraped
    buckets = {
        float(labels["le"]): value
        for labels, value in prometheus.instant(kube, REF, sm.predict_latency_buckets(NS, SVC))
    }
    by_prometheus = prometheus.scalar(
        kube, REF, f"histogram_quantile({q}, {sm.predict_latency_buckets(NS, SVC)})"
    )
    assert by_prometheus is not None
    assert histogram_quantile(q, buckets) == pytest.approx(by_prometheus, rel=1e-9)
