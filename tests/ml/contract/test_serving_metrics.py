"""ml/contract/serving_metrics.py: every query it builds is PromQL that Debian's real Prometheus
2.42 accepts (a syntax error is its 400), for names with the characters Kubernetes allows;
the objective is one of the histogram's buckets (``within_objective`` reads that bucket);
the selectors say which service's series they read, the service-level ones only its
predict and infer routes, none its scrape job. (What the queries return from the
real server's series: tests/k8s/grafana/test_dashboard_prometheus.py,
tests/loadtest/test_prometheus_view.py.)"""

from __future__ import annotations

import inspect
import json
import re

import pytest

from k8s.client.kube import ProxyError
from ml.contract import serving_metrics as sm
from tests.support.loopback_prometheus import loopback_prometheus

NS, SVC = "team-a", "tf-mnist-2"


WINDOW = "2m"
#: The queries of the service's traffic: predict and infer requests only.
SERVICE_LEVEL = {"request_rate", "error_ratio", "latency_quantile", "concurrency",
                 "request_rate_by_code", "within_objective", "burn_by_version availability",
                 "burn_by_version latency"}  # fmt: skip


def _queries() -> dict[str, str]:
    """Every query function of the module (``selector`` and ``served`` build matchers,
    not a query), called for NS/SVC (and a window where it takes one)."""
    found = {}
    for name, fn in inspect.getmembers(sm, inspect.isfunction):
        params = list(inspect.signature(fn).parameters)
        if name in ("selector", "served") or params[:2] != ["namespace", "service"]:
            continue
        args: list[object] = [NS, SVC]
        if name == "latency_quantile":
            args.append(0.99)
        if "window" in params:
            args.append(WINDOW)
        if name == "burn_by_version":  # one query per SLO
            for slo in ("availability", "latency"):
                found[f"{name} {slo}"] = fn(*args, slo)
            continue
        found[name] = fn(*args)
    return found


def test_every_query_function_is_found():
    assert {"request_rate", "error_ratio", "latency_quantile", "in_flight", "requests_total",
            "replicas", "predict_requests", "predict_latency_buckets", "request_rate_by_code",
            "model_version", "last_scrape", "within_objective", "concurrency"}  <= set(
        _queries()
    )  # fmt: skip


def test_every_query_is_promql_prometheus_accepts(tmp_path):
    with loopback_prometheus(tmp_path, {}, NS, SVC) as prom:
        refused = {}
        for name, query in _queries().items():
            try:
                answer = json.loads(prom.get("api/v1/query", {"query": query}))
            except ProxyError as e:
                refused[name] = f"{query}: {e.body.decode()}"
                continue
            assert answer["status"] == "success", (name, answer)
    assert refused == {}


def test_prometheus_refuses_a_query_with_a_syntax_error(tmp_path):
    with loopback_prometheus(tmp_path, {}, NS, SVC) as prom, pytest.raises(ProxyError) as e:
        prom.get("api/v1/query", {"query": sm.request_rate(NS, SVC, WINDOW)[:-3]})
    assert e.value.status == 400 and b"parse error" in e.value.body


def test_the_objective_is_a_bucket_bound():
    assert sm.LATENCY_OBJECTIVE_S in sm.LATENCY_BUCKETS
    assert f'le="{sm.LATENCY_OBJECTIVE_S:g}"' in sm.within_objective(NS, SVC, WINDOW)


@pytest.mark.parametrize("name", sorted(_queries()))
def test_every_query_selects_one_service_s_series_never_by_job(name):
    query = _queries()[name]
    assert f'namespace="{NS}",isvc="{SVC}"' in query
    assert "job" not in query  # the Prometheus Operator's job is <namespace>/<podmonitor>


@pytest.mark.parametrize("name", sorted(SERVICE_LEVEL))
def test_the_service_level_queries_read_predict_and_infer_only(name):
    query = _queries()[name]
    assert query.count(sm.served(NS, SVC)) == query.count(sm.selector(NS, SVC)) > 0
    assert f"[{WINDOW}]" in query


def test_the_served_routes_match_as_literals_in_prometheus_s_regex():
    # PromQL unescapes the string once, RE2 reads the rest: every brace is literal.
    matcher = sm.served(NS, SVC).split("route=~")[1]
    pattern = json.loads(matcher)  # a PromQL double-quoted string is a JSON string here
    assert [re.fullmatch(pattern, r) is not None for r in sm.SERVED_ROUTES] == [True, True]
    for other in ("/v1/models/{model_name}", "/v2/health/ready", sm.OTHER_ROUTE,
                  "/v1/models/Xmodel_nameX:predict"):  # fmt: skip
        assert re.fullmatch(pattern, other) is None, other


def test_the_predict_queries_read_the_predict_route_only_by_the_labels_asked():
    assert sm.predict_requests(NS, SVC, ("pod", "code")).startswith("sum by (pod, code) (")
    assert f'route="{sm.PREDICT_ROUTE}"' in sm.predict_requests(NS, SVC)
    assert sm.predict_latency_buckets(NS, SVC).startswith("sum by (le) (")
    assert sm.predict_requests(NS, SVC).startswith("sum (")  # no by: one number
