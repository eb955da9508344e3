"""k8s/install/versions.py: the pins agree with each other and with what the offline kind build
makes, and its docstring says truly where they have run."""

from __future__ import annotations

import re
from pathlib import Path

from integration.kindbuild import pins
from k8s.install import versions

REPO = Path(__file__).resolve().parents[3]


def _numbers(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", version))


def test_the_docstring_says_the_kind_path_runs_here_and_names_real_paths():
    doc = " ".join(versions.__doc__.split())
    assert "no Kubernetes can run" not in doc
    assert "python -m integration.kindbuild" in doc
    assert "nox -s integration -- standard --offline" in doc
    named = re.findall(r"[\w/]+/[\w.]+\.(?:py|md)", doc)
    assert named and [p for p in named if not (REPO / p).is_file()] == []


def test_every_kubernetes_pin_is_the_same_minor():
    images = (versions.KIND_NODE_IMAGE, versions.K3S_IMAGE)
    minors = {_numbers(v.rsplit(":", 1)[1])[:2] for v in images}
    minors.add(_numbers(versions.MINIKUBE_KUBERNETES_VERSION)[:2])
    assert minors == {_numbers(versions.KUBERNETES_VERSION)}


def test_the_kind_cli_built_is_the_one_the_preflight_asks_for():
    assert _numbers(versions.KIND_VERSION) == versions.MIN_KIND
    assert pins.KIND == versions.KIND_VERSION


def test_the_minikube_built_is_the_one_the_preflight_asks_for_at_the_same_kubernetes():
    assert _numbers(versions.MINIKUBE_VERSION) == versions.MIN_MINIKUBE
    assert pins.MINIKUBE == versions.MINIKUBE_VERSION
    assert pins.KUBERNETES == versions.MINIKUBE_KUBERNETES_VERSION  # its node's binaries


def test_the_offline_node_holds_the_controllers_at_these_versions():
    assert pins.TRAINING_OPERATOR == versions.TRAINING_OPERATOR_REF
    assert pins.KSERVE == versions.KSERVE_VERSION
    assert pins.CERT_MANAGER == versions.CERT_MANAGER_VERSION
    assert pins.METRICS_SERVER == versions.METRICS_SERVER_VERSION
    assert pins.ARGO_TAG == versions.ARGO_WORKFLOWS_VERSION  # the tags the manifest names


def test_the_offline_node_holds_the_monitoring_images_the_manifests_name():
    assert pins.PROMETHEUS_IMAGE == versions.PROMETHEUS_IMAGE
    assert versions.PROMETHEUS_IMAGE.endswith(":" + versions.PROMETHEUS_VERSION)
    assert pins.ALERTMANAGER_IMAGE == versions.ALERTMANAGER_IMAGE
    assert pins.ALERTMANAGER == versions.ALERTMANAGER_VERSION  # its module is the release
    assert versions.ALERTMANAGER_IMAGE.endswith(":" + versions.ALERTMANAGER_VERSION)
    assert pins.KEDA == "v" + versions.KEDA_VERSION and pins.KEDA_TAG == versions.KEDA_VERSION
    assert f"/v{versions.KEDA_VERSION}/keda-{versions.KEDA_VERSION}.yaml" in versions.KEDA_URL


def test_the_operator_crds_are_made_from_the_release_they_are_pinned_at():
    assert pins.PROMETHEUS_OPERATOR == versions.PROMETHEUS_OPERATOR_VERSION
    for url in versions.PROMETHEUS_OPERATOR_CRDS.values():
        assert f"/prometheus-operator/{versions.PROMETHEUS_OPERATOR_VERSION}/" in url
