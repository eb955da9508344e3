"""k8s.monitoring.prometheus_operator against the Prometheus Operator's CRDs at the pinned
release (k8s/install/upstream.lock.json; where they cannot be had, made from the operator's
Go module by integration/kindbuild/operatorcrds.py, about a minute once: a process, so
``--fast`` skips these there), and its Roles against the pinned Kubernetes: every object
strictly valid, whatever the options, and a misspelt field is not."""

from __future__ import annotations

import copy

import pytest

from k8s.install import versions
from k8s.monitoring import prometheus_operator as po
from k8s.providers.settings import Settings
from tests.support import k8s_schemas

GROUP = "monitoring.coreos.com"


#: The options each shape the objects: every flag of `render --prometheus-operator`.
OPTIONS = {
    "defaults": po.OperatorOptions(),
    "release": po.OperatorOptions(release="kube-prometheus-stack"),
    "namespace only": po.OperatorOptions(namespace_only=True),
    "another account": po.OperatorOptions(prometheus_sa="observability/prom"),
}


def objects(options: po.OperatorOptions | None = None) -> list[dict]:
    s = Settings(image="distml:0123456789ab", namespace="team-a", serving_mode="standard")
    return po.operator_objects(s, options)


def by_kind(kind: str) -> list[dict]:
    return [o for o in objects() if o["kind"] == kind]


@pytest.mark.parametrize("kind", sorted(versions.PROMETHEUS_OPERATOR_CRDS))
def test_the_crd_is_the_pinned_release_s_and_serves_v1(kind: str) -> None:
    crd = k8s_schemas.crd(GROUP, kind)
    annotations = crd["metadata"]["annotations"]
    version = versions.PROMETHEUS_OPERATOR_VERSION.removeprefix("v")
    assert annotations["operator.prometheus.io/version"] == version
    assert [v["name"] for v in crd["spec"]["versions"] if v["served"]] == ["v1"]
    assert po.API_VERSION.split("/") == [GROUP, "v1"]


@pytest.mark.parametrize("options", list(OPTIONS.values()), ids=list(OPTIONS))
def test_every_object_is_strictly_valid(options: po.OperatorOptions) -> None:
    found = objects(options)
    assert {o["kind"] for o in found} >= {"PodMonitor", "PrometheusRule"}
    for obj in found:
        assert k8s_schemas.validate(obj) == [], (obj["kind"], obj["metadata"]["name"])


def test_both_service_monitors_are_strictly_valid() -> None:
    monitors = by_kind("ServiceMonitor")
    assert [m["metadata"]["name"] for m in monitors] == [po.TRAINING_OPERATOR, po.KEDA]
    for monitor in monitors:
        assert k8s_schemas.validate(monitor) == [], monitor["metadata"]["name"]
    bad = copy.deepcopy(monitors[1])
    bad["spec"]["endpoints"][0]["honor_labels"] = True
    assert any("honor_labels" in e for e in k8s_schemas.validate(bad))
    bad = copy.deepcopy(monitors[1])
    bad["spec"]["endpoints"][0]["honorLabels"] = "true"
    assert k8s_schemas.validate(bad) != []


def test_a_misspelt_or_misplaced_field_is_refused() -> None:
    monitor, rule = by_kind("PodMonitor")[0], by_kind("PrometheusRule")[0]
    bad = copy.deepcopy(monitor)
    bad["spec"]["podMetricsEndpoints"][0]["relabelings"][1]["target_label"] = "isvc"
    assert any("target_label" in e for e in k8s_schemas.validate(bad))
    bad = copy.deepcopy(monitor)
    bad["spec"]["podMetricsEndpoints"][0]["portNumber"] = "8080"
    assert k8s_schemas.validate(bad) != []
    bad = copy.deepcopy(rule)
    bad["spec"]["groups"][0]["rules"][0]["recorded"] = "x"
    assert any("recorded" in e for e in k8s_schemas.validate(bad))
