"""distml's queries against a Prometheus set up as the Prometheus Operator sets one up: a
real Prometheus (Debian's 2.42) scraping the real model server every 30 s (the Operator's
default) under the job a PodMonitor gets (``<namespace>/<podmonitor>``), read through
``k8s.monitoring.prometheus`` as on a cluster.

What it holds: the interval is read off the targets; the windows `status` and KEDA use
hold samples at that interval (the 30 s window distml once used for KEDA holds none);
nothing selects on distml's job; the readiness and metadata reads a probe or a scanner
makes are counted by the server but are not the service's traffic. The server answers
requests of all kinds between scrapes, so every query below reads two samples."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, replace
from urllib.parse import urlparse

import pytest

from k8s.manifests import inference
from k8s.monitoring import prometheus, scrape
from k8s.monitoring.prometheus import PrometheusRef
from k8s.providers.settings import Settings
from loadtest.prometheus_view import PrometheusView
from loadtest.server_view import MetricsUnavailable, fetch
from ml.contract import serving_metrics as sm
from tests.support.fakekube import FakeKube
from tests.support.loopback_prometheus import LoopbackPrometheus, loopback_prometheus
from tests.support.served_model import send

NS, SVC = "kubeflow", "tf-mnist"
JOB = f"{NS}/distml-predictor"  # what the Operator names a PodMonitor's job
REF = PrometheusRef("monitoring", "prometheus-k8s", 9090)  # a user's, not distml's own
OK, BAD = 8, 2  # predict requests: answered 200, answered 400
PROBES, STRAYS = 6, 4  # readiness reads (counted, not traffic); unknown paths (404)


def _probe_and_stray(url: str) -> None:
    for _ in range(PROBES):
        assert json.loads(fetch(f"{url}/v1/models/{SVC}"))["ready"] is True
    for i in range(STRAYS):
        with pytest.raises(MetricsUnavailable, match="HTTP 404"):
            fetch(f"{url}/wp-login.php?{i}")


def _by_route(prom: LoopbackPrometheus) -> dict[str, float]:
    """Requests counted so far, by route, at the last scrape."""
    found = prom.query(f"sum by (route) ({sm.REQUESTS_TOTAL}{{{sm.selector(NS, SVC)}}})")
    return {r["metric"]["route"]: float(r["value"][1]) for r in found}


@dataclass
class Scraped:
    kube: FakeKube
    before: dict[str, float]  # by route, before this module's requests (the server is shared)
    after: dict[str, float]


@pytest.fixture(scope="module")
def scraped(server, tmp_path_factory) -> Iterator[Scraped]:
    """The server scraped at 30 s with requests between scrapes: one of each kind,
    scraped, then the rest, scraped (a series' first sample shows no increase)."""
    workdir = tmp_path_factory.mktemp("prometheus-30s")
    address = {"p1": urlparse(server).netloc}
    # With the predictor Service's probe too: its up (no pod) counts no replica, and its
    # samples, all dropped, count no request twice.
    with loopback_prometheus(
        workdir, address, NS, SVC, interval="30s", job=JOB, probe=True
    ) as prom:
        prom.wait_scraped(1)
        before = _by_route(prom)
        predicted = before.get(sm.PREDICT_ROUTE, 0)

        def counted(n: int) -> bool:
            return _by_route(prom).get(sm.PREDICT_ROUTE) == predicted + n

        send(server, 1, 1)
        _probe_and_stray(server)
        prom.wait_for("the first requests scraped", lambda: counted(2), timeout=90)
        send(server, OK - 1, BAD - 1)
        _probe_and_stray(server)
        prom.wait_for("every request scraped", lambda: counted(OK + BAD), timeout=90)
        kube = FakeKube()
        prom.serve_on(kube, REF)
        yield Scraped(kube, before, _by_route(prom))


def _scalar(kube: FakeKube, promql: str) -> float | None:
    return prometheus.scalar(kube, REF, promql)


def test_the_interval_is_read_off_the_targets_and_the_config(scraped: Scraped):
    kube = scraped.kube
    found = scrape.interval(kube, REF, NS, SVC)
    assert (found.seconds, found.from_targets) == (30, True)
    body = prometheus.get(kube, REF, scrape.CONFIG_PATH, {}, prometheus.unnamed_context)
    assert scrape.parse_config(body) == 30


def test_a_window_of_four_scrapes_holds_samples_where_distmls_old_30s_holds_none(scraped: Scraped):
    kube = scraped.kube
    assert _scalar(kube, sm.request_rate(NS, SVC, "30s")) is None  # empty: KEDA's 0
    window = sm.rate_window(30, sm.STATUS_FLOOR_S)
    assert window == "120s"
    assert (_scalar(kube, sm.request_rate(NS, SVC, window)) or 0) > 0


def test_keda_s_queries_at_this_interval_read_the_load(scraped: Scraped):
    kube = scraped.kube
    s = Settings(image="x", namespace=NS, serving_mode="standard", prometheus=str(REF))
    for metric in ("rps", "concurrency"):
        query = inference.request_query(replace(s, scale_metric=metric, scrape_interval_s=30))
        assert (_scalar(kube, query) or 0) > 0, query


def test_probes_and_strays_are_counted_by_the_server_but_are_not_traffic(scraped: Scraped):
    sent = {sm.PREDICT_ROUTE: OK + BAD, "/v1/models/{model_name}": 2 * PROBES}
    sent[sm.OTHER_ROUTE] = 2 * STRAYS
    for route, n in sent.items():
        assert scraped.after[route] - scraped.before.get(route, 0) == n, route
    kube = scraped.kube
    window = sm.rate_window(30, sm.STATUS_FLOOR_S)
    served = prometheus.instant(
        kube,
        REF,
        f"sum by (route, code) (rate(distml_requests_total{{{sm.served(NS, SVC)}}}[{window}]))",
    )
    assert {(m["route"], m["code"]) for m, _ in served} <= {
        (sm.PREDICT_ROUTE, "200"),
        (sm.PREDICT_ROUTE, "400"),
    }
    assert _scalar(kube, sm.error_ratio(NS, SVC, window)) == 0  # 404s are no 5xx, nor traffic
    p99 = _scalar(kube, sm.latency_quantile(NS, SVC, 0.99, window))
    assert p99 is not None and p99 > 0


def test_nothing_selects_on_distmls_job(scraped: Scraped):
    kube = scraped.kube
    assert _scalar(kube, sm.replicas(NS, SVC)) == 1
    probed = prometheus.instant(kube, REF, f'up{{{sm.selector(NS, SVC)},pod=""}}')
    assert [v for _, v in probed] == [1]  # the probe was scraped: it is not a replica
    (pod, at), *rest = prometheus.instant(kube, REF, sm.last_scrape(NS, SVC))
    assert not rest and pod == {"pod": "p1"} and at > 0
    view = PrometheusView(kube, REF, NS, SVC)
    assert view._unscraped(after=0) == []  # the load test finds its targets
    assert view._interval() == 30
