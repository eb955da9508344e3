"""k8s.client.kubectl_errors.classify_kubectl_error: which kubectl failures `up` retries until its
deadline and which stop it at once, table-driven with kubectl's real messages."""

from __future__ import annotations

import pytest

from k8s.client.kubectl_errors import classify_kubectl_error

TRANSIENT = [
    # An API-server blip during client-side validation: contains "error validating" too.
    'error: error validating "https://github.com/kserve/kserve/releases/download/v0.20.0/'
    'kserve.yaml": error validating data: failed to download openapi: Get "https://127.0.0.1:'
    '6443/openapi/v2?timeout=32s": dial tcp 127.0.0.1:6443: connect: connection refused; if '
    "you choose to ignore these errors, turn validation off with --validate=false",
    "The connection to the server 127.0.0.1:6443 was refused - did you specify the right host "
    "or port?",
    "Unable to connect to the server: dial tcp 127.0.0.1:6443: i/o timeout",
    "Error from server (ServiceUnavailable): the server is currently unable to handle the request",
    'Error from server (InternalError): error when creating "https://github.com/kserve/kserve/'
    'releases/download/v0.20.0/kserve.yaml": Internal error occurred: failed calling webhook '
    '"webhook.cert-manager.io": failed to call webhook: Post "https://cert-manager-webhook.'
    'cert-manager.svc:443/validate?timeout=30s": no endpoints available for service '
    '"cert-manager-webhook"',
    'Error from server (InternalError): error when creating "STDIN": Internal error occurred: '
    'failed calling webhook "validator.tfjob.training-operator.kubeflow.org": failed to call '
    'webhook: Post "https://training-operator.kubeflow.svc:443/validate-kubeflow-org-v1-tfjob'
    '?timeout=10s": tls: failed to verify certificate: x509: certificate signed by unknown '
    "authority",
    "something kubectl never said before",  # unknown: retried, never given up early
]
PERMANENT = [
    "error: no objects passed to apply",  # a label selector that selects nothing
    'error: unable to read URL "https://github.com/knative/net-istio/releases/download/'
    'knative-v9.9.9/istio.yaml", server reported 404 Not Found, status code=404',
    "error: unknown flag: --server-sidee",
    "error: unknown shorthand flag: 'x' in -x",
    'error: error validating "kserve.yaml": error validating data: ValidationError('
    'Deployment.spec): unknown field "replica" in io.k8s.api.apps.v1.DeploymentSpec; if you '
    "choose to ignore these errors, turn validation off with --validate=false",
    'Error from server (BadRequest): error when creating "STDIN": TFJob in version "v1" '
    'cannot be handled as a TFJob: strict decoding error: unknown field "spec.replicas"',
    "error: error parsing https://example.com/x.yaml: error converting YAML to JSON: yaml: "
    "line 3: mapping values are not allowed in this context",
    'Error from server (Forbidden): error when creating "STDIN": admission webhook '
    '"validator.tfjob.training-operator.kubeflow.org" denied the request: TFJob name is invalid',
]


@pytest.mark.parametrize("message", TRANSIENT)
def test_transient_failures_are_retried(message):
    assert classify_kubectl_error(message) == "transient"


@pytest.mark.parametrize("message", PERMANENT)
def test_schema_field_and_selection_errors_fail_at_once(message):
    assert classify_kubectl_error(message) == "permanent"


def test_kinds_not_served_yet_get_a_few_tries():
    message = (
        'error: resource mapping not found for name: "tf-mnist" namespace: "kubeflow" from '
        '"STDIN": no matches for kind "InferenceService" in version "serving.kserve.io/v1beta1"'
        "\nensure CRDs are installed first"
    )
    assert classify_kubectl_error(message) == "no-match"
