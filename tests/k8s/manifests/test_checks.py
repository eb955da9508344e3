"""k8s.manifests.checks: bad settings and model lists are refused with what to change (by
``check_settings`` and by ``cluster_objects`` itself), good ones pass, model order is kept."""

from __future__ import annotations

import dataclasses

import pytest

from k8s import manifests as m
from tests.support.manifests_kit import settings


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"provider": "minikub"}, "unknown provider 'minikub'; valid: k3d, kind, minikube"),
        ({"serving_mode": "serverless"}, "unknown serving mode"),
        ({"predictor": "triton"}, "unknown predictor"),
        ({"profile": "fast"}, "unknown profile"),
        ({"workers": 0}, "workers must be at least 1"),
        ({"gpus_per_worker": -1}, "gpus per worker"),
        ({"min_replicas": 5, "max_replicas": 2}, r"min replicas \(5\) is more than max"),
        ({"max_replicas": 0, "min_replicas": 0}, "max replicas must be at least 1"),
        ({"target": 0}, "target must be at least 1"),
        ({"serving_mode": "standard", "min_replicas": 0}, "cannot scale to zero"),
        ({"epochs": 0}, "epochs must be at least 1"),
        ({"ingress_node_port": 8080}, "NodePort range"),
        ({"service": "TF_mnist"}, "must start with a letter"),
        ({"service": "s" * 48}, "at most 47"),
        ({"namespace": "-x"}, "DNS-1123"),
        ({"volume_size": "5 GB"}, "not a Kubernetes quantity"),
        ({"image": "distml"}, "no tag"),
        ({"image": "registry:5000/distml"}, "no tag"),
        ({"image": "distml:latest"}, ":latest"),
        (
            {"provider": "existing", "namespace": "kubeflow"},
            "namespace kubeflow is the training operator's own namespace.*`distml`",
        ),
        ({"provider": "existing", "namespace": "kube-system"}, "Kubernetes' own namespace"),
        ({"provider": "existing", "namespace": "kserve"}, "KServe's controller's own"),
        ({"provider": "existing", "namespace": "argo"}, "Argo Workflows' own"),
    ],
)
def test_check_settings_rejects(overrides, message) -> None:
    s = dataclasses.replace(settings(), **overrides)
    with pytest.raises(ValueError, match=message):
        m.check_settings(s)
    with pytest.raises(ValueError, match=message):
        m.cluster_objects(s, models=["cnn"])


def test_check_settings_accepts_the_defaults_and_digests() -> None:
    m.check_settings(settings())
    # On the clusters distml makes, kubeflow is distml's namespace (and the default).
    for provider in ("k3d", "kind", "minikube"):
        m.check_settings(settings(provider=provider, namespace=m.TRAINING_OPERATOR_NAMESPACE))
    m.check_settings(settings(provider="existing", namespace="ml-team"))
    m.check_settings(settings(provider="existing", namespace="kube-systems"))  # not a system one


def test_every_system_namespace_is_refused_on_an_existing_cluster() -> None:
    from k8s.manifests.names import SYSTEM_NAMESPACES

    assert set(SYSTEM_NAMESPACES) >= {
        "kube-system",
        "kube-public",
        "kube-node-lease",
        "kubeflow",
        "kserve",
        "cert-manager",
        "istio-system",
        "knative-serving",
        "keda",
        "argo",
    }
    for ns in SYSTEM_NAMESPACES:
        with pytest.raises(ValueError, match=f"namespace {ns} is .* own"):
            m.check_settings(settings(provider="existing", namespace=ns))
    m.check_settings(dataclasses.replace(settings(), image="r:5000/distml@sha256:" + "a" * 64))
    m.check_settings(settings(min_replicas=0, max_replicas=1))


@pytest.mark.parametrize(
    ("models", "message"),
    [
        (["cnn", "resnet"], "unknown model type.*'resnet'.*valid: cnn, cnn_dropout, cnn_batchnorm"),
        ([], "no model given"),
        ("cnn", "not the string"),
        (["cnn", "cnn"], "given twice: cnn"),
    ],
)
def test_check_models_rejects(models, message) -> None:
    with pytest.raises(ValueError, match=message):
        m.check_models(models)


def test_check_models_keeps_order() -> None:
    assert m.check_models(iter(["cnn_batchnorm", "cnn"])) == ("cnn_batchnorm", "cnn")
