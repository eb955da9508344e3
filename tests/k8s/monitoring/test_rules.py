"""k8s/monitoring/rules.py: the committed rules file is the generated one and promtool
accepts it; the rules follow the workbook's table and Prometheus's naming, select no
namespace or service, and every alert says what it is. What the rules do with series is
tested by promtool in test_rules_promtool.py."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from k8s.monitoring import rules

COMMITTED = yaml.safe_load(rules.PATH.read_text())
EVERY_RULE = [r for g in COMMITTED["groups"] for r in g["rules"]]
ALERTS = [r for r in EVERY_RULE if "alert" in r]
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"


def test_the_committed_rules_are_the_generated_ones():
    assert rules.PATH.read_text() == rules.render(), (
        "run `python -m k8s.monitoring.rules` and commit k8s/monitoring/distml-rules.yaml"
    )
    assert rules.main(["--check"]) == 0
    assert {"groups": rules.groups()} == COMMITTED


def test_check_fails_on_a_stale_file_and_writing_fixes_it(tmp_path, monkeypatch, capsys):
    stale = tmp_path / "distml-rules.yaml"
    stale.write_text(rules.render().replace("14.4", "14"))
    monkeypatch.setattr(rules, "PATH", stale)
    assert rules.main(["--check"]) == 1
    assert "is stale: run `python -m k8s.monitoring.rules`" in capsys.readouterr().err
    assert rules.main([]) == 0 and rules.main(["--check"]) == 0


def test_promtool_checks_the_committed_file():
    if not Path(PROMTOOL).is_file():
        pytest.skip(f"no promtool at {PROMTOOL}: apt-get install prometheus")
    run = subprocess.run(
        [PROMTOOL, "check", "rules", str(rules.PATH)], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"SUCCESS: {len(EVERY_RULE)} rules found" in run.stdout


def test_the_burn_rates_are_the_workbooks():
    """Google's SRE workbook, chapter 5: 2% of a 30-day budget in an hour, 5% in 6 hours
    page; 10% in a day, 10% in 3 days make a ticket."""
    table = [(b.severity, b.long, b.short, b.factor, round(b.spent, 3)) for b in rules.BURNS]
    assert table == [
        ("page", "1h", "5m", 14.4, 0.02),
        ("page", "6h", "30m", 6, 0.05),
        ("ticket", "1d", "2h", 3, 0.1),
        ("ticket", "3d", "6h", 1, 0.1),
    ]
    assert rules.WINDOWS == ("5m", "30m", "1h", "2h", "6h", "1d", "3d")
    assert [(s.name, s.objective) for s in rules.SLOS] == [
        ("availability", 0.999),
        ("latency", 0.99),
    ]


def test_every_window_of_every_slo_is_recorded_by_its_level_metric_and_operation():
    recorded = {r["record"] for r in EVERY_RULE if "record" in r}
    for slo in rules.SLOS:
        for w in rules.WINDOWS:
            assert slo.record(w) in recorded
    for name in recorded:
        level, metric, operation = name.split(":")
        assert level in ("namespace_isvc", rules.VERSION_LEVEL) and metric.startswith("distml_")
        assert re.fullmatch(r"(ratio_)?rate\d+[mhd]", operation), name
    for r in EVERY_RULE:
        if "record" not in r:
            continue
        level, _, operation = r["record"].split(":")
        window = operation.rpartition("rate")[2]
        if level == rules.VERSION_LEVEL:
            assert "sum by (namespace, isvc, version)" in r["expr"], r["record"]
        elif rules.hours(window) > rules.hours(rules.LONG_FROM_RECORDED):
            # Long windows add up the recorded 5-minute rates, never the raw series.
            assert "sum_over_time(namespace_isvc:" in r["expr"] and "{" not in r["expr"]
        else:
            assert "sum by (namespace, isvc)" in r["expr"], r["record"]


def test_no_rule_fixes_a_namespace_or_a_service():
    for r in EVERY_RULE:
        assert not re.search(r'(namespace|isvc|tfjob)=~?"[^"]', r["expr"]), r


def test_every_alert_has_a_severity_a_summary_and_a_description_naming_where():
    assert {r["alert"] for r in ALERTS} == {
        "DistmlAvailabilityBudgetBurn", "DistmlLatencyBudgetBurn", "DistmlPredictorTargetDown",
        "DistmlPredictorDown", "DistmlKedaScalerErrors", "DistmlKedaMetricEmpty",
        "DistmlTFJobFailed", "DistmlTrainingStalled", "DistmlTrainingWorkerLost",
    }  # fmt: skip
    for r in ALERTS:
        assert r["labels"]["severity"] in ("page", "ticket"), r["alert"]
        assert set(r["annotations"]) == {"summary", "description"}
        assert "{{ $labels.namespace }}" in r["annotations"]["description"], r["alert"]
    pages = {
        (r["alert"], r["labels"].get("long")) for r in ALERTS if r["labels"]["severity"] == "page"
    }
    assert pages == {
        ("DistmlAvailabilityBudgetBurn", "1h"), ("DistmlAvailabilityBudgetBurn", "6h"),
        ("DistmlLatencyBudgetBurn", "1h"), ("DistmlLatencyBudgetBurn", "6h"),
        ("DistmlPredictorDown", None),
    }  # fmt: skip


def test_namespace_only_leaves_out_exactly_the_alerts_on_other_namespaces_series():
    from ml.contract import training_metrics as tm

    foreign = (rules.KEDA_ERRORS, rules.KEDA_EMPTY, tm.OPERATOR_JOBS_FAILED)
    reading = {r["alert"] for r in ALERTS if any(m in r["expr"] for m in foreign)}
    assert reading == set(rules.OTHER_NAMESPACES)
    kept = rules.groups(namespace_only=True)
    assert [g["name"] for g in kept] == [g["name"] for g in COMMITTED["groups"]]
    left = [r for g in kept for r in g["rules"]]
    assert [r for r in EVERY_RULE if r.get("alert") not in reading] == left
    assert not any(m in r["expr"] for r in left for m in foreign)
    assert rules.groups() == COMMITTED["groups"]  # the default is the committed file
