"""k8s/monitoring/rules.py's rules run by ``promtool test rules`` (Debian's Prometheus 2.42):
input series that fire each alert, and series that do not — a burn just under each of the
workbook's thresholds, a short spike that only the short window sees, probes' 503s, a
single blip, a finished worker, a failure counted before Prometheus started.

The test files are written here from the rules' own constants, so that the figures the
alerts are tested at are the ones they are built from."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from k8s.monitoring import rules
from ml.contract import serving_metrics as sm
from ml.contract import training_metrics as tm

BINARY = shutil.which("promtool") or "/usr/bin/promtool"
NS, ISVC = "team-a", "tf-mnist"
PER_MINUTE = 10_000  # requests a minute: whole numbers of bad ones at every tested burn
UNDER, OVER = 0.97, 1.04  # a burn just under, and just over, a threshold
WARMUP_M = 1  # a rate needs two samples: the first evaluation that sees one is at 1m
SERVICE = {"namespace": NS, "isvc": ISVC}
POD = {**SERVICE, "pod": "tf-mnist-predictor-1", "job": "distml-predictor"}


def promtool(tmp_path: Path, tests: list[dict[str, Any]]) -> None:
    """Run ``tests`` (promtool's test groups) against the generated rules; fail with
    promtool's own report."""
    if not Path(BINARY).is_file():
        pytest.skip(f"no promtool at {BINARY}: apt-get install prometheus")
    (tmp_path / "rules.yaml").write_text(rules.render())
    spec = {"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": tests}
    (tmp_path / "test.yaml").write_text(json.dumps(spec))  # JSON is YAML
    run = subprocess.run(
        [BINARY, "test", "rules", "test.yaml"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr


def series(name: str, labels: dict[str, str], values: str) -> dict[str, str]:
    matchers = ",".join(f"{k}={json.dumps(v)}" for k, v in labels.items())
    return {"series": f"{name}{{{matchers}}}", "values": values}


def minutes(text: str) -> int:
    return round(rules.hours(text) * 60)


def the_rule(alertname: str, **labels: str) -> dict[str, Any]:
    (rule,) = [
        r
        for g in rules.groups()
        for r in g["rules"]
        if r.get("alert") == alertname and labels.items() <= r["labels"].items()
    ]
    return rule


def expected(alertname: str, labels: dict[str, str], value: float, **which: str) -> dict[str, Any]:
    """What promtool must see of one firing alert: its labels, and its annotations
    expanded as Prometheus expands them."""
    rule = the_rule(alertname, **which)

    def expand(text: str) -> str:
        text = text.replace('{{ printf "%.1f" $value }}', f"{value:.1f}")
        text = text.replace('{{ printf "%.0f" $value }}', f"{value:.0f}")
        text = re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m[1]], text)
        assert "{{" not in text, text
        return text

    return {
        "exp_labels": {"alertname": alertname, **labels, **rule["labels"]},
        "exp_annotations": {k: expand(v) for k, v in rule["annotations"].items()},
    }


# ------------------------------------------------------------------ the SLOs' burn rates


def slo_input(slo: rules.SLO, shape: list[tuple[int, float]]) -> list[dict[str, str]]:
    """One predictor's counters, ``PER_MINUTE`` requests a minute, a share ``bad`` of them
    bad for each (minutes, bad) of ``shape`` in turn; and a readiness probe's 503s, which
    are not the service's traffic and must move nothing."""
    good_steps, bad_steps = [], []
    good = bad = 0.0
    for length, share in shape:
        step_bad = PER_MINUTE * share
        good_steps.append(f"{good}+{PER_MINUTE - step_bad}x{length}")
        bad_steps.append(f"{bad}+{step_bad}x{length}")
        good += (PER_MINUTE - step_bad) * (length + 1)
        bad += step_bad * (length + 1)
    total_m = sum(length + 1 for length, _ in shape)
    predict = {**POD, "route": sm.PREDICT_ROUTE, "model": ISVC, "version": "1"}
    probe = {**POD, "route": "/v1/models/{model_name}", "model": ISVC, "version": "", "code": "503"}
    if slo.name == "availability":
        return [
            series(sm.REQUESTS_TOTAL, {**predict, "code": "200"}, " ".join(good_steps)),
            series(sm.REQUESTS_TOTAL, {**predict, "code": "500"}, " ".join(bad_steps)),
            series(sm.REQUESTS_TOTAL, probe, f"0+{PER_MINUTE}x{total_m}"),
        ]
    fast = {**predict, "le": f"{sm.LATENCY_OBJECTIVE_S:g}"}
    slow = {k: v for k, v in probe.items() if k != "code"}
    return [
        series(f"{sm.LATENCY}_bucket", fast, " ".join(good_steps)),
        series(f"{sm.LATENCY}_count", predict, f"0+{PER_MINUTE}x{total_m}"),
        series(
            f"{sm.LATENCY}_bucket", {**slow, "le": f"{sm.LATENCY_OBJECTIVE_S:g}"}, f"0x{total_m}"
        ),
        series(f"{sm.LATENCY}_count", slow, f"0+{PER_MINUTE}x{total_m}"),
    ]


BURN_CASES = [
    pytest.param(slo, b, mult, id=f"{slo.name} {b.long}/{b.short} at {mult:g} x {b.factor:g}")
    for slo in rules.SLOS
    for b in rules.BURNS
    for mult in (UNDER, OVER)
]


@pytest.mark.parametrize(("slo", "burn", "mult"), BURN_CASES)
def test_each_burn_alert_fires_just_over_its_threshold_and_not_just_under(
    tmp_path: Path, slo: rules.SLO, burn: rules.Burn, mult: float
) -> None:
    """A steady burn of ``mult`` times the alert's factor, read once the alert's ``for``
    has passed: every alert whose factor it exceeds and whose ``for`` has passed fires
    (the slower ones too, as the workbook means), and no other."""
    rate = burn.factor * mult
    at = minutes(burn.for_) + 5
    alertname = f"Distml{slo.name.title()}BudgetBurn"
    firing = [
        expected(alertname, SERVICE, rate, long=b.long)
        for b in rules.BURNS
        if rate > b.factor and WARMUP_M + minutes(b.for_) <= at
    ]
    assert (burn.long in [a["exp_labels"]["long"] for a in firing]) == (mult > 1)
    test = {
        "interval": "1m",
        "input_series": slo_input(slo, [(at + 5, slo.budget * rate)]),
        "alert_rule_test": [{"eval_time": f"{at}m", "alertname": alertname, "exp_alerts": firing}],
        "promql_expr_test": [
            about(f"{slo.record(w)} / {slo.budget:g}", rate, at) for w in rules.WINDOWS
        ],
    }
    promtool(tmp_path, [test])


def json_labels(labels: dict[str, str], name: str = "") -> str:
    return name + "{" + ",".join(f"{k}={json.dumps(v)}" for k, v in labels.items()) + "}"


def about(expr: str, value: float, at_m: int, labels: dict[str, str] = SERVICE) -> dict[str, Any]:
    """``expr`` is ``value`` at ``at_m`` minutes, to 1e-9 (promtool 2.42 compares exactly)."""
    return {
        "expr": f"abs({expr} - {value!r}) < bool 1e-9",
        "eval_time": f"{at_m}m",
        "exp_samples": [{"labels": json_labels(labels), "value": 1}],
    }


def pages_at(times_m: list[int]) -> list[dict[str, Any]]:
    """No page firing at any of ``times_m`` (minutes)."""
    query = 'ALERTS{severity="page",alertstate="firing"}'
    return [{"expr": query, "eval_time": f"{t}m", "exp_samples": []} for t in times_m]


@pytest.mark.parametrize("slo", rules.SLOS, ids=lambda s: s.name)
def test_a_short_spike_only_the_short_window_sees_does_not_page(
    tmp_path: Path, slo: rules.SLO
) -> None:
    """Six clean hours, then five minutes burning at 50x (the 5-minute window is far over
    14.4x; the hour's, at 50 x 5/60 = 4.2x, is not; 30 minutes' 8.3x is over 6x, but 6
    hours' 0.7x is not), then clean again."""
    clean = 6 * 60
    shape = [(clean, 0.0), (4, 50 * slo.budget), (120, 0.0)]
    start = clean + 1  # the first bad minute ends at start + 1, the last at start + 5
    test = {
        "interval": "1m",
        "input_series": slo_input(slo, shape),
        "promql_expr_test": [
            *pages_at([start + 3, start + 5, start + 10, start + 30]),
            about(f"{slo.record('5m')} / {slo.budget:g}", 50, start + 5),  # the short window saw it
        ],
    }
    promtool(tmp_path, [test])


def test_a_page_resolves_once_the_short_window_is_clean_though_the_hour_still_burns(
    tmp_path: Path,
) -> None:
    slo, clean = rules.SLOS[0], 6 * 60
    shape = [(clean, 0.0), (59, 0.02), (60, 0.0)]  # an hour at 20x, then none
    start, end = clean + 1, clean + 61  # the burn's bad minutes: (start, end]

    def hour_burn(t: int) -> float:
        return 20 * (min(t, end) - max(t - 60, start)) / 60

    paging, after = start + 51, end + 8
    page = expected("DistmlAvailabilityBudgetBurn", SERVICE, 0, long="1h")["exp_labels"]
    firing = {**page, "alertstate": "firing"}
    test = {
        "interval": "1m",
        "input_series": slo_input(slo, shape),
        "promql_expr_test": [
            {  # paging while the burn lasts
                "expr": 'ALERTS{alertstate="firing",severity="page"}',
                "eval_time": f"{paging}m",
                "exp_samples": [{"labels": json_labels(firing, "ALERTS"), "value": 1}],
            },
            *pages_at([after]),
            # the hour still burns above the threshold
            about(f"{slo.record('1h')} / {slo.budget:g}", hour_burn(after), after),
        ],
    }
    promtool(tmp_path, [test])


# ------------------------------------------------------------------ the predictor's targets


def up(pod: str, values: str, **labels: str) -> dict[str, str]:
    return series("up", {**POD, "pod": pod, "instance": f"{pod}:8080", **labels}, values)


def test_a_predictor_not_scraped_for_3_minutes_is_a_ticket_and_every_one_down_a_page(
    tmp_path: Path,
) -> None:
    one_down = {
        "interval": "1m",
        "input_series": [
            up("p-1", "1x4 0x20"),  # down from 5m
            up("p-2", "1x25"),
            series("up", {"job": "keda-operator", "instance": "keda:8080"}, "0x25"),  # no isvc
        ],
        "alert_rule_test": [
            {"eval_time": "7m", "alertname": "DistmlPredictorTargetDown", "exp_alerts": []},
            {
                "eval_time": "9m",
                "alertname": "DistmlPredictorTargetDown",
                "exp_alerts": [
                    expected(
                        "DistmlPredictorTargetDown",
                        {**POD, "pod": "p-1", "instance": "p-1:8080"},
                        0,
                    )
                ],
            },
            {"eval_time": "20m", "alertname": "DistmlPredictorDown", "exp_alerts": []},
        ],
    }
    all_down = {
        "interval": "1m",
        "input_series": [up("p-1", "1x4 0x20"), up("p-2", "1x4 0x20")],
        "alert_rule_test": [
            {"eval_time": "6m", "alertname": "DistmlPredictorDown", "exp_alerts": []},
            {
                "eval_time": "8m",
                "alertname": "DistmlPredictorDown",
                "exp_alerts": [expected("DistmlPredictorDown", SERVICE, 0)],
            },
        ],
    }
    promtool(tmp_path, [one_down, all_down])


# ------------------------------------------------------------------ training

OPERATOR = {"job": "training-operator", "instance": "10.0.0.9:8080"}


def failed(namespace: str, values: str, framework: str = tm.OPERATOR_FRAMEWORK) -> dict[str, str]:
    labels = {**OPERATOR, "job_namespace": namespace, "framework": framework}
    return series(tm.OPERATOR_JOBS_FAILED, labels, values)


def test_a_tfjob_failed_fires_for_a_first_failure_and_a_later_one_not_an_old_one(
    tmp_path: Path,
) -> None:
    """The operator's counter appears at 1 on a namespace's first failure (increase() does
    not see that); a counter at 1 already when Prometheus started is an old failure."""
    test = {
        "interval": "1m",
        "input_series": [
            series("up", OPERATOR, "1x60"),
            failed("team-a", "_x20 1x40"),  # first failure at 20m
            failed("team-b", "1x60"),  # failed before Prometheus started
            failed("team-c", "1x30 2x30"),  # a second failure at 31m
            failed("team-d", "_x20 1x40", framework="pytorch"),
        ],
        "alert_rule_test": [
            {"eval_time": "5m", "alertname": "DistmlTFJobFailed", "exp_alerts": []},
            {"eval_time": "15m", "alertname": "DistmlTFJobFailed", "exp_alerts": []},
            {
                "eval_time": "25m",
                "alertname": "DistmlTFJobFailed",
                "exp_alerts": [tfjob_failed("team-a", 1)],
            },
            {
                "eval_time": "35m",
                "alertname": "DistmlTFJobFailed",
                "exp_alerts": [tfjob_failed("team-c", 1)],
            },
            {"eval_time": "45m", "alertname": "DistmlTFJobFailed", "exp_alerts": []},
        ],
    }
    promtool(tmp_path, [test])


def tfjob_failed(namespace: str, count: float) -> dict[str, Any]:
    labels = {"job_namespace": namespace, "namespace": namespace}
    return expected("DistmlTFJobFailed", labels, count)


def worker(replica: str, **labels: str) -> dict[str, str]:
    return {
        "namespace": NS, tm.JOB_LABEL: "train-cnn", "model": "cnn", "replica": replica,
        "job": "distml-training", "instance": f"10.0.1.{replica}:{tm.METRICS_PORT}", **labels,
    }  # fmt: skip


def test_training_stalled_fires_for_a_worker_still_training_without_a_step(
    tmp_path: Path,
) -> None:
    stuck, finished, moving = worker("0"), worker("1", tfjob="train-old"), worker("2")
    test = {
        "interval": "1m",
        "input_series": [
            series(tm.STEPS_TOTAL, stuck, "0+10x20 200x40"),  # no step after 20m
            series(tm.TRAINING, stuck, "1x60"),
            series(tm.STEPS_TOTAL, finished, "0+10x20 200x40"),
            series(tm.TRAINING, finished, "1x20 0x40"),  # its training ended
            series(tm.STEPS_TOTAL, moving, "0+10x60"),
            series(tm.TRAINING, moving, "1x60"),
        ],
        "alert_rule_test": [
            {"eval_time": "33m", "alertname": "DistmlTrainingStalled", "exp_alerts": []},
            {
                "eval_time": "37m",
                "alertname": "DistmlTrainingStalled",
                "exp_alerts": [expected("DistmlTrainingStalled", stuck, 0)],
            },
        ],
        # The alert and the contract's query (one namespace's) agree.
        "promql_expr_test": [
            {
                "expr": tm.stalled(NS, "5m"),
                "eval_time": "37m",
                "exp_samples": [{"labels": json_labels(stuck), "value": 0}],
            }
        ],
    }
    promtool(tmp_path, [test])


# ------------------------------------------------------------------ KEDA

KEDA = {"job": "keda-operator", "instance": "keda-operator.keda.svc:8080"}


def keda_errors(namespace: str, isvc: str, values: str) -> dict[str, str]:
    labels = {
        **KEDA, "namespace": namespace, "scaledObject": f"{isvc}-predictor",
        "scaler": "prometheus", "triggerIndex": "0", "metric": "s0-prometheus",
        "type": "scaledobject",
    }  # fmt: skip
    return series(rules.KEDA_ERRORS, labels, values)


def model_info(isvc: str) -> dict[str, str]:
    labels = {**POD, "isvc": isvc, "model": isvc, "version": "1"}
    return series(f"{sm.MODEL_INFO}_info", labels, "1x60")


def test_keda_errors_that_last_fire_a_blip_or_another_teams_scaled_object_does_not(
    tmp_path: Path,
) -> None:
    test = {
        "interval": "1m",
        "input_series": [
            model_info(ISVC),
            model_info("blip"),
            keda_errors(NS, ISVC, "0x10 4+4x40"),  # 4 errors a minute from 11m
            keda_errors(NS, "blip", "0x10 1x40"),  # one error at 11m
            keda_errors(NS, "not-distml", "0x10 4+4x40"),  # no distml predictor of that name
        ],
        "alert_rule_test": [
            {"eval_time": "19m", "alertname": "DistmlKedaScalerErrors", "exp_alerts": []},
            {
                "eval_time": "25m",
                "alertname": "DistmlKedaScalerErrors",
                "exp_alerts": [
                    expected(
                        "DistmlKedaScalerErrors",
                        {"namespace": NS, "scaledObject": f"{ISVC}-predictor", "isvc": ISVC},
                        20,
                    )
                ],
            },
        ],
    }
    promtool(tmp_path, [test])


def test_keda_reading_empty_fires_while_requests_come_in_not_while_idle(tmp_path: Path) -> None:
    def empty(isvc: str) -> dict[str, str]:
        labels = {
            **KEDA, "namespace": NS, "scaledResource": f"{isvc}-predictor", "triggerName": "",
            "metricName": "s0-prometheus", "resourceType": "ScaledObject",
            "ignoreNullValues": "true",
        }  # fmt: skip
        return series(rules.KEDA_EMPTY, labels, "0+6x40")  # every read, from the start

    def requests(isvc: str, per_minute: int) -> dict[str, str]:
        labels = {**POD, "isvc": isvc, "route": sm.PREDICT_ROUTE, "code": "200"}
        return series(
            sm.REQUESTS_TOTAL, {**labels, "model": isvc, "version": "1"}, f"0+{per_minute}x40"
        )

    test = {
        "interval": "1m",
        "input_series": [empty(ISVC), requests(ISVC, 600), empty("idle"), requests("idle", 0)],
        "alert_rule_test": [
            {"eval_time": "8m", "alertname": "DistmlKedaMetricEmpty", "exp_alerts": []},
            {
                "eval_time": "15m",
                "alertname": "DistmlKedaMetricEmpty",
                "exp_alerts": [
                    expected(
                        "DistmlKedaMetricEmpty",
                        {"namespace": NS, "scaledResource": f"{ISVC}-predictor", "isvc": ISVC},
                        30,
                    )
                ],
            },
        ],
    }
    promtool(tmp_path, [test])
