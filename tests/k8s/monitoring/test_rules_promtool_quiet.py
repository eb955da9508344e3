"""k8s/monitoring/rules.py's alerts where things go quiet or traffic is thin, run by
``promtool test rules``: every predictor pod gone (no pod target left, only the Service's
probe), a lone worker stopped while training (no peer to stall), and a page's minimum of
bad requests at low traffic (the SRE workbook's caveat), with the cases that must stay
silent beside each: a finished worker, a worker restarted within the alert's ``for``, one
error at one request a minute."""

from __future__ import annotations

from pathlib import Path

from k8s.monitoring import rules
from ml.contract import serving_metrics as sm
from ml.contract import training_metrics as tm
from tests.k8s.monitoring.test_rules_promtool import (
    ISVC,
    NS,
    POD,
    SERVICE,
    expected,
    promtool,
    series,
    up,
    worker,
)

# The Service's probe target (k8s.monitoring.stack.service_probe_config): no pod label.
PROBE = {**SERVICE, "job": "distml-predictor-service", "instance": f"{ISVC}-predictor.{NS}.svc:80"}


def test_every_predictor_pod_gone_pages_through_the_services_probe(tmp_path: Path) -> None:
    gone = {  # the pods' targets are gone (Pending: no IP); the Service's stays, failing
        "interval": "1m",
        "input_series": [
            up("p-1", "1x4 stale"),
            series("up", PROBE, "1x4 0x20"),
        ],
        "alert_rule_test": [
            {"eval_time": "6m", "alertname": "DistmlPredictorDown", "exp_alerts": []},
            {
                "eval_time": "8m",
                "alertname": "DistmlPredictorDown",
                "exp_alerts": [expected("DistmlPredictorDown", SERVICE, 0)],
            },
            # The probe is not a pod: no ticket for a pod that is not there.
            {"eval_time": "20m", "alertname": "DistmlPredictorTargetDown", "exp_alerts": []},
        ],
    }
    serving = {  # the probe answered: quiet, whatever a pod did before
        "interval": "1m",
        "input_series": [up("p-1", "1x20"), series("up", PROBE, "1x20")],
        "alert_rule_test": [
            {"eval_time": "15m", "alertname": "DistmlPredictorDown", "exp_alerts": []}
        ],
    }
    promtool(tmp_path, [gone, serving])


def test_a_lone_worker_stopped_while_training_is_lost_and_a_finished_one_is_not(
    tmp_path: Path,
) -> None:
    stopped, finished, restarted = (
        worker("0"),
        worker("0", tfjob="train-done"),
        worker("0", tfjob="train-back"),
    )
    test = {
        "interval": "1m",
        "input_series": [
            # SIGSTOP at 10m: its scrapes fail from then on (Prometheus marks it stale).
            series(tm.TRAINING, stopped, "1x10 stale"),
            series(tm.STEPS_TOTAL, stopped, "0+10x10 stale"),
            # Its last reading says training ended, then the pod went.
            series(tm.TRAINING, finished, "1x10 0 stale"),
            # Its pod replaced: gone 3 minutes, then training again.
            series(tm.TRAINING, restarted, "1x10 stale _x2 1x20"),
        ],
        "alert_rule_test": [
            {"eval_time": "14m", "alertname": "DistmlTrainingWorkerLost", "exp_alerts": []},
            {
                "eval_time": "17m",
                "alertname": "DistmlTrainingWorkerLost",
                "exp_alerts": [expected("DistmlTrainingWorkerLost", stopped, 1)],
            },
            # Long after, a job that went while training is no longer an alert.
            {"eval_time": "30m", "alertname": "DistmlTrainingWorkerLost", "exp_alerts": []},
            # The stall alert never saw it: there is no peer left waiting.
            {"eval_time": "30m", "alertname": "DistmlTrainingStalled", "exp_alerts": []},
        ],
    }
    promtool(tmp_path, [test])


def _thin(values_200: str, values_500: str) -> list[dict[str, str]]:
    predict = {**POD, "route": sm.PREDICT_ROUTE, "model": ISVC, "version": "1"}
    return [
        series(sm.REQUESTS_TOTAL, {**predict, "code": "200"}, values_200),
        series(sm.REQUESTS_TOTAL, {**predict, "code": "500"}, values_500),
    ]


def test_one_error_at_one_request_a_minute_does_not_page_but_a_thin_outage_does(
    tmp_path: Path,
) -> None:
    page = "DistmlAvailabilityBudgetBurn"
    # One 500 at minute 30 of a request a minute: 16.7x over 1h, 200x over 5m: it paged.
    one = {
        "interval": "1m",
        "input_series": _thin("0+1x29 29x1 30+1x30", "0x30 1x31"),
        "alert_rule_test": [
            {"eval_time": f"{m}m", "alertname": page, "exp_alerts": []} for m in (32, 34, 40)
        ],
    }
    # Every request failing from minute 30, still one a minute: pages once
    # PAGE_MIN_BAD of them are counted in the hour.
    n = rules.PAGE_MIN_BAD
    outage = {
        "interval": "1m",
        "input_series": _thin("0+1x30 30x40", "0x30 1+1x40"),
        "alert_rule_test": [
            {"eval_time": f"{30 + n - 3}m", "alertname": page, "exp_alerts": []},
        ],
        # Then both pages fire (their annotations' figures are the burn tests' business).
        "promql_expr_test": [
            {
                "expr": f'count by (long) (ALERTS{{alertname="{page}",alertstate="firing"}})',
                "eval_time": f"{30 + n + 4}m",
                "exp_samples": [{"labels": f'{{long="{w}"}}', "value": 1} for w in ("1h", "6h")],
            }
        ],
    }
    promtool(tmp_path, [one, outage])
