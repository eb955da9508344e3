"""What the kind build pins: each piece's source module and version, and the image tag
kind or kubeadm expects it under.

The Kubernetes version is the project's kind node version (``k8s/install/versions.py``); the
kind CLI is ``k8s/install/versions.py``'s ``KIND_VERSION``. The image tags are facts of those two
releases, read from their source: kubeadm v1.33.1's ``cmd/kubeadm/app/constants``
(etcd, CoreDNS, pause) and kind v0.29.0's ``pkg/build/nodeimage`` (kindnetd,
local-path-provisioner and its helper) and ``images/base`` (the pause image in
containerd's config). Change a pin here, and the cache key changes with it.
"""

from __future__ import annotations

from k8s.install import versions

KIND = versions.KIND_VERSION
KUBERNETES = versions.KIND_NODE_IMAGE.rsplit(":", 1)[1]  # v1.33.1
# The staging modules (k8s.io/api, client-go, ...) are published as v0.<minor>.<patch>.
STAGING = "v0" + KUBERNETES[2:]
KUBERNETES_BINARIES = (
    "kubeadm",
    "kubelet",
    "kubectl",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kube-proxy",
)
# Images kubeadm runs as static pods / DaemonSets from kube binaries, tagged registry.k8s.io.
KUBERNETES_IMAGES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy")

ETCD_MODULE, ETCD = "go.etcd.io/etcd/server/v3", "v3.5.21"
ETCD_IMAGE = "registry.k8s.io/etcd:3.5.21-0"
COREDNS_MODULE, COREDNS = "github.com/coredns/coredns", "v1.12.0"
COREDNS_IMAGE = "registry.k8s.io/coredns/coredns:v1.12.0"
# kind's base containerd config: sandbox_image = "registry.k8s.io/pause:3.10"; built from
# the pause.c in k8s.io/kubernetes at KUBERNETES (build/pause/linux/pause.c).
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
LOCAL_PATH_MODULE, LOCAL_PATH = "github.com/rancher/local-path-provisioner", "v0.0.30"
LOCAL_PATH_IMAGE = "docker.io/kindest/local-path-provisioner:v20250214-acbabc1a"
LOCAL_PATH_HELPER_IMAGE = "docker.io/kindest/local-path-helper:v20241212-8ac705d0"
KINDNETD_IMAGE = "docker.io/kindest/kindnetd:v20250512-df8de77b"
# crictl: kind's node has it (``kind load`` runs ``crictl inspecti``). Upstream kind v0.29
# builds v1.33.0; the module proxy here serves v1.34.0 as the nearest.
CRICTL_MODULE, CRICTL = "sigs.k8s.io/cri-tools", "v1.34.0"

DEBIAN_SUITE = "bookworm"
DEBIAN_MIRROR = "http://deb.debian.org/debian"

# The standard-mode stack's controllers (issue 20, item 2): each module at the version built
# and the image tag the upstream manifests in ../shared/k8s-upstream name (by tag, never a
# digest). Their tests hold these tags against those files.
# training-operator: the overlay names commit 5170a36, the parent of the v1.9.0 tag (same Go
# code); the proxy refuses the commit (403 on @5170a36), so the v1.9.0 tag is built.
TRAINING_OPERATOR_MODULE, TRAINING_OPERATOR = "github.com/kubeflow/training-operator", "v1.9.0"
TRAINING_OPERATOR_IMAGE = "kubeflow/training-operator:v1-5170a36"
KSERVE_MODULE, KSERVE = "github.com/kserve/kserve", "v0.20.0"
KSERVE_CONTROLLER_IMAGE = f"kserve/kserve-controller:{KSERVE}"
KSERVE_LLMISVC_IMAGE = f"kserve/llmisvc-controller:{KSERVE}"
KSERVE_LOCALMODEL_IMAGE = f"kserve/kserve-localmodel-controller:{KSERVE}"
RBAC_PROXY_MODULE, RBAC_PROXY = "github.com/brancz/kube-rbac-proxy", "v0.18.0"
RBAC_PROXY_IMAGE = f"quay.io/brancz/kube-rbac-proxy:{RBAC_PROXY}"
CERT_MANAGER_MODULE, CERT_MANAGER = "github.com/cert-manager/cert-manager", "v1.17.2"
CERT_MANAGER_IMAGES = {
    name: f"quay.io/jetstack/cert-manager-{name}:{CERT_MANAGER}"
    for name in ("controller", "cainjector", "webhook")
}
METRICS_SERVER_MODULE, METRICS_SERVER = "sigs.k8s.io/metrics-server", "v0.7.2"
METRICS_SERVER_IMAGE = f"registry.k8s.io/metrics-server/metrics-server:{METRICS_SERVER}"
# Argo Workflows: install.yaml names v4.1.2; the proxy refuses every v4 version but v4.0.5
# (403 on v4.1.2, v4.1.1, v4.1.0, v4.0.0), so v4.0.5 is built and its controller and server
# are tagged v4.1.2. The executor is not in install.yaml: the controller runs
# quay.io/argoproj/argoexec:<its own version> (workflow/controller/config.go), so v4.0.5.
ARGO_MODULE, ARGO, ARGO_TAG = "github.com/argoproj/argo-workflows/v4", "v4.0.5", "v4.1.2"
ARGO_IMAGES = {
    "workflow-controller": f"quay.io/argoproj/workflow-controller:{ARGO_TAG}",
    "argocli": f"quay.io/argoproj/argocli:{ARGO_TAG}",
    "argoexec": f"quay.io/argoproj/argoexec:{ARGO}",
}
# The registry inside the offline node (integration.kindbuild.mirror): Debian bookworm's
# docker-registry package, pinned so a warm run never asks apt.
MIRROR_REGISTRY_DEB = "2.8.2+ds1-1"
# Monitoring (`up --with-monitoring`, issue 30): each image tagged as k8s/install/versions.py and
# KEDA's install file name it. Prometheus' Go module versions its 3.x releases v0.3xx.0:
# v0.316.0 is 3.16.0 (its VERSION file). Its web UI's compiled assets are not in the module:
# it is built without the `builtinassets` tag (controllers.prometheus says what that leaves).
PROMETHEUS_MODULE, PROMETHEUS = "github.com/prometheus/prometheus", "v0.316.0"
PROMETHEUS_IMAGE = "quay.io/prometheus/prometheus:v3.16.0"
# Alertmanager: the proxy served v0.28.1 (asked once, 2026-12-05), its module version the
# release's. Its web UI is in the module (asset/assets_vfsdata.go, generated and committed),
# so the image has it.
ALERTMANAGER_MODULE, ALERTMANAGER = "github.com/prometheus/alertmanager", "v0.28.1"
ALERTMANAGER_IMAGE = f"quay.io/prometheus/alertmanager:{ALERTMANAGER}"
# KEDA: the proxy served v2.20.2 (asked once, 2026-12-03); the tested window of KEDA 2.20 is
# Kubernetes 1.33 - 1.35 (keda.sh's compatibility table; its go.mod pins k8s.io to v0.35.5),
# the nearest to KServe 0.20's tested 2.18.0 that holds KUBERNETES (2.21: 1.34 - 1.36;
# 2.16: 1.29 - 1.31). Its release tags the images without the "v".
KEDA_MODULE, KEDA, KEDA_TAG = "github.com/kedacore/keda/v2", "v2.20.2", "2.20.2"
KEDA_IMAGES = {
    name: f"ghcr.io/kedacore/{name}:{KEDA_TAG}"
    for name in ("keda", "keda-metrics-apiserver", "keda-admission-webhooks")
}
# The kustomize KEDA's release target runs (its go.mod's), which makes its install file.
KUSTOMIZE_MODULE, KUSTOMIZE = "sigs.k8s.io/kustomize/kustomize/v5", "v5.8.1"
# The Prometheus Operator's PodMonitor and PrometheusRule CRDs (`render --prometheus-operator`):
# the proxy refuses its main module, which holds the CRD files (v0.86.0 and v0.95.2, asked
# once each, 2026-12-05), and serves its API module (pkg/apis/monitoring v0.92.1 - v0.95.2),
# whose Go types they are generated from, by the controller-gen its scripts/go.mod pins at
# the tag (integration/kindbuild/operatorcrds.py). v0.93.0: its generated files were compared
# with the ones committed at the tag, and are the same bytes.
PROMETHEUS_OPERATOR_APIS_MODULE = (
    "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring"
)
PROMETHEUS_OPERATOR = "v0.93.0"
CONTROLLER_TOOLS_MODULE, CONTROLLER_TOOLS = "sigs.k8s.io/controller-tools", "v0.21.0"
# minikube (`nox -s integration -- minikube ...`): the proxy served v1.36.0 (asked once,
# 2026-12-03). Its default and newest Kubernetes is v1.33.1 (KUBERNETES) and its
# metrics-server add-on v0.7.2 (METRICS_SERVER); the storage-provisioner it runs is its
# Makefile's STORAGE_PROVISIONER_TAG, built from the same module.
MINIKUBE_MODULE, MINIKUBE = "k8s.io/minikube", versions.MINIKUBE_VERSION
STORAGE_PROVISIONER_TAG = "v5"
STORAGE_PROVISIONER_IMAGE = f"gcr.io/k8s-minikube/storage-provisioner:{STORAGE_PROVISIONER_TAG}"
