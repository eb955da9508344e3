"""k8s.monitoring.prometheus: which Prometheus distml reads, its answers parsed (a fuzz of the
parser: its input comes from outside), and every failure said with what to do, through FakeKube's
service proxy."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from k8s.client.kube import KubeError, ProxyError
from k8s.monitoring import prometheus as prom
from k8s.monitoring.prometheus import PrometheusError, PrometheusRef
from k8s.providers.settings import Settings
from ml.contract import serving_metrics
from tests.support.fakekube import FakeKube

NS = "kubeflow"
OWN = PrometheusRef(NS, prom.OWN_SERVICE, prom.PORT)


def vector(*samples: tuple[dict[str, str], str]) -> bytes:
    result = [{"metric": m, "value": [1767225600.123, v]} for m, v in samples]
    return json.dumps(
        {"status": "success", "data": {"resultType": "vector", "result": result}}
    ).encode()


def serving(kube: FakeKube, answer: Any, r: PrometheusRef = OWN) -> list[dict[str, Any]]:
    """Serve ``answer`` (bytes, or a callable of the params) at ``r``; the requests seen."""
    seen: list[dict[str, Any]] = []

    def handler(path: str, params: dict[str, str]) -> bytes:
        seen.append({"path": path, **params})
        return answer(params) if callable(answer) else answer

    kube.serve_proxy(r.namespace, r.service, r.port, handler)
    return seen


# ------------------------------------------------------------------ which Prometheus


def test_ref_is_the_users_then_distmls_own_then_none() -> None:
    s = Settings(image="x", namespace="team-a")
    assert prom.ref(s) is None
    own = prom.ref(Settings(image="x", namespace="team-a", with_monitoring=True))
    assert own == PrometheusRef("team-a", "distml-prometheus", 9090) and own.own
    assert own.address == "http://distml-prometheus.team-a.svc:9090"
    users = Settings(image="x", with_monitoring=True, prometheus="monitoring/prom-k8s:9091")
    assert prom.ref(users) == PrometheusRef("monitoring", "prom-k8s", 9091)
    assert not prom.ref(users).own
    assert str(prom.ref(users)) == "monitoring/prom-k8s:9091"


@pytest.mark.parametrize(
    "text",
    ["prom:9090", "monitoring/prom", "Monitoring/prom:9090", "m/p:0", "m/p:70000", "m/p:http"],
)
def test_a_bad_prometheus_setting_names_the_setting_and_the_form(text: str) -> None:
    with pytest.raises(ValueError, match=r"cluster.prometheus .* NAMESPACE/SERVICE:PORT"):
        prom.parse_ref(text)


# ------------------------------------------------------------------ reading


def test_instant_reads_through_the_proxy_and_parses_every_series() -> None:
    kube = FakeKube()
    query = serving_metrics.request_rate(NS, "tf-mnist", "1m")
    seen = serving(kube, vector(({"pod": "a"}, "1.5"), ({"pod": "b"}, "+Inf")))
    assert prom.instant(kube, OWN, query) == [({"pod": "a"}, 1.5), ({"pod": "b"}, math.inf)]
    assert seen == [{"path": "api/v1/query", "query": query}]


def test_scalar_is_one_number_none_for_no_data_and_refuses_several_series() -> None:
    kube = FakeKube()
    answers = iter([vector(({}, "3")), vector(), vector(({}, "NaN")), vector(({}, "1"), ({}, "2"))])
    serving(kube, lambda _: next(answers))
    assert prom.scalar(kube, OWN, "q") == 3.0
    assert prom.scalar(kube, OWN, "q") is None  # no series: no requests yet
    assert prom.scalar(kube, OWN, "q") is None  # a quantile over no requests
    with pytest.raises(PrometheusError, match=r"query q: 2 series, expected one \(aggregate"):
        prom.scalar(kube, OWN, "q")


def test_a_scalar_result_is_one_sample_without_labels() -> None:
    body = {"status": "success", "data": {"resultType": "scalar", "result": [1.0, "0.25"]}}
    assert prom.parse_query(json.dumps(body)) == [({}, 0.25)]


def test_targets_give_job_labels_and_health() -> None:
    kube = FakeKube()
    active = [
        {
            "labels": {"job": serving_metrics.SCRAPE_JOB, "isvc": "tf-mnist", "pod": "p-1"},
            "scrapePool": serving_metrics.SCRAPE_JOB,
            "scrapeUrl": "http://10.0.0.5:8080/metrics",
            "lastError": "",
            "health": "up",
        },
        {"labels": {}, "scrapePool": "other", "lastError": "refused", "health": "down"},
    ]
    body = {"status": "success", "data": {"activeTargets": active, "droppedTargets": []}}
    seen = serving(kube, json.dumps(body).encode())
    got = prom.targets(kube, OWN)
    assert seen == [{"path": "api/v1/targets", "state": "active"}]
    assert [(t.job, t.health, t.last_error) for t in got] == [
        ("distml-predictor", "up", ""),
        ("other", "down", "refused"),
    ]
    assert got[0].labels["isvc"] == "tf-mnist" and got[0].scrape_url.endswith("/metrics")


def test_alerts_give_name_labels_state_since_and_value() -> None:
    kube = FakeKube()
    active = [
        {
            "labels": {"alertname": "DistmlPredictorDown", "severity": "page", "namespace": NS},
            "annotations": {"summary": "kubeflow/tf-mnist: no predictor pod answers"},
            "state": "firing",
            "activeAt": "2026-12-05T08:39:11.123456789Z",
            "value": "0e+00",
        },
        {
            "labels": {"alertname": "Watchdog"},
            "state": "pending",
            "activeAt": "2026-12-05T09:00:00+02:00",
        },
    ]
    body = {"status": "success", "data": {"alerts": active}}
    seen = serving(kube, json.dumps(body).encode())
    down, watchdog = prom.alerts(kube, OWN)
    assert seen == [{"path": "api/v1/alerts"}]
    assert (down.name, down.state, down.firing, down.value) == (
        "DistmlPredictorDown",
        "firing",
        True,
        0.0,
    )
    assert down.active_at == datetime(2026, 12, 5, 8, 39, 11, 123456, tzinfo=UTC)
    assert down.annotations["summary"].startswith("kubeflow/tf-mnist")
    assert not watchdog.firing and watchdog.value is None and watchdog.annotations == {}
    assert watchdog.active_at == datetime(2026, 12, 5, 7, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("alert", "said"),
    [
        ({"labels": {}, "state": "firing"}, "an alert has no alertname label"),
        ({"labels": {"alertname": "X"}, "state": 1}, "an alert's state is not a string"),
        (
            {"labels": {"alertname": "X"}, "state": "firing", "activeAt": "yesterday"},
            "not an RFC 3339 time",
        ),
        (
            {"labels": {"alertname": "X"}, "state": "firing", "value": "many"},
            "value is not a number",
        ),
    ],
    ids=["no name", "state not a string", "time not a time", "value not a number"],
)
def test_an_alert_that_is_not_prometheus_is_refused_saying_what(alert: Any, said: str) -> None:
    kube = FakeKube()
    serving(kube, json.dumps({"status": "success", "data": {"alerts": [alert]}}).encode())
    with pytest.raises(
        PrometheusError, match=rf"kubeflow/distml-prometheus:9090, its alerts: .*{said}"
    ):
        prom.alerts(kube, OWN)


# ------------------------------------------------------------------ failures, said


def test_no_prometheus_there_says_how_to_install_distmls_own() -> None:
    with pytest.raises(PrometheusError) as info:
        prom.instant(FakeKube(), OWN, "up")
    message = str(info.value)
    assert "Service kubeflow/distml-prometheus is not there" in message
    assert "`invoke up --with-monitoring` installs distml's own" in message


def test_a_users_prometheus_not_there_names_the_setting() -> None:
    users = PrometheusRef("monitoring", "prom", 9090)
    with pytest.raises(PrometheusError, match=r"not there .*check cluster.prometheus"):
        prom.instant(FakeKube(), users, "up")


def proxy_error(status: int, body: Any) -> ProxyError:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return ProxyError(f"HTTP {status}: {data[:60]!r}", status=status, body=data)


def failing(error: Exception):
    def handler(path: str, params: dict[str, str]) -> bytes:
        raise error

    return handler


@pytest.mark.parametrize(
    ("status", "body", "said"),
    [
        (
            503,
            {"kind": "Status", "message": 'no endpoints available for service "x"'},
            r"no ready pod behind Service kubeflow/distml-prometheus .* see `kubectl --context "
            r"kind-dist-ml -n kubeflow get pods,endpoints`",
        ),
        (
            403,
            {"kind": "Status", "message": "forbidden"},
            r"not allowed .* `get` on `services/proxy` in namespace kubeflow",
        ),
        (
            400,
            {"status": "error", "errorType": "bad_data", "error": "parse error at char 3"},
            r"Prometheus kubeflow/distml-prometheus:9090: Prometheus answered bad_data: parse "
            r"error at char 3",
        ),
        (500, b"<html>oops</html>", r"Prometheus kubeflow/distml-prometheus:9090: HTTP 500"),
    ],
    ids=["no ready pod", "forbidden", "bad query", "not prometheus"],
)
def test_error_answers_are_said_with_what_to_do(status: int, body: Any, said: str) -> None:
    kube = FakeKube()
    kube.serve_proxy(NS, OWN.service, OWN.port, failing(proxy_error(status, body)))
    with pytest.raises(PrometheusError, match=said):
        prom.instant(kube, OWN, "up", kubectl=lambda a: f"kubectl --context kind-dist-ml {a}")


def test_an_unreachable_api_server_is_a_prometheus_error_too() -> None:
    kube = FakeKube()
    kube.fail("proxy_get", KubeError("cannot reach the API server"))
    with pytest.raises(PrometheusError, match="not read: cannot reach the API server"):
        prom.scalar(kube, OWN, "up")


def test_an_answer_that_is_not_prometheus_names_the_query() -> None:
    kube = FakeKube()
    serving(kube, b'{"status": "success", "data": {"resultType": "matrix", "result": []}}')
    with pytest.raises(PrometheusError, match=r"query up\[1m\]: .*result type 'matrix'"):
        prom.instant(kube, OWN, "up[1m]")


# ------------------------------------------------------------------ the parser, fuzzed

JSON = st.recursive(
    st.none() | st.booleans() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


def alert() -> st.SearchStrategy[Any]:
    """An alert of ``/api/v1/alerts``: mostly shaped as Prometheus writes one, any part of
    it sometimes anything."""
    named = st.fixed_dictionaries(
        {"alertname": st.text(min_size=1, max_size=6)},
        optional={"namespace": st.text(max_size=6), "severity": st.sampled_from(["page", "x"])},
    )
    labels = named | st.dictionaries(st.text(max_size=4), st.text(max_size=6) | JSON, max_size=3)
    when = st.datetimes(timezones=st.just(UTC)).map(lambda d: d.isoformat())
    return st.fixed_dictionaries(
        {"labels": labels, "state": st.sampled_from(["firing", "pending"]) | JSON},
        optional={
            "annotations": labels | JSON,
            "activeAt": when | st.text(max_size=30) | JSON,
            "value": st.floats().map(repr) | st.text(max_size=6) | JSON,
        },
    )


def answers() -> st.SearchStrategy[Any]:
    """JSON shaped like Prometheus's answers, with any part of it replaced by anything."""
    value = st.one_of(st.lists(JSON, max_size=3), st.tuples(JSON, st.text(max_size=6)).map(list))
    series = st.fixed_dictionaries(
        {},
        optional={"metric": st.dictionaries(st.text(max_size=4), JSON, max_size=3), "value": value},
    )
    data = st.fixed_dictionaries(
        {},
        optional={
            "resultType": st.sampled_from(["vector", "scalar", "matrix", "string"]) | JSON,
            "result": st.lists(series, max_size=3) | value | JSON,
            "activeTargets": st.lists(st.dictionaries(st.text(max_size=10), JSON), max_size=3)
            | JSON,
            "alerts": st.lists(alert(), max_size=3) | JSON,
        },
    )
    return st.fixed_dictionaries(
        {},
        optional={
            "status": st.sampled_from(["success", "error"]) | JSON,
            "data": data | JSON,
            "errorType": JSON,
            "error": JSON,
        },
    )


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.binary(max_size=200), answers().map(lambda d: json.dumps(d).encode())))
def test_the_parsers_return_what_they_promise_or_raise_prometheus_error(body: bytes) -> None:
    for parse in (prom.parse_query, prom.parse_targets, prom.parse_alerts):
        try:
            got = parse(body)
        except PrometheusError as e:
            assert str(e)  # said, never empty
            continue
        assert isinstance(got, list)
        for item in got:
            if parse is prom.parse_query:
                labels, value = item
                assert isinstance(value, float)
            elif parse is prom.parse_targets:
                labels = item.labels
                assert all(isinstance(f, str) for f in (item.job, item.health, item.last_error))
            else:
                labels = item.labels
                assert_an_alert(item)
            assert all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items())


def assert_an_alert(item: prom.Alert) -> None:
    assert item.name == item.labels["alertname"] and item.name and item.state
    assert item.active_at is None or item.active_at.tzinfo is not None
    assert item.value is None or isinstance(item.value, float)
    assert all(isinstance(v, str) for v in [*item.labels.values(), *item.annotations.values()])


@settings(max_examples=300, deadline=None)
@given(st.lists(alert(), max_size=4))
def test_alerts_are_parsed_as_promised_or_refused_with_prometheus_error(alerts: list[Any]) -> None:
    body = json.dumps({"status": "success", "data": {"alerts": alerts}}).encode()
    try:
        got = prom.parse_alerts(body)
    except PrometheusError as e:
        assert str(e)
        return
    assert len(got) == len(alerts)
    for item in got:
        assert_an_alert(item)


def prom_text(x: float) -> str:
    """How Prometheus writes a sample value."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    return repr(x)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.dictionaries(st.text(min_size=1, max_size=6), st.text(max_size=6)), st.floats()
        ),
        max_size=5,
    )
)
def test_a_vector_round_trips(samples: list[tuple[dict[str, str], float]]) -> None:
    got = prom.parse_query(vector(*((m, prom_text(v)) for m, v in samples)))
    assert [m for m, _ in got] == [m for m, _ in samples]
    for (_, have), (_, want) in zip(got, samples, strict=True):
        assert have == want or (math.isnan(have) and math.isnan(want))
