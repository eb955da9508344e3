"""k8s.monitoring.prometheus_operator against the Prometheus Operator's CRDs at the pinned
release (k8s/install/upstream.lock.json; where they cannot be had, made from the operator's
Go module by integration/kindbuild/operatorcrds.py, about a minute once: a process, so
``--fast`` skips these there): every object strictly valid, and a misspelt field is not."""

from __future__ import annotations

import copy

import pytest

from k8s.install import versions
from k8s.monitoring import prometheus_operator as po
from k8s.providers.settings import Settings
from tests.support import k8s_schemas

GROUP = "monitoring.coreos.com"


def objects() -> list[dict]:
    return po.operator_objects(Settings(image="distml:0123456789ab", namespace="team-a"))


@pytest.mark.parametrize("kind", sorted(versions.PROMETHEUS_OPERATOR_CRDS))
def test_the_crd_is_the_pinned_release_s_and_serves_v1(kind: str) -> None:
    crd = k8s_schemas.crd(GROUP, kind)
    annotations = crd["metadata"]["annotations"]
    version = versions.PROMETHEUS_OPERATOR_VERSION.removeprefix("v")
    assert annotations["operator.prometheus.io/version"] == version
    assert [v["name"] for v in crd["spec"]["versions"] if v["served"]] == ["v1"]
    assert po.API_VERSION.split("/") == [GROUP, "v1"]


def test_every_object_is_strictly_valid() -> None:
    for obj in objects():
        assert k8s_schemas.validate(obj) == [], obj["metadata"]["name"]


def test_a_misspelt_or_misplaced_field_is_refused() -> None:
    monitor, _, rule = objects()
    bad = copy.deepcopy(monitor)
    bad["spec"]["podMetricsEndpoints"][0]["relabelings"][1]["target_label"] = "isvc"
    assert any("target_label" in e for e in k8s_schemas.validate(bad))
    bad = copy.deepcopy(monitor)
    bad["spec"]["podMetricsEndpoints"][0]["portNumber"] = "8080"
    assert k8s_schemas.validate(bad) != []
    bad = copy.deepcopy(rule)
    bad["spec"]["groups"][0]["rules"][0]["recorded"] = "x"
    assert any("recorded" in e for e in k8s_schemas.validate(bad))
