"""k8s/monitoring/grafana/dashboard.py: the committed dashboard is the generated one; it imports as
Grafana imports a shared dashboard (``__inputs`` for the datasource, every panel's targets
with an ``expr``); its queries are ml/contract/serving_metrics.py's, for ``$namespace`` and
``$isvc``; and the helpers the checks use (substitution, variables, series read). Its
PromQL runs against a real Prometheus in test_dashboard_prometheus.py."""

from __future__ import annotations

import json
import re

import pytest

from k8s.monitoring.grafana import dashboard
from ml.contract import serving_metrics as sm

COMMITTED = json.loads(dashboard.PATH.read_text())


def test_the_committed_dashboard_is_the_generated_one():
    assert dashboard.PATH.read_text() == dashboard.render(), (
        "run `python -m k8s.monitoring.grafana.dashboard` and commit "
        "k8s/monitoring/grafana/distml-dashboard.json"
    )
    assert dashboard.main(["--check"]) == 0


def test_check_fails_on_a_stale_file_and_writing_fixes_it(tmp_path, monkeypatch, capsys):
    stale = tmp_path / "distml-dashboard.json"
    stale.write_text(dashboard.render().replace("p99", "p98"))
    monkeypatch.setattr(dashboard, "PATH", stale)
    assert dashboard.main(["--check"]) == 1
    assert "is stale: run `python -m k8s.monitoring.grafana.dashboard`" in capsys.readouterr().err
    assert dashboard.main([]) == 0 and dashboard.main(["--check"]) == 0


def test_the_datasource_is_a_template_variable_so_provisioning_works_as_import_does():
    # No __inputs: Grafana's file and sidecar provisioning leave ${DS_...} unfilled
    # (grafana/grafana#10786); a datasource variable works the same every way.
    assert "__inputs" not in COMMITTED and "DS_PROMETHEUS" not in dashboard.render()
    source, *_ = COMMITTED["templating"]["list"]
    assert source["name"] == "datasource" and source["type"] == "datasource"
    assert source["query"] == "prometheus"
    needed = {(r["type"], r["id"]) for r in COMMITTED["__requires"]}
    assert {("datasource", "prometheus"), ("panel", "timeseries"), ("panel", "stat")} <= needed
    panels = [p for p in COMMITTED["panels"] if p["type"] != "row"]
    uses = [p["datasource"] for p in panels]
    uses += [t["datasource"] for p in panels for t in p["targets"]]
    uses += [v["datasource"] for v in COMMITTED["templating"]["list"][1:]]
    assert all(d == {"type": "prometheus", "uid": "${datasource}"} for d in uses)
    assert COMMITTED["uid"] == "distml-serving" and COMMITTED["schemaVersion"] >= 36


def test_every_panel_has_targets_with_an_expr_and_a_place_on_the_grid():
    panels = COMMITTED["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    cells = set()
    for p in panels:
        if p["type"] != "row":
            assert p["targets"] and all(t["expr"] and t["refId"] for t in p["targets"]), p
            assert len({t["refId"] for t in p["targets"]}) == len(p["targets"])
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24, p["title"]
        covered = {
            (x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])
        }
        assert not covered & cells, f"{p['title']} overlaps another panel"
        cells |= covered


def test_the_service_is_shown_whole():
    titles = " / ".join(p["title"] for p in COMMITTED["panels"]).lower()
    for what in ("by status code", "error ratio", "p50", "p95", "p99", "objective", "in flight",
                 "replicas", "model version"):  # fmt: skip
        assert what in titles, what


def test_the_latency_panel_draws_the_objective():
    (latency,) = [p for p in COMMITTED["panels"] if p["title"].startswith("Latency")]
    steps = latency["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert steps[-1]["value"] == sm.LATENCY_OBJECTIVE_S and steps[-1]["color"] == "red"
    assert latency["fieldConfig"]["defaults"]["custom"]["thresholdsStyle"]["mode"] == "line"
    assert latency["fieldConfig"]["defaults"]["unit"] == "s"


def test_the_queries_are_serving_metrics_s_for_the_template_variables():
    ns, isvc, rate = dashboard.NS, dashboard.ISVC, "$__rate_interval"
    expected = [
        sm.request_rate_by_code(ns, isvc, rate),
        sm.error_ratio(ns, isvc, rate),
        *(sm.burn_by_version(ns, isvc, rate, slo) for slo in ("availability", "latency")),
        *(sm.latency_quantile(ns, isvc, q, rate) for q in (0.5, 0.95, 0.99)),
        sm.within_objective(ns, isvc, rate),
        sm.concurrency(ns, isvc, rate),
        sm.in_flight(ns, isvc),
        sm.replicas(ns, isvc),
        sm.model_version(ns, isvc),
    ]
    assert [expr for _, expr in dashboard.queries(COMMITTED, dashboard.SERVICE_ROW)] == expected
    names = [v["name"] for v in COMMITTED["templating"]["list"]]
    assert names == ["datasource", *dashboard.VARIABLES]
    # Every window is Grafana's four scrapes of the Prometheus chosen, never a fixed one.
    assert not [e for _, e in dashboard.queries(COMMITTED) if re.search(r"\[\d", e)]
    for _, expr in dashboard.queries(COMMITTED, dashboard.SERVICE_ROW):
        assert 'namespace="$namespace"' in expr and 'isvc="$isvc"' in expr, expr


def test_every_metric_read_is_one_the_server_writes_or_prometheus_s_up():
    written = {sm.REQUESTS_TOTAL, f"{sm.LATENCY}_bucket", f"{sm.LATENCY}_count",
               f"{sm.LATENCY}_sum", sm.IN_FLIGHT, f"{sm.MODEL_INFO}_info", "up"}  # fmt: skip
    read = {
        s.split("{")[0]
        for _, expr in dashboard.queries(COMMITTED, dashboard.SERVICE_ROW)
        for s in dashboard.series_read(expr)
    }
    assert read == written


def test_the_training_row_reads_what_the_workers_and_the_operator_write():
    from ml.contract import training_metrics as tmx

    queries = dashboard.queries(COMMITTED, dashboard.TRAINING_ROW)
    assert [title for title, _ in queries][::2][:1] == ["Training throughput (examples/s) by job"]
    read = {s.split("{")[0] for _, expr in queries for s in dashboard.series_read(expr)}
    assert read == {tmx.EXAMPLES_TOTAL, f"{tmx.STEP_SECONDS}_bucket", tmx.LOSS, tmx.TRAINING,
                    tmx.EXAMPLES_PER_SECOND,
                    tmx.OPERATOR_JOBS_RESTARTED}  # fmt: skip
    for _, expr in queries:
        assert 'namespace="$namespace"' in expr, expr  # the workers' or the operator's
    (row,) = [p for p in COMMITTED["panels"] if p["type"] == "row"]
    assert row["title"] == "Training"
    assert set(dashboard.MAY_BE_EMPTY) <= {title for title, _ in queries}


def test_substitution_replaces_every_variable():
    values = dashboard.values("team-a", "tf-mnist", 30)
    assert values["__rate_interval"] == "120s"
    for _, expr in dashboard.queries(COMMITTED):
        assert "$" not in dashboard.substitute(expr, values)
    assert dashboard.substitute('x{a="$isvc",b="$isvcs"}', {"isvc": "v", "isvcs": "w"}) == (
        'x{a="v",b="w"}'
    )


def test_variables_become_the_queries_that_list_their_values():
    assert dashboard.variable_queries(COMMITTED) == [
        ("namespace", "namespace", f"count by (namespace) ({dashboard.NAMESPACES})"),
        ("isvc", "isvc", f'count by (isvc) ({sm.REQUESTS_TOTAL}{{namespace="$namespace"}})'),
    ]
    board = {"templating": {"list": [{"name": "x", "definition": "query_result(up)"}]}}
    with pytest.raises(ValueError, match="not label_values"):
        dashboard.variable_queries(board)


@pytest.mark.parametrize(
    ("expr", "read"),
    [
        ('sum(rate(a{namespace="n",isvc="i",code=~"5.."}[1m]))', ['a{namespace="n",isvc="i"}']),
        ('a{route="/v1/models/{model_name}:predict",isvc="i"} / b{job="j"}',
         ['a{isvc="i"}', 'b{job="j"}']),
        ('a{isvc="i"} + a{isvc="i", le="0.1"}', ['a{isvc="i"}']),
        ("vector(0)", []),
    ],
)  # fmt: skip
def test_series_read_keeps_the_metric_and_whose_it_is(expr, read):
    assert dashboard.series_read(expr) == read


def test_no_metric_name_is_written_out_in_the_generator():
    """One source of truth: the generator spells no metric name itself."""
    source = dashboard.__loader__.get_source(dashboard.__name__)
    assert not re.search(r"distml_\w+", source.split('"""', 2)[2])
