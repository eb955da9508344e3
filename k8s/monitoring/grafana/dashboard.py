"""distml's Grafana dashboard of the model service, generated: every panel's PromQL is
``ml/contract/serving_metrics.py``'s (one source of truth with ``invoke status``, the load
test's server-side view and KEDA's triggers), for the template variables ``$namespace``
and ``$isvc``.

    python -m k8s.monitoring.grafana.dashboard          # write distml-dashboard.json beside it
    python -m k8s.monitoring.grafana.dashboard --check  # exit 1 when the committed file differs

The JSON imports as it is (Grafana: Dashboards > New > Import) and provisions from a
file or a sidecar's ConfigMap as it is: the Prometheus is the template variable
``$datasource`` (any Prometheus datasource; no ``__inputs``, which provisioning does not
fill), and every window is ``$__rate_interval`` (four of that Prometheus's scrapes).
Pure: no I/O but ``main``'s.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from common import generated_file
from ml.contract import serving_metrics as sm
from ml.contract import training_metrics as tm

PATH = Path(__file__).with_name("distml-dashboard.json")
UID = "distml-serving"
# A datasource template variable, not an ``__inputs`` placeholder: file and sidecar
# provisioning do not fill ``__inputs`` (grafana/grafana#10786).
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
VARIABLES = ("namespace", "isvc")  # query variables; ``$datasource`` is the Prometheus
NS, ISVC = "$namespace", "$isvc"  # what the queries are built for
#: The series whose namespaces ``$namespace`` lists: serving's and training's.
NAMESPACES = f'{{__name__=~"{sm.REQUESTS_TOTAL}|{tm.TRAINING}"}}'
# Grafana's window of four scrapes (or more at a coarse step): the Prometheus's own interval.
RATE = "$__rate_interval"
WIDTH, HEIGHT = 12, 8  # a panel's share of Grafana's 24-column grid


def _target(expr: str, legend: str, ref: str) -> dict[str, Any]:
    return {"datasource": DATASOURCE, "expr": expr, "legendFormat": legend, "refId": ref}


def _panel(
    title: str, kind: str, targets: list[tuple[str, str]], unit: str, description: str
) -> dict[str, Any]:
    return {
        "type": kind,
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "targets": [_target(e, legend, chr(ord("A") + i)) for i, (e, legend) in enumerate(targets)],
        "fieldConfig": {"defaults": {"unit": unit, "min": 0}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True}},
    }


def _objective_line(panel: dict[str, Any], value: float) -> dict[str, Any]:
    """Draw ``value`` as a red threshold line across a time series panel."""
    defaults = panel["fieldConfig"]["defaults"]
    defaults["thresholds"] = {
        "mode": "absolute",
        "steps": [{"color": "green", "value": None}, {"color": "red", "value": value}],
    }
    defaults["custom"] = {"thresholdsStyle": {"mode": "line"}}
    return panel


def _burn_by_version() -> dict[str, Any]:
    targets = [
        (sm.burn_by_version(NS, ISVC, RATE, slo), f"{{{{version}}}} {slo}")
        for slo in ("availability", "latency")
    ]
    return _panel(
        "Error budget burn by version", "timeseries", targets, "short",
        "Each version's bad share over its budget's (5xx: 0.1%; slower than the objective: "
        "1%): at 1 a version spends its budget in exactly 30 days, and the pages fire above "
        "14.4 and 6. What a canary's owner compares.",
    )  # fmt: skip


def panels() -> list[dict[str, Any]]:
    """The service's panels, in reading order (two to a row), then the training row."""
    objective_ms = sm.LATENCY_OBJECTIVE_S * 1000
    latency = _panel(
        f"Latency p50 / p95 / p99 (objective: p99 within {objective_ms:g} ms)",
        "timeseries",
        [(sm.latency_quantile(NS, ISVC, q, RATE), f"p{round(q * 100)}") for q in (0.5, 0.95, 0.99)],
        "s",
        "From a predict or infer request reaching the server to its answer's last byte; the "
        "red line is the objective.",
    )
    found = [
        _panel("Requests per second by status code", "timeseries",
               [(sm.request_rate_by_code(NS, ISVC, RATE), "{{code}}")], "reqps",
               "Predict and infer requests (probes, metadata reads and unknown paths are "
               "not the service's traffic)."),
        _panel("Error ratio (5xx)", "timeseries", [(sm.error_ratio(NS, ISVC, RATE), "5xx")],
               "percentunit", "Predict and infer requests answered 5xx, over all of them."),
        _burn_by_version(),
        _objective_line(latency, sm.LATENCY_OBJECTIVE_S),
        _objective_line(
            _panel(f"Requests within {objective_ms:g} ms", "timeseries",
                   [(sm.within_objective(NS, ISVC, RATE), "within the objective")], "percentunit",
                   "The objective holds while this stays above 99% (the red line)."),
            0.99,
        ),
        _panel("Requests in flight", "timeseries",
               [(sm.concurrency(NS, ISVC, RATE), "averaged (what KEDA reads)"),
                (sm.in_flight(NS, ISVC), "at each scrape")],
               "short", "All predictors together. Averaged: seconds spent answering per "
               "second (Little's law), KEDA's concurrency input; at each scrape: a point "
               "sample."),
        _panel("Replicas (predictor pods scraped and up)", "timeseries",
               [(sm.replicas(NS, ISVC), "replicas")], "short",
               "Predictor pods Prometheus scrapes and finds up."),
        _panel("Model version served", "stat",
               [(sm.model_version(NS, ISVC), "version {{version}}")], "short",
               "Each version served now, and by how many pods."),
    ]  # fmt: skip
    found[-1]["options"] = {
        "textMode": "value_and_name",
        "reduceOptions": {"calcs": ["lastNotNull"]},
    }
    training = training_panels()
    rows = (len(found) + 1) // 2
    header = {"type": "row", "title": TRAINING_ROW, "collapsed": False, "panels": [],
              "gridPos": {"x": 0, "y": rows * HEIGHT, "w": 2 * WIDTH, "h": 1}}  # fmt: skip
    for i, panel in enumerate(found):
        panel["gridPos"] = {"x": (i % 2) * WIDTH, "y": (i // 2) * HEIGHT, "w": WIDTH, "h": HEIGHT}
    for i, panel in enumerate(training):
        y = rows * HEIGHT + 1 + (i // 2) * HEIGHT
        panel["gridPos"] = {"x": (i % 2) * WIDTH, "y": y, "w": WIDTH, "h": HEIGHT}
    every = [*found, header, *training]
    for i, panel in enumerate(every):
        panel["id"] = i + 1
    return every


def training_panels() -> list[dict[str, Any]]:
    """The training row: the namespace's TFJobs as their workers' /metrics show them
    (``ml/contract/training_metrics.py``), and the training operator's restarts."""
    return [
        _panel("Training throughput (examples/s) by job", "timeseries",
               [(tm.throughput(NS, RATE), "{{tfjob}}")], "short",
               "Every worker of a job together: each processes its share of a global batch."),
        _panel("Step time p50 / p99 by job", "timeseries",
               [(tm.step_time_quantile(NS, q, RATE), f"{{{{tfjob}}}} p{round(q * 100)}")
                for q in (0.5, 0.99)], "s",
               "Seconds per training step (a call of several steps at its mean)."),
        _panel("Training loss by job", "timeseries", [(tm.loss(NS), "{{tfjob}}")], "short",
               "As the workers last read it (at their progress lines)."),
        _panel("Scaling efficiency: throughput(N) / (N x throughput(1))", "timeseries",
               [(tm.scaling_efficiency(NS, RATE, "$__range"), "{{tfjob}}")], "percentunit",
               "Per-worker throughput against the best one-worker job of the same model "
               "in the time shown; empty until such a baseline ran (`invoke train "
               "--workers 1`)."),
        _panel("TFJob restarts (training operator)", "stat",
               [(tm.restarts(NS, "$__range"), "restarts")], "short",
               "Restarts the training operator counted in the namespace, in the time shown."),
    ]  # fmt: skip


def _variable(name: str, label: str, query: str) -> dict[str, Any]:
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DATASOURCE,
        "definition": query,
        "query": {"query": query, "refId": f"{name}-values"},
        "refresh": 2,  # on time range change: pods come and go
        "sort": 1,
        "includeAll": False,
        "multi": False,
    }


def variables() -> list[dict[str, Any]]:
    """``$datasource``, any Prometheus Grafana has, then ``$namespace``: a namespace with
    a predictor or a training worker (a namespace that only trained still has its training
    row), and ``$isvc``: the label values of the predictors' request counter."""
    return [
        {
            "name": "datasource",
            "label": "Prometheus",
            "type": "datasource",
            "query": "prometheus",
            "refresh": 1,
            "includeAll": False,
            "multi": False,
        },
        _variable("namespace", "Namespace", f"label_values({NAMESPACES}, namespace)"),
        _variable(
            "isvc",
            "InferenceService",
            f'label_values({sm.REQUESTS_TOTAL}{{namespace="{NS}"}}, isvc)',
        ),
    ]


def dashboard() -> dict[str, Any]:
    """The whole importable dashboard."""
    plugins = sorted({p["type"] for p in panels()})
    return {
        "__requires": [
            {"type": "grafana", "id": "grafana", "name": "Grafana", "version": "10.0.0"},
            {"type": "datasource", "id": "prometheus", "name": "Prometheus", "version": "1.0.0"},
            *({"type": "panel", "id": p, "name": p, "version": ""} for p in plugins),
        ],
        "uid": UID,
        "title": "distml: model service",
        "description": "Requests, errors, latency against the objective, in-flight requests, "
        "replicas and the model version of one InferenceService (generated by "
        "k8s/monitoring/grafana/dashboard.py from ml/contract/serving_metrics.py).",
        "tags": ["distml", "kserve"],
        "editable": True,
        "schemaVersion": 39,
        "version": 1,
        "refresh": "10s",
        "time": {"from": "now-30m", "to": "now"},
        "timezone": "browser",
        "templating": {"list": variables()},
        "annotations": {"list": []},
        "panels": panels(),
    }  # fmt: skip


def render() -> str:
    """The dashboard as the committed file holds it."""
    return json.dumps(dashboard(), indent=2) + "\n"


#: The rows: the service's panels come first, under no row header; then "Training".
SERVICE_ROW, TRAINING_ROW = "Service", "Training"
#: Panels that are rightly empty until something else happened: title -> what.
MAY_BE_EMPTY = {
    "Scaling efficiency: throughput(N) / (N x throughput(1))": "a one-worker baseline job ran",
    "TFJob restarts (training operator)": "the operator restarted a job (its counter's first)",
}


def queries(board: dict[str, Any], row: str | None = None) -> list[tuple[str, str]]:
    """(panel title, expr) of every panel target of ``board`` (of one ``row``), in order."""
    found, current = [], SERVICE_ROW
    for p in board["panels"]:
        if p.get("type") == "row":
            current = p["title"]
        elif row is None or row == current:
            found += [(p["title"], t["expr"]) for t in p.get("targets", [])]
    return found


def values(namespace: str, service: str, scrape_interval_s: float) -> dict[str, str]:
    """What Grafana puts for each variable of the queries, for one service read from a
    Prometheus scraping every ``scrape_interval_s`` (``$__rate_interval``: four scrapes,
    as at a step no longer than one scrape; ``$__range``: the last hour shown)."""
    rate = sm.rate_window(scrape_interval_s)
    return {"namespace": namespace, "isvc": service, RATE.lstrip("$"): rate, "__range": "1h"}


def substitute(expr: str, values: dict[str, str]) -> str:
    """``expr`` with each ``$variable`` (``VARIABLES``) replaced by its value, as Grafana
    does before it sends a query."""
    for name in sorted(values, key=len, reverse=True):
        expr = expr.replace(f"${name}", values[name])
    return expr


_LABEL_VALUES = re.compile(r"label_values\((?P<series>.+), *(?P<label>\w+)\)")
# A series selector: a metric name and its label matchers (quoted values may hold braces).
SELECTOR = re.compile(
    r'(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)\{(?P<matchers>(?:[^}"]|"(?:[^"\\]|\\.)*")*)\}'
)


def variable_queries(board: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(variable, label, PromQL) for each template variable: the query whose series carry
    the values Grafana's ``label_values(series, label)`` lists."""
    found = []
    for var in board["templating"]["list"]:
        if var.get("type") == "datasource":
            continue  # which Prometheus: Grafana's choice, no query
        m = _LABEL_VALUES.fullmatch(var["definition"])
        if m is None:
            raise ValueError(f"variable {var['name']}: not label_values(...): {var['definition']}")
        found.append((var["name"], m["label"], f"count by ({m['label']}) ({m['series']})"))
    return found


_MATCHER = re.compile(r'(?P<label>\w+)\s*(?P<op>=~|!=|!~|=)\s*"(?P<value>(?:[^"\\]|\\.)*)"')
#: The labels whose matchers say which service's series a selector reads: each metric the
#: dashboard reads must have series with them. Others (``code=~"5.."``) may rightly match
#: nothing (no 5xx yet).
WHOSE = ("job", *VARIABLES)


def series_read(expr: str) -> list[str]:
    """Each series selector of ``expr`` cut to its metric and the matchers on ``WHOSE``:
    the series the panel reads, which must exist for it to show anything."""
    found = []
    for m in SELECTOR.finditer(expr):
        kept = [
            f'{x["label"]}{x["op"]}"{x["value"]}"'
            for x in _MATCHER.finditer(m["matchers"])
            if x["label"] in WHOSE
        ]
        selector = f"{m['name']}{{{','.join(kept)}}}"
        if selector not in found:
            found.append(selector)
    return found


def main(argv: Sequence[str] | None = None) -> int:
    prog = "python -m k8s.monitoring.grafana.dashboard"
    return generated_file.main(PATH, render(), prog, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
