"""distml's Prometheus rules, generated from one SLO definition: recording rules for every
window the alerts read, the multiwindow, multi-burn-rate alerts of Google's SRE workbook
(chapter 5, "Alerting on SLOs"), and the alerts no SLO covers (a predictor not scraped, a
TFJob failed, training stalled, KEDA unable to read its metric).

    python -m k8s.monitoring.rules          # write distml-rules.yaml beside it
    python -m k8s.monitoring.rules --check  # exit 1 when the committed file differs

The file is Prometheus's ``rule_files`` format (``groups:``): distml's own Prometheus loads
it (``k8s.monitoring.stack``), and a user's loads it as it is. Every rule selects on
labels, never on a namespace or service: it applies to every distml service the Prometheus
scrapes, and every alert carries ``namespace`` (and ``isvc`` where it is a service's), which
`invoke status` filters on. The serving queries are ``ml.contract.serving_metrics``'s; the training
ones are built from ``ml.contract.training_metrics``'s names. Pure: no I/O but ``main``'s.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from common import generated_file
from ml.contract import serving_metrics as sm
from ml.contract import training_metrics as tm

PATH = Path(__file__).with_name("distml-rules.yaml")
#: The SLO period the workbook's burn rates are computed for.
PERIOD = "30d"
PERIOD_H = 30 * 24
#: Recording rules' level (``level:metric:operations``): aggregated by these labels.
LEVEL = "namespace_isvc"
BY = "namespace, isvc"
#: Every distml predictor's series, any namespace, any service: the service's traffic.
SERVED = f'isvc!="",{sm.served_routes()}'
#: How often the long windows are recorded (a minute-old 3-day ratio is still exact enough).
LONG_INTERVAL = "1m"
#: How long a TFJob's failure stays an alert (it has no state to resolve it by).
FAILED_WINDOW = "10m"
#: How far back a worker lost is remembered: after that, a job deleted while it trained is
#: no longer an alert.
LOST_WINDOW = "15m"
#: KEDA reads its metric every 30 s (its pollingInterval) and for every HPA sync: an
#: alert when its reads fail in every 5-minute window for 10 minutes, not on one blip.
KEDA_WINDOW, KEDA_FOR = "5m", "10m"
#: KServe names the ScaledObject of an InferenceService ``<isvc>-predictor``.
SCALED_OBJECT = "(.+)-predictor"
KEDA_ERRORS = "keda_scaler_detail_errors_total"
KEDA_EMPTY = "keda_scaler_empty_upstream_responses_total"
TFJOB_FAILED = "DistmlTFJobFailed"
KEDA_SCALER_ERRORS = "DistmlKedaScalerErrors"
KEDA_METRIC_EMPTY = "DistmlKedaMetricEmpty"
#: The alerts on series of components in namespaces of their own (the training operator's,
#: KEDA's): a Prometheus that enforces a namespace label cannot match them
#: (docs/monitoring.md, "Where a namespace label is enforced").
OTHER_NAMESPACES = (TFJOB_FAILED, KEDA_SCALER_ERRORS, KEDA_METRIC_EMPTY)
HOURS = {"m": 1 / 60, "h": 1, "d": 24}
#: The rates recorded for the long windows to add up, and the windows that read them
#: (longer than LONG_FROM_RECORDED).
BASE_WINDOW, LONG_FROM_RECORDED = "5m", "1h"
#: A version's own ratios (``namespace_isvc_version:...``): what a canary's owner looks at;
#: the alerts stay per service.
VERSION_LEVEL, VERSION_BY, VERSION_WINDOWS = (
    "namespace_isvc_version",
    "namespace, isvc, version",
    ("5m", "1h"),
)


def hours(window: str) -> float:
    """A window ("5m", "6h", "3d") in hours."""
    return int(window[:-1]) * HOURS[window[-1]]


@dataclass(frozen=True)
class SLO:
    """One service-level objective: the share of predict and infer requests that are good."""

    name: str
    objective: float
    bad: str  # what a bad request is, in words
    metric: str  # the recording rules' metric part: bad requests per request

    @property
    def budget(self) -> float:
        """The share of requests that may be bad (0.001 for 99.9%)."""
        return round(1 - self.objective, 10)

    def record(self, window: str, level: str = LEVEL) -> str:
        return f"{level}:{self.metric}:ratio_rate{window}"

    @property
    def counted(self) -> tuple[str, str]:
        """The recording rules' metric parts of its bad requests and of all its requests."""
        if self.name == "availability":
            return f"{sm.REQUESTS}_5xx", sm.REQUESTS
        return f"{sm.REQUESTS}_slow", f"{sm.LATENCY}_count"

    def rates(self, window: str, by: str = BY) -> tuple[str, str]:
        """(bad requests per second, requests per second) over ``window``, summed ``by``."""

        def rate(metric: str, extra: str = "") -> str:
            return f"sum by ({by}) (rate({metric}{{{SERVED}{extra}}}[{window}]))"

        if self.name == "availability":
            return rate(sm.REQUESTS_TOTAL, ',code=~"5.."'), rate(sm.REQUESTS_TOTAL)
        within = rate(f"{sm.LATENCY}_bucket", f',le="{sm.LATENCY_OBJECTIVE_S:g}"')
        total = rate(f"{sm.LATENCY}_count")
        return f"(\n  {total}\n  -\n  {within}\n)", total

    def rate_records(self) -> list[dict[str, str]]:
        """Its bad and all requests per second over :data:`BASE_WINDOW`, recorded: what
        the long windows add up (the request rate is recorded once, as REQUEST_RATE)."""
        names = [f"{LEVEL}:{m}:rate{BASE_WINDOW}" for m in self.counted]
        return [
            {"record": name, "expr": expr}
            for name, expr in zip(names, self.rates(BASE_WINDOW), strict=True)
            if name != REQUEST_RATE
        ]

    def ratio(self, window: str, by: str = BY) -> str:
        """Bad requests per request over ``window``, summed ``by``: from the raw series up
        to an hour; beyond, from the recorded :data:`BASE_WINDOW` rates (the workbook's way:
        a 3-day window reads one recorded series per service, not three days of every
        pod's raw buckets, every minute)."""
        if hours(window) <= hours(LONG_FROM_RECORDED) or by != BY:
            bad, total = self.rates(window, by)
            return f"{bad}\n/\n{total}"
        bad, total = (
            f"sum_over_time({LEVEL}:{m}:rate{BASE_WINDOW}[{window}])" for m in self.counted
        )
        return f"{bad}\n/\n{total}"

    def bad_count(self, window: str) -> str:
        """Bad requests counted over ``window``, by namespace and isvc."""

        def increase(metric: str, extra: str = "") -> str:
            return f"sum by ({BY}) (increase({metric}{{{SERVED}{extra}}}[{window}]))"

        if self.name == "availability":
            return increase(sm.REQUESTS_TOTAL, ',code=~"5.."')
        within = increase(f"{sm.LATENCY}_bucket", f',le="{sm.LATENCY_OBJECTIVE_S:g}"')
        return f"{increase(f'{sm.LATENCY}_count')}\n  -\n  {within}"


#: The SLOs (docs/monitoring.md, "Alerts"): the one definition everything here follows.
SLOS = (
    SLO("availability", 0.999, "answered 5xx", "distml_requests_5xx_per_request"),
    SLO(
        "latency",
        0.99,
        f"slower than {sm.LATENCY_OBJECTIVE_S:g} s",
        "distml_requests_slow_per_request",
    ),
)


@dataclass(frozen=True)
class Burn:
    """One multiwindow alert: the budget burns faster than ``factor`` over both windows."""

    severity: str
    long: str
    short: str
    factor: float
    for_: str

    @property
    def spent(self) -> float:
        """The share of the period's budget spent over the long window at this rate."""
        return self.factor * hours(self.long) / PERIOD_H


#: A page needs at least this many bad requests in its long window: at low traffic one
#: error is a burn of any size (1 of 60 requests an hour is 16.7x a 99.9% budget's 1h
#: rate), and the workbook's low-traffic caveat applies (chapter 5). Below it a burn is
#: left to the tickets, whose windows hold more requests.
PAGE_MIN_BAD = 10
#: The workbook's table (chapter 5, "Multiwindow, Multi-Burn-Rate Alerts"); ``for`` trims
#: blips of one evaluation: 2 min on a page, longer on a ticket, whose windows move slowly.
BURNS = (
    Burn("page", "1h", "5m", 14.4, "2m"),
    Burn("page", "6h", "30m", 6, "2m"),
    Burn("ticket", "1d", "2h", 3, "15m"),
    Burn("ticket", "3d", "6h", 1, "1h"),
)
WINDOWS = tuple(sorted({w for b in BURNS for w in (b.long, b.short)}, key=hours))
#: Windows recorded every evaluation; the longer ones every LONG_INTERVAL.
SHORT_WINDOWS = tuple(w for w in WINDOWS if hours(w) <= 1)
REQUEST_RATE = f"{LEVEL}:{sm.REQUESTS}:rate5m"


def _recording(windows: Sequence[str]) -> list[dict[str, Any]]:
    return [{"record": slo.record(w), "expr": slo.ratio(w)} for slo in SLOS for w in windows]


def _by_version() -> list[dict[str, Any]]:
    return [
        {"record": slo.record(w, VERSION_LEVEL), "expr": slo.ratio(w, VERSION_BY)}
        for slo in SLOS
        for w in VERSION_WINDOWS
    ]


def _burn_alert(slo: SLO, burn: Burn) -> dict[str, Any]:
    def over(window: str) -> str:
        return f"{slo.record(window)} / {slo.budget:g} > {burn.factor:g}"

    where = "{{ $labels.namespace }}/{{ $labels.isvc }}"
    value = '{{ printf "%.1f" $value }}'
    expr = f"(\n  {over(burn.long)}\n)\nand\n(\n  {over(burn.short)}\n)"
    if burn.severity == "page":
        expr += f"\nand on ({BY})\n(\n  {slo.bad_count(burn.long)}\n  >= {PAGE_MIN_BAD}\n)"
    return {
        "alert": f"Distml{slo.name.title()}BudgetBurn",
        "expr": expr,
        "for": burn.for_,
        "labels": {
            "severity": burn.severity,
            "slo": slo.name,
            "long": burn.long,
            "short": burn.short,
        },
        "annotations": {
            "summary": f"{where}: {slo.name} error budget burning {value}x over {burn.long}",
            "description": (
                f"{where}: over the last {burn.long}, and the last {burn.short} too, its "
                f"predict and infer requests {slo.bad} spent the error budget of its "
                f"{slo.objective:.1%} {slo.name} objective {value}x as fast as {PERIOD} "
                f"allow (alert above {burn.factor:g}x: {burn.spent:.0%} of the budget in "
                f"{burn.long}). See `invoke status`, the dashboard, the predictor pods' logs."
            ),
        },
    }


#: A predictor pod's target (a ``pod`` label), and its InferenceService's Service probed as
#: users reach it (``k8s.monitoring.stack.service_probe_config``: no ``pod``), whose target
#: stays while the Service does, when no pod is there to be a target of its own.
POD_TARGET, SERVICE_TARGET = 'up{isvc!="",pod!=""}', 'up{isvc!="",pod=""}'


def _serving_alerts() -> list[dict[str, Any]]:
    where = "{{ $labels.namespace }}/{{ $labels.isvc }}"
    target = POD_TARGET
    return [
        {
            "alert": "DistmlPredictorTargetDown",
            "expr": f"{target} == 0",
            "for": "3m",
            "labels": {"severity": "ticket"},
            "annotations": {
                "summary": f"{where}: predictor pod {{{{ $labels.pod }}}} not scraped",
                "description": (
                    f"Prometheus has failed to scrape {where}'s predictor pod "
                    "{{ $labels.pod }} ({{ $labels.instance }}) for 3 minutes: its requests "
                    "are not counted, by the SLOs or by KEDA. Its target's last error is on "
                    "Prometheus's targets page."
                ),
            },
        },
        {
            "alert": "DistmlPredictorDown",
            "expr": (f"max by ({BY}) ({target}) == 0\nor\nmax by ({BY}) ({SERVICE_TARGET}) == 0"),
            "for": "2m",
            "labels": {"severity": "page"},
            "annotations": {
                "summary": f"{where}: no predictor pod answers",
                "description": (
                    f"For 2 minutes no predictor pod of {where} has answered: every one failed "
                    "its scrape, or its Service has no pod ready behind it (all Pending, "
                    "evicted, crashing or gone). The service is down, and the SLO alerts see "
                    "no request to count. `invoke status`; `kubectl describe pods` of the "
                    "predictor."
                ),
            },
        },
        *_keda_alerts(),
    ]


def _keda_alerts() -> list[dict[str, Any]]:
    """KEDA's operator's own counters (v2.20.2, pkg/metricscollector/prommetrics.go), by the
    ScaledObject KServe names ``<isvc>-predictor``, kept to distml's services."""
    where = "{{ $labels.namespace }}/{{ $labels.isvc }}"
    distml = f'group by ({BY}) ({sm.MODEL_INFO}_info{{isvc!=""}})'
    count = '{{ printf "%.0f" $value }}'

    def per_isvc(metric: str, name_label: str) -> str:
        counted = f"sum by (namespace, {name_label}) (increase({metric}[{KEDA_WINDOW}])) > 0"
        return f'label_replace(\n  {counted},\n  "isvc", "$1", "{name_label}", "{SCALED_OBJECT}"\n)'

    return [
        {
            "alert": KEDA_SCALER_ERRORS,
            "expr": f"{per_isvc(KEDA_ERRORS, 'scaledObject')}\nand on ({BY})\n{distml}",
            "for": KEDA_FOR,
            "labels": {"severity": "ticket"},
            "annotations": {
                "summary": f"{where}: KEDA cannot read its scaling metric",
                "description": (
                    f"KEDA's scaler of {where} failed {count} time(s) in the last "
                    f"{KEDA_WINDOW} (Prometheus not answering, or the query failing): with no "
                    "value the HPA keeps its replicas, or scales up on CPU only. "
                    "`kubectl -n keda logs deploy/keda-operator`."
                ),
            },
        },
        {
            "alert": KEDA_METRIC_EMPTY,
            "expr": (
                f"{per_isvc(KEDA_EMPTY, 'scaledResource')}\nand on ({BY})\n({REQUEST_RATE} > 0)"
            ),
            "for": KEDA_FOR,
            "labels": {"severity": "ticket"},
            "annotations": {
                "summary": f"{where}: KEDA reads its metric as empty while requests come in",
                "description": (
                    f"KEDA's Prometheus query for {where} answered empty {count} "
                    f"time(s) in the last {KEDA_WINDOW} while the service had requests: KEDA "
                    "reads empty as 0 and the HPA scales the predictor down under load. Most "
                    "likely its query's window holds fewer than two scrapes (`invoke status` "
                    "says so), which `invoke deploy` fixes."
                ),
            },
        },
    ]


def _training_alerts() -> list[dict[str, Any]]:
    failed = f'{tm.OPERATOR_JOBS_FAILED}{{framework="{tm.OPERATOR_FRAMEWORK}"}}'
    w = FAILED_WINDOW
    # A counter's first failure in a namespace appears as a new series at 1, which
    # increase() does not see: count it when its target was scraped a window ago.
    first = f"({failed} unless {failed} offset {w}) and on (instance, job) (up offset {w})"
    counted = (
        f"  sum by (job_namespace) (increase({failed}[{w}]) > 0)\n"
        f"  or\n  sum by (job_namespace) ({first})"
    )
    steps, running = tm.STEPS_TOTAL, tm.TRAINING
    count = '{{ printf "%.0f" $value }}'
    return [
        {
            "alert": TFJOB_FAILED,
            "expr": f'label_replace(\n{counted},\n  "namespace", "$1", "job_namespace", "(.*)"\n)',
            "labels": {"severity": "ticket"},
            "annotations": {
                "summary": "{{ $labels.namespace }}: a TFJob failed",
                "description": (
                    f"The training operator counted {count} failed TFJob(s) in namespace "
                    f"{{{{ $labels.namespace }}}} in the last {w}. `invoke status` shows "
                    "which; `kubectl -n {{ $labels.namespace }} describe tfjob`."
                ),
            },
        },
        _worker_lost(),
        {
            "alert": "DistmlTrainingStalled",
            "expr": (
                f"(increase({steps}[5m]) == 0)\nand on (namespace, {tm.JOB_LABEL}, replica)\n"
                f"({running} == 1)"
            ),
            "for": "10m",
            "labels": {"severity": "ticket"},
            "annotations": {
                "summary": (
                    "{{ $labels.namespace }}/{{ $labels.tfjob }}: worker {{ $labels.replica }} "
                    "makes no progress"
                ),
                "description": (
                    "Worker {{ $labels.replica }} of TFJob {{ $labels.namespace }}/"
                    "{{ $labels.tfjob }} says it is training but has completed no step for "
                    "15 minutes: a peer stopped or lost (the others wait in their "
                    "collectives), or a hung input pipeline. Its pods' logs."
                ),
            },
        },
    ]


def _worker_lost() -> dict[str, Any]:
    """A worker that was training and is no longer scraped: stopped, hung or gone. A worker
    that finishes says so first (its pod lingers: ``k8s.manifests.pods``), and its last
    reading is 0; a restarted one comes back within ``for``."""
    running, by = tm.TRAINING, f"namespace, {tm.JOB_LABEL}, replica"
    return {
        "alert": "DistmlTrainingWorkerLost",
        "expr": (f"last_over_time({running}[{LOST_WINDOW}]) == 1\nunless on ({by})\n{running}"),
        "for": "5m",
        "labels": {"severity": "ticket"},
        "annotations": {
            "summary": (
                "{{ $labels.namespace }}/{{ $labels.tfjob }}: worker {{ $labels.replica }} "
                "stopped answering while training"
            ),
            "description": (
                "Worker {{ $labels.replica }} of TFJob {{ $labels.namespace }}/"
                "{{ $labels.tfjob }} was training and has not been scraped for 5 minutes: "
                "its process stopped or hung (a one-worker job has no peer to stall "
                "instead), or its pod went without finishing. `invoke status`; its pod's "
                "logs and events."
            ),
        },
    }


def groups(namespace_only: bool = False) -> list[dict[str, Any]]:
    """The rule groups, in Prometheus's ``rule_files`` format; ``namespace_only``: without
    the alerts of :data:`OTHER_NAMESPACES`."""
    rate = f"sum by ({BY}) (rate({sm.REQUESTS_TOTAL}{{{SERVED}}}[{BASE_WINDOW}]))"
    bases = [r for slo in SLOS for r in slo.rate_records()]
    short = [
        *_recording(SHORT_WINDOWS),
        {"record": REQUEST_RATE, "expr": rate},
        *bases,
        *_by_version(),
    ]
    long = [w for w in WINDOWS if w not in SHORT_WINDOWS]
    serving, training = _serving_alerts(), _training_alerts()
    if namespace_only:
        serving = [r for r in serving if r["alert"] not in OTHER_NAMESPACES]
        training = [r for r in training if r["alert"] not in OTHER_NAMESPACES]
    return [
        {"name": "distml-slo-short-windows", "rules": short},
        {"name": "distml-slo-long-windows", "interval": LONG_INTERVAL, "rules": _recording(long)},
        {
            "name": "distml-slo-alerts",
            "rules": [_burn_alert(slo, burn) for slo in SLOS for burn in BURNS],
        },
        {"name": "distml-serving-alerts", "rules": serving},
        {"name": "distml-training-alerts", "rules": training},
    ]


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the expressions) as literal blocks, as a person writes them."""


def _str(dumper: yaml.SafeDumper, text: str) -> yaml.Node:
    style = "|" if "\n" in text else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


_Dumper.add_representer(str, _str)

HEADER = (
    "# distml's Prometheus rules: SLO recording rules and alerts (docs/monitoring.md#alerts).\n"
    "# Generated by `python -m k8s.monitoring.rules` from k8s/monitoring/rules.py: do not edit.\n"
)


def render() -> str:
    body = yaml.dump({"groups": groups()}, Dumper=_Dumper, sort_keys=False, width=1000)
    return HEADER + body


def main(argv: Sequence[str] | None = None) -> int:
    return generated_file.main(PATH, render(), "python -m k8s.monitoring.rules", __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
