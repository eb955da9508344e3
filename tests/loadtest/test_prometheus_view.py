"""loadtest/prometheus_view.py: the server-side view of a cluster run read from Prometheus
through ``k8s.monitoring.prometheus``: against Debian's real Prometheus 2.42 scraping a loopback
server that counts as distml's does, a real Locust run's count is the server's, exactly;
against scripted answers, pods that appeared, restarted or left during the run, targets
never scraped after the run (an error, on a deadline), and no Prometheus at all (absent,
saying how to get one)."""

from __future__ import annotations

import json
from urllib.parse import urlparse

import pytest

from k8s.monitoring.prometheus import PrometheusRef
from k8s.providers.settings import Settings
from loadtest import runner as lt
from loadtest import summary as ls
from loadtest.metrics_text import INF, Counts
from loadtest.prometheus_view import (
    NO_PROMETHEUS,
    PrometheusView,
    for_cluster,
    run_counts,
    scraped_timeout_s,
)
from loadtest.server_view import Absent, report
from ml.contract.serving_metrics import SCRAPE_INTERVAL_S
from tests.loadtest.conftest import metered_server
from tests.support.fakekube import FakeClock, FakeKube
from tests.support.loopback_prometheus import loopback_prometheus
from tests.support.predict_server import MODEL, write_payload

NS, SVC = "kubeflow", "tf-mnist"
REF = PrometheusRef(NS, "distml-prometheus", 9090)


def test_a_real_run_read_from_a_real_prometheus_counts_what_locust_sent(tmp_path):
    kube = FakeKube()
    with metered_server("ok") as (url, _metered):
        address = urlparse(url).netloc
        # Scraped as distml's job scrapes (every 5 s): the last seconds of the run are
        # counted only if the view waits for a scrape after the run's end.
        interval = f"{SCRAPE_INTERVAL_S}s"
        with loopback_prometheus(tmp_path / "prom", {"p1": address}, NS, SVC, interval) as prom:
            prom.serve_on(kube, REF)
            prom.wait_scraped(1)
            summary = lt.run_loadtest(
                url,
                MODEL,
                write_payload(tmp_path / "body.json"),
                tmp_path / "out",
                duration="4s",
                log=lambda _: None,
                server_view=PrometheusView(kube, REF, NS, SVC),
            )
    server = summary["server"]
    assert summary["requests"] > 100
    assert server["requests"] == summary["requests"], server
    assert server["by_code"] == {"200": summary["requests"]} and server["pods"] == ["p1"]
    assert 0 < server["p50_ms"] <= server["p95_ms"] <= server["p99_ms"]
    assert server["source"] == f"Prometheus {REF}"
    assert {row["replicas"] for row in server["series"]} == {1.0}  # one target, up
    assert ls.check(summary) == []


class Scripted:
    """Prometheus's answers scripted: ``targets`` (pod -> health), ``scraped`` (pod ->
    time of its last scrape), ``counts`` (pod -> {code: n}, the same for every bucket)."""

    def __init__(self, kube: FakeKube) -> None:
        self.targets: dict[str, str] = {}
        self.scraped: dict[str, float] = {}
        self.counts: dict[str, dict[str, float]] = {}
        self.bounds = ("0.1", "+Inf")
        kube.serve_proxy(REF.namespace, REF.service, REF.port, self.answer)

    def answer(self, path: str, params: dict[str, str]) -> bytes:
        if path == "api/v1/targets":
            active = [
                {"labels": {"job": "distml-predictor", "namespace": NS, "isvc": SVC, "pod": p},
                 "health": h, "lastError": "", "scrapeUrl": f"http://{p}:8080/metrics",
                 "scrapeInterval": "5s"}
                for p, h in self.targets.items()
            ]  # fmt: skip
            return json.dumps({"status": "success", "data": {"activeTargets": active}}).encode()
        return _vector(self._series(params["query"]))

    def _series(self, promql: str) -> list[tuple[dict[str, str], float]]:
        if promql.startswith("max by (pod) (timestamp(up"):
            return [({"pod": p}, t) for p, t in self.scraped.items()]
        if "by (pod, code)" in promql:
            return [
                ({"pod": p, "code": c}, n) for p, by in self.counts.items() for c, n in by.items()
            ]
        if "by (pod, le)" in promql:
            return [
                ({"pod": p, "le": le}, sum(by.values()))
                for p, by in self.counts.items()
                for le in self.bounds
            ]
        return []  # in flight, replicas: no series


def _vector(series: list[tuple[dict[str, str], float]]) -> bytes:
    result = [{"metric": m, "value": [0, repr(float(v))]} for m, v in series]
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}})


def _view(kube: FakeKube, clock: FakeClock) -> PrometheusView:
    return PrometheusView(kube, REF, NS, SVC, clock=clock, wall=clock.time)


def test_pods_that_appear_restart_or_leave_during_the_run_are_counted_or_named():
    kube, clock = FakeKube(), FakeClock(1000.0)
    prom = Scripted(kube)
    prom.targets = {"a": "up", "b": "up", "c": "up"}
    prom.scraped = {"a": 1001.0, "b": 1001.0, "c": 1001.0}
    prom.counts = {"a": {"200": 10}, "b": {"200": 50}, "c": {"200": 7}}
    view = _view(kube, clock)
    assert view.begin(print)
    prom.targets = {"a": "up", "b": "up", "d": "up"}  # c left, d appeared
    prom.scraped = {"a": 1100.0, "b": 1100.0, "d": 1100.0}
    prom.counts = {"a": {"200": 30, "503": 2}, "b": {"200": 5}, "d": {"200": 4}}  # b restarted
    result = view.finish(1050.0, print)
    assert result["requests"] == 20 + 2 + 5 + 4
    assert result["by_code"] == {"200": 29, "503": 2}
    assert result["pods"] == ["a", "b", "d"]
    assert result["notes"] == [
        "pod b's count went down (restarted?): all of it taken as new",
        "pod(s) c left during the run: the requests they answered are not in the server's count",
    ]


def test_targets_not_scraped_after_the_run_are_an_error_on_a_deadline():
    kube, clock = FakeKube(), FakeClock(1000.0)
    prom = Scripted(kube)
    prom.targets, prom.scraped, prom.counts = {"a": "up"}, {"a": 1001.0}, {"a": {"200": 1}}
    view = _view(kube, clock)
    assert view.begin(print)
    prom.targets["b"] = "down"  # never scraped since
    result = view.finish(1050.0, print)
    assert result["error"].startswith(
        f"after the run: Prometheus did not scrape every predictor within {scraped_timeout_s(5)} s:"
    )
    assert "a (last scraped 49.0 s before the moment), b (last never)" in result["error"]
    assert clock.now == pytest.approx(1000.0 + scraped_timeout_s(5), abs=1.5)
    server = report(view.source, result, None, 5)
    assert ls.server_problems(server)[0].startswith("the server-side view (Prometheus ")


def test_a_bucket_bound_that_is_no_number_is_an_error_not_a_crash():
    kube, clock = FakeKube(), FakeClock(1000.0)
    prom = Scripted(kube)
    prom.targets, prom.scraped, prom.counts = {"a": "up"}, {"a": 2000.0}, {"a": {"200": 1}}
    view = _view(kube, clock)
    assert view.begin(print)
    prom.bounds = ("soon", "+Inf")
    assert view.finish(1050.0, print) == {
        "error": "after the run: a histogram bucket with le='soon', not a number"
    }


def test_no_target_at_all_is_said_before_the_run():
    kube, clock = FakeKube(), FakeClock()
    Scripted(kube)
    view = _view(kube, clock)
    assert not view.begin(print)
    assert view.finish(0.0, print)["error"].endswith(
        "no target of kubeflow/tf-mnist's predictor pods (is the pod up?)"
    )


def test_a_cluster_without_prometheus_has_an_absent_view_saying_how_to_get_one():
    view = for_cluster(FakeKube(), Settings(image="x", namespace=NS))
    assert isinstance(view, Absent) and view.reason == NO_PROMETHEUS
    assert "`invoke up --with-monitoring`" in NO_PROMETHEUS
    own = for_cluster(FakeKube(), Settings(image="x", namespace=NS, with_monitoring=True))
    assert isinstance(own, PrometheusView) and own.ref == REF


def test_run_counts_sums_the_pods_differences():
    before = {"a": Counts({"200": 1}, {0.1: 1, INF: 1})}
    after = {"a": Counts({"200": 4}, {0.1: 2, INF: 4}), "b": Counts({"500": 1}, {INF: 1})}
    result = run_counts(before, after)
    assert result["requests"] == 4 and result["by_code"] == {"200": 3, "500": 1}
    assert result["notes"] == [] and result["error_ratio"] == 0.25
