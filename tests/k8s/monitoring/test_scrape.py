"""k8s.monitoring.scrape: how often a Prometheus scrapes a service, read from its targets,
else from its config (both outside input: parsed strictly, fuzzed), and the window check
that tells a KEDA query written for another interval."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from k8s.monitoring import prometheus as prom
from k8s.monitoring import scrape
from k8s.monitoring.prometheus import PrometheusError, PrometheusRef
from ml.contract import serving_metrics
from tests.support.fakekube import FakeKube

NS, SVC = "team-a", "tf-mnist"
USERS = PrometheusRef("monitoring", "prometheus-k8s", 9090)
OWN = PrometheusRef(NS, prom.OWN_SERVICE, prom.PORT)


def _ok(data: dict[str, Any]) -> bytes:
    return json.dumps({"status": "success", "data": data}).encode()


def _target(interval: str | None, **labels: str) -> dict[str, Any]:
    t: dict[str, Any] = {"labels": labels, "health": "up", "scrapePool": "x"}
    if interval is not None:
        t["scrapeInterval"] = interval
    return t


def serve(kube: FakeKube, r: PrometheusRef, targets: list[dict[str, Any]], config: str) -> list:
    seen: list[str] = []

    def handler(path: str, params: dict[str, str]) -> bytes:
        seen.append(path)
        if path == prom.TARGETS_PATH:
            return _ok({"activeTargets": targets})
        assert path == scrape.CONFIG_PATH
        return _ok({"yaml": config})

    kube.serve_proxy(r.namespace, r.service, r.port, handler)
    return seen


# ------------------------------------------------------------------ durations and config
@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30s", 30), ("1m", 60), ("1m30s", 90), ("500ms", 0.5), ("2h", 7200), ("1d", 86400),
     ("0", 0)],
)  # fmt: skip
def test_durations_read_as_prometheus_writes_them(text: str, seconds: float) -> None:
    assert prom.parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "30", "s", "1s1m", "-5s", "1.5s", "30 s", "1M"])
def test_anything_else_is_not_a_duration(text: str) -> None:
    with pytest.raises(PrometheusError, match="not a duration"):
        prom.parse_duration(text)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=80))
def test_a_duration_parser_returns_seconds_or_says_why(text: str) -> None:
    try:
        got = prom.parse_duration(text)
    except PrometheusError as e:
        assert "not a duration" in str(e)
    else:
        assert isinstance(got, float) and got >= 0 and math.isfinite(got)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 10_000), min_size=7, max_size=7))
def test_a_written_duration_reads_back(parts: list[int]) -> None:
    units = ("y", "w", "d", "h", "m", "s", "ms")
    text = "".join(f"{n}{u}" for n, u in zip(parts, units, strict=True) if n)
    if not text:
        return
    want = sum(n * s for n, s in zip(parts, scrape_units(), strict=True))
    assert prom.parse_duration(text) == pytest.approx(want)


def scrape_units() -> tuple[float, ...]:
    return (365 * 86400, 7 * 86400, 86400, 3600, 60, 1, 0.001)


@pytest.mark.parametrize(
    ("config", "seconds"),
    [
        ("global:\n  scrape_interval: 30s\n", 30),
        ("global:\n  evaluation_interval: 15s\n", 60),  # Prometheus's own default
        ("scrape_configs: []\n", 60),
        ("", 60),
    ],
)
def test_the_configs_global_interval_with_prometheus_s_default(config: str, seconds: float):
    assert scrape.parse_config(_ok({"yaml": config})) == seconds


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.binary(max_size=120),
        st.text(max_size=120).map(lambda y: _ok({"yaml": y})),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.text(max_size=8),
            lambda inner: (
                st.lists(inner, max_size=3)
                | st.dictionaries(st.sampled_from(["global", "scrape_interval", "x"]), inner)
            ),
            max_leaves=10,
        ).map(lambda doc: _ok({"yaml": json.dumps(doc)})),
    )
)
def test_the_config_parser_returns_seconds_or_raises_prometheus_error(body: bytes) -> None:
    try:
        got = scrape.parse_config(body)
    except PrometheusError as e:
        assert str(e)
    else:
        assert isinstance(got, float) and got >= 0


# ------------------------------------------------------------------ interval()
def test_the_services_own_targets_say_first_whatever_their_job() -> None:
    kube = FakeKube()
    targets = [
        _target("30s", job="team-a/distml-predictor", namespace=NS, isvc=SVC, pod="p1"),
        _target("1m", job="team-a/distml-predictor", namespace=NS, isvc=SVC, pod="p2"),
        _target("5s", job="other", namespace=NS, isvc="another", pod="q"),
    ]
    seen = serve(kube, USERS, targets, "global:\n  scrape_interval: 10s\n")
    found = scrape.interval(kube, USERS, NS, SVC)
    # The slowest of the service's targets: a window must hold four of its scrapes.
    assert (found.seconds, found.from_targets) == (60, True)
    assert found.found == f"its 2 target(s) of {NS}/{SVC}"
    assert seen == [prom.TARGETS_PATH]  # the config is not read


def test_before_any_target_distmls_own_is_its_scrape_job_and_a_users_its_config() -> None:
    kube = FakeKube()
    serve(kube, OWN, [], "")
    own = scrape.interval(kube, OWN, NS, SVC)
    assert (own.seconds, own.from_targets) == (serving_metrics.SCRAPE_INTERVAL_S, False)
    serve(kube, USERS, [_target("30s", namespace=NS, isvc="another")], "global:\n  x: 1\n")
    users = scrape.interval(kube, USERS, NS, SVC)
    assert (users.seconds, users.from_targets) == (60, False)
    assert "global scrape_interval" in users.found


def test_a_config_that_cannot_be_read_names_the_prometheus() -> None:
    kube = FakeKube()
    serve(kube, USERS, [], "global: [unclosed\n")
    with pytest.raises(PrometheusError, match=r"^Prometheus monitoring/prometheus-k8s:9090, its"):
        scrape.interval(kube, USERS, NS, SVC)


def test_a_target_whose_interval_is_no_duration_is_refused() -> None:
    body = _ok({"activeTargets": [_target("often", namespace=NS, isvc=SVC)]})
    with pytest.raises(PrometheusError, match="not a duration: 'often'"):
        prom.parse_targets(body)
    assert prom.parse_targets(_ok({"activeTargets": [_target(None)]}))[0].scrape_interval_s is None


# ------------------------------------------------------------------ windows
@pytest.mark.parametrize(
    ("every", "floor", "window"),
    [(5, 0, "20s"), (5, 30, "30s"), (5, 60, "60s"), (30, 60, "120s"), (15.5, 0, "62s")],
)
def test_a_window_holds_four_scrapes_and_its_floor(every: float, floor: float, window: str):
    assert serving_metrics.rate_window(every, floor) == window


def test_a_keda_query_written_for_a_faster_scrape_is_said_with_what_to_do() -> None:
    now = scrape.Interval(30, "its 1 target(s)", from_targets=True)
    problem = scrape.keda_window_problem(now, 5)
    assert problem is not None
    assert "every 30 s, but KEDA's query was written for a scrape every 5 s" in problem
    assert problem.endswith("Run `invoke deploy` again: it reads the interval off the targets")
    assert scrape.keda_window_problem(now, 30) is None
    assumed = scrape.Interval(30, "its global scrape_interval")
    assert scrape.keda_window_problem(assumed, 5) is None  # no target says yet
