"""runtime/cluster/status.py on a shared cluster: an operator whose namespace this user
may not read (HTTP 403) is said as forbidden and found (or not) by API discovery; an API
server that does not answer is still "not reachable"."""

from __future__ import annotations

import pytest

from k8s.client.kube import KubeError
from runtime.cluster.status import _in_cluster
from tests.support.cluster_kit import make_ctx, runtime

FORBIDDEN = KubeError(
    'get Deployment kubeflow/training-operator failed: deployments.apps "training-operator" '
    'is forbidden: User "alice" cannot get resource "deployments" in the namespace "kubeflow"',
    status=403,
)


def rows(wd, fake) -> dict[str, str]:
    cx = runtime(make_ctx(fake, {}), wd, fake).cx
    return dict(_in_cluster(cx, "standard", argo=False))


def test_a_forbidden_operator_found_by_api_discovery_is_said_so(wd, fake):
    fake.serve_kind("kubeflow.org/v1", "TFJob")
    fake.fail("get", FORBIDDEN)
    assert rows(wd, fake)["training operator"] == (
        "cannot be read here (forbidden); found by API discovery (kubeflow.org/v1 TFJob served)"
    )


def test_a_forbidden_operator_not_served_is_not_found_by_discovery(wd, fake):
    fake.fail("get", FORBIDDEN)
    assert rows(wd, fake)["training operator"] == (
        "cannot be read here (forbidden); not found by API discovery "
        "(kubeflow.org/v1 TFJob not served)"
    )


@pytest.mark.parametrize("status", [None, 503], ids=["unreachable", "5xx"])
def test_an_api_that_does_not_answer_is_not_reachable(wd, fake, status):
    fake.fail(
        "get", KubeError("get Deployment kubeflow/training-operator: timed out", status=status)
    )
    found = rows(wd, fake)
    assert found == {"cluster API": "not reachable: get Deployment kubeflow/training-operator: "
                     "timed out"}  # fmt: skip
