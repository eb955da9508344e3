"""k8s.monitoring.prometheus_operator's ServiceMonitors: each selects exactly the Service the
pinned install file defines for the component's metrics (training-operator v1.9.0's
standalone overlay, KEDA v2.20.2's file), in its namespace, on a port that reaches the
container's metrics port; once the Operator has made a scrape job of it (its relabelling,
transcribed in integration/operator_config.py, run here), the series keep the labels
DistmlTFJobFailed and the KEDA alerts group by."""

from __future__ import annotations

import re
from typing import Any

import pytest

from k8s.install import versions
from k8s.install.operator_check import PROBES
from k8s.monitoring import prometheus_operator as po
from k8s.monitoring import rules, stack
from k8s.providers.settings import Settings
from ml.contract import training_metrics as tm
from tests.support.relabel import (
    honor_labels,
    relabel,
    scraped,
    sd_endpoint_target,
    service_monitor_relabelings,
)
from tests.support.upstream import objects, selector_matches

NS = "team-a"
#: monitor name → (the pinned install file's URL, the PROBES key of its install).
COMPONENTS = {
    po.TRAINING_OPERATOR: (versions.TRAINING_OPERATOR_KUSTOMIZE, "training_operator"),
    po.KEDA: (versions.KEDA_URL, "keda"),
}


def monitor(name: str) -> dict[str, Any]:
    s = Settings(image="distml:0123456789ab", namespace=NS, serving_mode="standard")
    (found,) = [o for o in po.operator_objects(s) if o["metadata"]["name"] == name]
    return found


def service_of(name: str) -> dict[str, Any]:
    """The one Service of the install file the monitor selects, in the monitor's namespace."""
    m = monitor(name)
    url, _ = COMPONENTS[name]
    selected = [
        o
        for o in objects(url)
        if o["kind"] == "Service"
        and o["metadata"].get("namespace") == m["metadata"]["namespace"]
        and selector_matches(m["spec"]["selector"], o["metadata"].get("labels") or {})
    ]
    assert len(selected) == 1, [o["metadata"]["name"] for o in selected]
    return selected[0]


def target(name: str, port_name: str) -> dict[str, str]:
    svc = service_of(name)
    return sd_endpoint_target(
        svc["metadata"]["name"],
        port_name,
        service_labels=svc["metadata"]["labels"],
        pod=f"{svc['metadata']['name']}-5d8f7c-x2x9q",
        namespace=svc["metadata"]["namespace"],
    )


@pytest.mark.parametrize("name", list(COMPONENTS))
def test_each_selects_its_component_s_service_in_its_install_s_namespace(name: str) -> None:
    _, probe = COMPONENTS[name]
    svc = service_of(name)
    assert monitor(name)["metadata"]["namespace"] == PROBES[probe].namespace
    assert svc["metadata"]["name"] == PROBES[probe].deployment  # what stack's job names


@pytest.mark.parametrize("name", list(COMPONENTS))
def test_its_port_reaches_the_metrics_port_distml_s_own_prometheus_scrapes(name: str) -> None:
    """The port by name, as the Service has it; its targetPort is a port of the pods the
    Service selects (the Deployment's container port), the one distml's own job scrapes."""
    (endpoint,) = monitor(name)["spec"]["endpoints"]
    svc = service_of(name)
    (port,) = [p for p in svc["spec"]["ports"] if p.get("name") == endpoint["port"]]
    own = {po.TRAINING_OPERATOR: stack.OPERATOR_METRICS_PORT, po.KEDA: stack.KEDA_METRICS_PORT}
    assert port["port"] == own[name] and endpoint["path"] == po.METRICS_PATH
    url, _ = COMPONENTS[name]
    (deployment,) = [
        o
        for o in objects(url)
        if o["kind"] == "Deployment"
        and selector_matches({"matchLabels": svc["spec"]["selector"]},
                             o["spec"]["template"]["metadata"]["labels"])
    ]  # fmt: skip
    container_ports = [
        p["containerPort"] for c in deployment["spec"]["template"]["spec"]["containers"]
        for p in c.get("ports", [])
    ]  # fmt: skip
    assert port["targetPort"] in container_ports


@pytest.mark.parametrize(
    ("name", "other_port"),
    [(po.TRAINING_OPERATOR, "webhook-server"), (po.KEDA, "metricsservice")],
    ids=["the training operator", "KEDA"],
)
def test_the_metrics_port_is_scraped_and_the_service_s_other_port_is_not(
    name: str, other_port: str
) -> None:
    m = monitor(name)
    port = m["spec"]["endpoints"][0]["port"]
    kept = relabel(service_monitor_relabelings(m), target(name, port))
    svc = service_of(name)["metadata"]
    assert kept is not None
    assert {k: kept[k] for k in ("namespace", "service", "job", "endpoint")} == {
        "namespace": svc["namespace"],
        "service": svc["name"],
        "job": svc["name"],
        "endpoint": port,
    }
    assert relabel(service_monitor_relabelings(m), target(name, other_port)) is None


def _by(expr: str, metric: str) -> set[str]:
    """The labels ``expr`` sums ``metric`` by."""
    found = re.search(rf"sum by \(([^)]*)\) \(increase\({re.escape(metric)}", expr)
    assert found, (metric, expr)
    return {label.strip() for label in found.group(1).split(",")}


def _alert(name: str) -> dict[str, Any]:
    return next(r for g in rules.groups() for r in g["rules"] if r.get("alert") == name)


def test_keda_s_series_keep_the_scaled_object_s_namespace_as_its_alerts_need() -> None:
    m = monitor(po.KEDA)
    assert honor_labels(m) is True
    at = relabel(service_monitor_relabelings(m), target(po.KEDA, stack.KEDA_METRICS_PORT_NAME))
    assert at is not None and at["namespace"] == "keda"
    errors = {"namespace": NS, "scaledObject": "tf-mnist-predictor", "scaler": "prometheusScaler",
              "triggerIndex": "0", "metric": "s0-prometheus", "type": "scaledobject"}  # fmt: skip
    series = scraped(errors, at, honor_labels(m))
    assert series["namespace"] == NS and "exported_namespace" not in series
    assert _by(_alert(rules.KEDA_SCALER_ERRORS)["expr"], rules.KEDA_ERRORS) <= set(series)
    empty = {"namespace": NS, "scaledResource": "tf-mnist-predictor", "scaler": "prometheusScaler",
             "triggerIndex": "0", "metric": "s0-prometheus", "type": "scaledobject"}  # fmt: skip
    series = scraped(empty, at, honor_labels(m))
    assert _by(_alert(rules.KEDA_METRIC_EMPTY)["expr"], rules.KEDA_EMPTY) <= set(series)
    assert series["namespace"] == NS
    # Without honorLabels the target's namespace would win: the alerts could not name it.
    assert scraped(errors, at, False)["exported_namespace"] == NS


def test_the_training_operator_s_failures_keep_the_tfjob_s_namespace() -> None:
    m = monitor(po.TRAINING_OPERATOR)
    assert honor_labels(m) is False  # its series carry job_namespace, no clashing label
    port = stack.OPERATOR_METRICS_PORT_NAME
    at = relabel(service_monitor_relabelings(m), target(po.TRAINING_OPERATOR, port))
    assert at is not None
    failed = {"job_namespace": NS, "framework": tm.OPERATOR_FRAMEWORK}
    series = scraped(failed, at, honor_labels(m))
    assert {k: series[k] for k in failed} == failed
    assert not any(k.startswith("exported_") for k in series)
    selected = f'{tm.OPERATOR_JOBS_FAILED}{{framework="{tm.OPERATOR_FRAMEWORK}"}}'
    assert _by(_alert(rules.TFJOB_FAILED)["expr"], selected) <= set(series)


def test_keda_is_watched_in_standard_mode_only_as_distml_s_own_prometheus_does() -> None:
    def names(mode: str) -> list[str]:
        s = Settings(image="x", namespace=NS, serving_mode=mode)
        return [o["metadata"]["name"] for o in po.operator_objects(s) if o["kind"] != "Role"]

    assert po.KEDA in names("standard") and po.KEDA not in names("knative")
    assert po.TRAINING_OPERATOR in names("knative")
