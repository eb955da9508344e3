"""loadtest/server_view.py: the server-side view of real Locust runs against a loopback
server whose ``/metrics`` counts as distml's does: its count equals Locust's exactly, by
code; a server that counts more fails the run; a server without ``/metrics`` is said to
have no view; counts that never settle are an error. (The real model server's page:
tests/k8s/grafana/test_dashboard_prometheus.py; the e2e tier: tests/e2e/test_lifecycle.py.)"""

from __future__ import annotations

import json

import pytest

from loadtest import __main__ as cli
from loadtest import runner as lt
from loadtest import summary as ls
from loadtest.server_view import Absent, MetricsEndpoint, MetricsUnavailable, line, report
from tests.loadtest.conftest import metered_server
from tests.support.fakekube import FakeClock
from tests.support.predict_server import MODEL, png_size, predict_server, write_payload


def _run(tmp_path, url: str, **kwargs) -> tuple[dict, list[str]]:
    lines: list[str] = []
    summary = lt.run_loadtest(
        url,
        MODEL,
        write_payload(tmp_path / "body.json"),
        tmp_path / "out",
        duration="3s",
        log=lines.append,
        server_view=MetricsEndpoint(url, MODEL),
        **kwargs,
    )
    return summary, lines


def test_the_server_counts_exactly_what_locust_sent_and_it_is_reported(tmp_path, ok_run):
    with metered_server("ok") as (url, _metered):
        summary, lines = _run(tmp_path, url)
    server = summary["server"]
    assert summary["requests"] > 100
    assert server["requests"] == server["locust_requests"] == summary["requests"]
    assert server["by_code"] == {"200": summary["requests"]}
    assert server["difference"] == 0 and server["difference_pct"] == 0.0
    assert server["error_ratio"] == 0.0
    assert 0 < server["p50_ms"] <= server["p95_ms"] <= server["p99_ms"]
    assert server["source"] == f"{url}/metrics"
    in_flight = [row["in_flight"] for row in server["series"]]
    assert len(in_flight) >= 2 and all(0 <= x <= 5 for x in in_flight)  # sampled each second
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["server"] == server
    assert ls.check(summary) == []
    assert lines[-1] == line(server)
    assert f"the server counted {server['requests']} predict requests (200: " in lines[-1]
    assert "(+0.00%)" in lines[-1]
    # A panel of what the server saw: taller than ok_run's two-panel chart.
    assert png_size(tmp_path / "out" / "chart.png")[1] > png_size(ok_run[1] / "chart.png")[1]


def test_every_code_the_server_answered_is_counted(tmp_path):
    with metered_server("flaky") as (url, _metered):
        summary, _ = _run(tmp_path, url)
    server = summary["server"]
    assert set(server["by_code"]) == {"200", "500"}
    assert server["requests"] == summary["requests"]
    assert 0.15 < server["error_ratio"] < 0.35  # one in four answers is a 500
    # Locust also fails the 200s that are not 10 numbers: its failures are more than 5xx.
    assert summary["failures"] > server["by_code"]["500"]


def test_a_server_that_counts_more_than_locust_sent_fails_the_run(tmp_path, capsys):
    payload = write_payload(tmp_path / "body.json")
    with metered_server("ok", extra_every=20) as (url, _metered):  # +5%
        code = cli.main(
            ["--url", url, "--model", MODEL, "--payload", str(payload), "--duration", "3s",
             "--out", str(tmp_path / "out"), "--server-metrics"]
        )  # fmt: skip
    assert code == 1
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["failures"] == 0
    assert 4 < summary["server"]["difference_pct"] < 6
    (problem,) = ls.check(summary)
    assert "more than the 1% allowed" in problem
    assert f"the server counted {summary['server']['requests']} predict requests" in problem
    assert "FAIL: the server counted" in capsys.readouterr().err


def test_a_server_without_metrics_has_no_view_and_the_run_stands(tmp_path):
    with predict_server("ok") as (url, _handler):
        summary, lines = _run(tmp_path, url)
    server = summary["server"]
    assert "answered HTTP 501" in server["absent"] or "answered HTTP 404" in server["absent"]
    assert "redeploy" in server["absent"]
    assert lines[-1].startswith("loadtest: no server-side view: ")
    assert ls.check(summary) == []


class Pages:
    """A /metrics endpoint on fake time: each GET answers the next page (the last repeats)."""

    def __init__(self, *pages: str) -> None:
        self.pages = list(pages)
        self.gets = 0

    def __call__(self, url: str) -> str:
        self.gets += 1
        page = self.pages.pop(0) if len(self.pages) > 1 else self.pages[0]
        if page == "down":
            raise MetricsUnavailable(f"{url} did not answer")
        return page


def _page(ok: int, in_flight: int) -> str:
    route = '{model_name}:predict"'
    return (
        f'distml_requests_total{{model="{MODEL}",route="/v1/models/{route},code="200",'
        f'version="1"}} {ok}\ndistml_requests_in_flight{{model="{MODEL}"}} {in_flight}\n'
    )


def test_the_count_is_read_once_nothing_is_in_flight_and_two_reads_agree():
    pages = Pages(_page(5, 0), _page(9, 2), "down", _page(12, 1), _page(13, 0), _page(13, 0))
    view = MetricsEndpoint("http://s", MODEL, get=pages, clock=FakeClock())
    assert view.begin(print)
    result = view.finish(0.0, print)
    assert result["requests"] == 8 and result["by_code"] == {"200": 8}
    assert pages.gets == 6


def test_counts_that_never_settle_are_an_error_that_fails_the_run():
    clock = FakeClock()
    view = MetricsEndpoint("http://s", MODEL, get=Pages(_page(1, 0), _page(2, 1)), clock=clock)
    assert view.begin(print)
    result = view.finish(0.0, print)
    assert result["error"].startswith("the counts did not settle within 15 s: 1.0 in flight")
    assert clock.now == pytest.approx(MetricsEndpoint.SETTLE_TIMEOUT_S)
    server = report(view.source, result, None, 10)
    assert ls.check({"requests": 10, "failures": 0, "server": server}) == [
        f"the server-side view (http://s/metrics) failed: {result['error']}"
    ]


def test_a_page_that_is_not_distml_s_is_no_view():
    view = MetricsEndpoint("http://s", MODEL, get=Pages("# nothing here\nup 1\n"))
    assert not view.begin(print)
    assert view.finish(0.0, print) == {"absent": "http://s/metrics has no distml metrics "
                                       "(a server from an older distml?)"}  # fmt: skip


def test_an_absent_view_says_why_and_is_not_a_failure():
    absent = Absent("no Prometheus here; `invoke up --with-monitoring` installs it")
    server = report(absent.source, absent.finish(0.0, print), None, 100)
    assert line(server) == (
        "loadtest: no server-side view: no Prometheus here; `invoke up --with-monitoring` "
        "installs it"
    )
    assert ls.server_problems(server) == []


@pytest.mark.parametrize(
    ("server_requests", "locust", "failing"),
    [(1000, 1000, False), (1010, 1000, False), (1011, 1000, True), (989, 1000, True)],
    ids=["equal", "+1.0% allowed", "+1.1% too many", "-1.1% too few"],
)
def test_more_than_one_percent_apart_fails(server_requests, locust, failing):
    result = {"requests": server_requests, "by_code": {"200": server_requests}}
    result |= {"p50_ms": 1.0, "p95_ms": 2.0, "p99_ms": 3.0, "notes": ["pod p left"]}
    problems = ls.server_problems(report("Prometheus", result, None, locust))
    assert bool(problems) == failing
    if failing:
        assert problems[0].endswith("; pod p left")
