"""runtime/cluster/status.py on a shared cluster: an operator whose namespace this user
may not read (HTTP 403) is said as forbidden and found (or not) by API discovery; TFJobs,
the InferenceService or its pods this user may not read are a row naming the missing
right, and the rest of the status still prints; an API server that does not answer is
still "not reachable"."""

from __future__ import annotations

import re

import pytest

from k8s.client.kube import KubeError
from runtime.cluster.status import _in_cluster
from tests.runtime.cluster.test_existing_up import NS
from tests.runtime.cluster.test_status_existing import deploy, shared
from tests.runtime.cluster.test_tenants import run
from tests.support.cluster_kit import make_ctx, runtime

FORBIDDEN = KubeError(
    'get Deployment kubeflow/training-operator failed: deployments.apps "training-operator" '
    'is forbidden: User "alice" cannot get resource "deployments" in the namespace "kubeflow"',
    status=403,
)


def rows(wd, fake) -> dict[str, str]:
    cx = runtime(make_ctx(fake, {}), wd, fake).cx
    found, _theirs = _in_cluster(cx, "standard", argo=False)
    return dict(found)


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


def forbid(fake, method: str, kind: str, status: int | None = 403) -> None:
    """``method`` (get, list) of ``kind`` answered ``status`` (403: forbidden)."""
    real = getattr(fake, method)

    def refused(api, kind_, *args, **kwargs):
        if kind_ == kind:
            raise KubeError(f"{method} {kind_} in {NS}: refused", status=status)
        return real(api, kind_, *args, **kwargs)

    setattr(fake, method, refused)


def deployed_status(fake, wd) -> str:
    """`status` of a work dir that trained `cnn` and deployed it on an existing cluster,
    once ``fake`` has been told what to refuse."""
    lines: list[str] = []
    assert run(fake, wd, lines).status() == 0
    return "\n".join(lines)


@pytest.fixture
def deployed(fake, wd):
    """A work dir that trained `cnn` and deployed it on a shared cluster: the fake."""
    deploy(shared(fake), wd)
    return fake


def test_a_forbidden_tfjob_list_is_a_row_and_the_rest_still_prints(deployed, wd):
    forbid(deployed, "list", "TFJob")
    text = deployed_status(deployed, wd)
    assert re.search(
        rf"TFJobs +list tfjobs\.kubeflow\.org in namespace {NS}: forbidden; "
        r"`invoke access-role` prints the Role to ask for",
        text,
    )
    assert "not reachable" not in text
    assert re.search(r"training operator +available", text)
    assert re.search(r"InferenceService tf-mnist +Ready, http://tf-mnist-ml-team", text)
    assert re.search(r"serving model +version 2: cnn", text)


def test_a_forbidden_inference_service_and_its_pods_are_rows(deployed, wd):
    forbid(deployed, "get", "InferenceService")
    text = deployed_status(deployed, wd)
    assert re.search(
        rf"InferenceService tf-mnist +get inferenceservices\.serving\.kserve\.io in "
        rf"namespace {NS}: forbidden",
        text,
    )
    assert re.search(r"TFJob train-cnn +Succeeded", text)


def test_forbidden_pods_leave_the_replicas_unknown(deployed, wd):
    forbid(deployed, "list", "Pod")
    text = deployed_status(deployed, wd)
    assert re.search(
        r"InferenceService tf-mnist +Ready, \S+, ready replicas unknown \(list pods in "
        rf"namespace {NS}: forbidden",
        text,
    )


@pytest.mark.parametrize("status", [None, 503], ids=["unreachable", "5xx"])
def test_a_tfjob_list_that_is_not_answered_is_not_reachable(deployed, wd, status):
    forbid(deployed, "list", "TFJob", status=status)
    text = deployed_status(deployed, wd)
    assert re.search(r"cluster API +not reachable: list TFJob in \S+: refused", text)
    assert re.search(r"training operator +available", text)  # the rows read before it
    assert "InferenceService tf-mnist" not in text
