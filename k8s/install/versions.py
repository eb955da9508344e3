"""Every version the cluster path pins, in one place.

The kind path runs for real on the machines distml is developed on, which reach no
container registry: ``python -m integration.kindbuild`` builds a kind cluster of
``KIND_NODE_IMAGE``'s Kubernetes (and the ``KIND_VERSION`` CLI) from their Go modules,
with the standard-mode controllers pinned below and Argo inside its node (Argo's code is
v4.0.5's under ``ARGO_WORKFLOWS_VERSION``'s tags: integration/kindbuild/pins.py says
why), and ``nox -s integration -- standard --offline`` and ``nox -s integration_existing
-- --offline`` run distml on it. The monitoring stack's images (``PROMETHEUS_IMAGE``,
``ALERTMANAGER_IMAGE``, KEDA's three) are in that node too, and KEDA's install file, which
cannot be downloaded there, is made from KEDA's module by the same build and pinned by
that rebuild's sha256 (k8s/install/upstream.lock.json's ``made``; docs/testing.md).
minikube (``MINIKUBE_VERSION``) runs on a node the same build makes (``nox -s integration
-- minikube standard --offline``).
Not run here: k3d (k3s cannot be built here), Knative mode (docs/cluster.md). Change a
pin here, and the kind build's in integration/kindbuild/pins.py with it
(tests/k8s/install/test_versions.py holds them equal), then run both sessions.
"""

from __future__ import annotations

# Kubernetes: KServe 0.20 needs >= 1.32. Manifests are validated against this version.
KUBERNETES_VERSION = "1.33"
K3S_IMAGE = "rancher/k3s:v1.33.4-k3s1"
KIND_NODE_IMAGE = "kindest/node:v1.33.1"
# The kind CLI the integration build makes from its Go module (integration/kindbuild).
KIND_VERSION = "v0.29.0"
MINIKUBE_KUBERNETES_VERSION = "v1.33.1"
# minikube: v1.36.0's default and newest Kubernetes is v1.33.1 (1.35 would look it up
# online); the offline build makes this release from its Go module (integration/kindbuild).
MINIKUBE_VERSION = "v1.36.0"

# Minimum CLI versions the preflight accepts.
MIN_K3D = (5, 6, 0)
MIN_KIND = (0, 29, 0)  # kindest/node:v1.33.1 is kind v0.29's node image
MIN_MINIKUBE = (1, 36, 0)  # MINIKUBE_VERSION
MIN_KUBECTL = (1, 30, 0)

# Kubeflow Training Operator v1 (TFJob). Never `master`: that is Trainer v2, no TFJob.
# v1.9.0 is the release whose TFJob CRD the tests validate against (../shared/k8s-schemas).
TRAINING_OPERATOR_REF = "v1.9.0"
TRAINING_OPERATOR_KUSTOMIZE = (
    "github.com/kubeflow/training-operator.git/manifests/overlays/standalone"
    f"?ref={TRAINING_OPERATOR_REF}"
)

# KServe and its dependencies.
KSERVE_VERSION = "v0.20.0"
KSERVE_CRDS_URL = (
    f"https://github.com/kserve/kserve/releases/download/{KSERVE_VERSION}/kserve-crds.yaml"
)
KSERVE_URL = f"https://github.com/kserve/kserve/releases/download/{KSERVE_VERSION}/kserve.yaml"
KSERVE_CLUSTER_RESOURCES_URL = (
    f"https://github.com/kserve/kserve/releases/download/{KSERVE_VERSION}/"
    "kserve-cluster-resources.yaml"
)
CERT_MANAGER_VERSION = "v1.17.2"
CERT_MANAGER_URL = (
    "https://github.com/cert-manager/cert-manager/releases/download/"
    f"{CERT_MANAGER_VERSION}/cert-manager.yaml"
)
# Knative Serving and net-istio: the versions KServe v0.20.0 is built and tested against
# (its kserve-deps.env at the tag: Knative Serving 1.21.1).
KNATIVE_VERSION = "knative-v1.21.1"
KNATIVE_SERVING_CRDS_URL = (
    f"https://github.com/knative/serving/releases/download/{KNATIVE_VERSION}/serving-crds.yaml"
)
KNATIVE_SERVING_CORE_URL = (
    f"https://github.com/knative/serving/releases/download/{KNATIVE_VERSION}/serving-core.yaml"
)
NET_ISTIO_URL = (
    "https://github.com/knative-extensions/net-istio/releases/download/"
    f"{KNATIVE_VERSION}/net-istio.yaml"
)
# Istio as net-istio packages it at the same tag: the repository's one-node profile
# (istio-kind-no-mesh: one gateway at 100m / 256Mi, istiod HPA minimum 1), not the release
# asset istio.yaml, which is Knative's CI profile (3 gateways x 1 CPU / 1 GiB, istiod HPA
# minimum 3 x 500m / 2 GiB: more than a laptop's Docker engine has).
ISTIO_VERSION = "1.28.4"  # the docker.io/istio/pilot and proxyv2 tags in that file
ISTIO_URL = (
    "https://raw.githubusercontent.com/knative-extensions/net-istio/"
    f"{KNATIVE_VERSION}/third_party/istio-latest/istio-kind-no-mesh/istio.yaml"
)
# istiod requests 500m / 2 GiB even in that profile; KServe's own small-cluster Istio
# install (hack/setup/infra/manage.istio-helm.sh at v0.20.0) sets these instead.
ISTIOD_REQUESTS = {"cpu": "5m", "memory": "32Mi"}
# Standard mode scales with an HPA, which needs metrics-server (k3s bundles it; kind not).
METRICS_SERVER_VERSION = "v0.7.2"
METRICS_SERVER_URL = (
    "https://github.com/kubernetes-sigs/metrics-server/releases/download/"
    f"{METRICS_SERVER_VERSION}/components.yaml"
)

# KServe's TF Serving runtime (--predictor tfserving): the image tag, pinned.
TFSERVING_RUNTIME_VERSION = "2.18.0"
# The optional request logger (the original design's message-dumper).
MESSAGE_DUMPER_IMAGE = "gcr.io/knative-releases/knative.dev/eventing/cmd/event_display:v1.18.0"

# Argo Workflows (`invoke up --with-argo`): the release's cluster install, applied into the
# `argo` namespace (the file holds no Namespace object). Its full CRDs (~12 MB) are far
# above client-side apply's 256 KiB last-applied annotation: applied --server-side.
ARGO_WORKFLOWS_VERSION = "v4.1.2"
ARGO_WORKFLOWS_URL = (
    "https://github.com/argoproj/argo-workflows/releases/download/"
    f"{ARGO_WORKFLOWS_VERSION}/install.yaml"
)

# Monitoring (`invoke up --with-monitoring`): Prometheus for KServe's KEDA autoscaler to
# query, and KEDA, which KServe 0.20's `autoscalerClass: keda` hands ScaledObjects to.
# Prometheus: distml's own manifests (k8s/monitoring/stack.py) run the upstream image, this tag.
PROMETHEUS_VERSION = "v3.16.0"
PROMETHEUS_IMAGE = f"quay.io/prometheus/prometheus:{PROMETHEUS_VERSION}"
# Alertmanager: routes the alerts distml's Prometheus fires; distml's own manifests run the
# upstream image, this tag (its Go module is versioned as the release: v0.28.1).
ALERTMANAGER_VERSION = "v0.28.1"
ALERTMANAGER_IMAGE = f"quay.io/prometheus/alertmanager:{ALERTMANAGER_VERSION}"
# KEDA: KServe 0.20 is tested with 2.18.0; 2.20.2 is the nearest release whose tested
# window (KEDA's docs: v1.33 - v1.35) holds KUBERNETES_VERSION and that the offline kind
# build can be made from (integration/kindbuild/pins.py). Its release install file; the
# images it names are tagged without a "v" (ghcr.io/kedacore/keda:2.20.2).
KEDA_VERSION = "2.20.2"
KEDA_URL = (
    f"https://github.com/kedacore/keda/releases/download/v{KEDA_VERSION}/keda-{KEDA_VERSION}.yaml"
)
# The Prometheus Operator whose CRDs `invoke render --prometheus-operator`'s PodMonitors,
# ServiceMonitors and PrometheusRule are written for and validated against
# (monitoring.coreos.com/v1). Its CRD files as published at the tag; here, where they cannot
# be downloaded, made byte for byte from the operator's API module
# (integration/kindbuild/operatorcrds.py).
PROMETHEUS_OPERATOR_VERSION = "v0.93.0"
PROMETHEUS_OPERATOR_CRD_DIR = (
    "https://raw.githubusercontent.com/prometheus-operator/prometheus-operator/"
    f"{PROMETHEUS_OPERATOR_VERSION}/example/prometheus-operator-crd"
)
PROMETHEUS_OPERATOR_CRDS = {
    kind: f"{PROMETHEUS_OPERATOR_CRD_DIR}/monitoring.coreos.com_{plural}.yaml"
    for kind, plural in (
        ("PodMonitor", "podmonitors"),
        ("PrometheusRule", "prometheusrules"),
        ("ServiceMonitor", "servicemonitors"),
    )
}
