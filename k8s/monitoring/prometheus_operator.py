"""For a cluster whose Prometheus the Prometheus Operator runs: the objects that have it
scrape distml's pods and the components its alerts read, and load distml's rules, as pure
builders (``invoke render --prometheus-operator`` writes them; nothing applies them), shaped
by :class:`OperatorOptions` (the render flags).

- Role and RoleBinding :data:`k8s.monitoring.operator_rbac.NAME` in each namespace a monitor
  below lives in: discovery there, for the Prometheus's ServiceAccount.
- PodMonitor :data:`PREDICTOR` - the predictor pods of every InferenceService in distml's
  namespace (KServe's :data:`~k8s.manifests.names.ISVC_POD_LABEL`), on the server's
  container port :data:`~k8s.manifests.names.PREDICTOR_PORT` by number, as distml's own job
  keeps it (a name could miss: KServe's TF Serving runtime declares no port), at
  ``/metrics``.
- PodMonitor :data:`TRAINING` - distml's training workers (the TFJob pods' labels), on
  their container port named ``metrics`` (``ml.contract.training_metrics.PORT_NAME``).
- ServiceMonitor :data:`TRAINING_OPERATOR`, in the training operator's namespace: its
  Service, port ``stack.OPERATOR_METRICS_PORT_NAME``, for ``DistmlTFJobFailed`` (which reads
  the series' own ``job_namespace``: no ``honorLabels`` needed).
- ServiceMonitor :data:`KEDA`, in KEDA's namespace (standard mode, as ``stack`` scrapes it):
  its operator's Service, port ``stack.KEDA_METRICS_PORT_NAME``, ``honorLabels: true`` - the
  scalers' counters carry the ScaledObject's ``namespace``, which the target's (``keda``)
  would otherwise replace, leaving it as ``exported_namespace``: the KEDA alerts could not
  name the service.
- PrometheusRule :data:`RULES` - ``k8s.monitoring.rules.groups()`` as they are.

Both ServiceMonitors select by the component's Service, as distml's own Prometheus scrapes
both (``k8s.monitoring.stack``), with the names the pinned install files give (below, by
:data:`TRAINING_OPERATOR_SERVICE_LABELS`). ``namespace_only`` leaves out both, their Roles,
and the alerts on their series (``rules.OTHER_NAMESPACES``).

The labels are the ones distml's own scrape jobs attach (``k8s.monitoring.stack``), which
``ml.contract.serving_metrics``'s and ``ml.contract.training_metrics``'s queries select on: the
Operator gives every target ``namespace``, ``pod`` and ``container`` (and ``endpoint`` with a
named port); each endpoint's relabelings add ``isvc`` from the pod label and keep Running
pods only (the Operator drops only Failed and Succeeded ones: a Pending predictor would be a
target that is down). The ``job`` label is the Operator's, ``<namespace>/<PodMonitor name>``;
distml never selects on it. No scrape interval is set: the Prometheus's own applies, and
distml reads it off the targets (``k8s.monitoring.scrape``).

Written for the CRDs of the Prometheus Operator ``versions.PROMETHEUS_OPERATOR_VERSION``
(``monitoring.coreos.com/v1``; the tests validate against them strictly).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from common.errors import DistmlError
from k8s.install.operator_check import PROBES
from k8s.manifests.names import (
    COMMON_LABELS,
    COMPONENT_LABEL,
    ISVC_POD_LABEL,
    PREDICTOR_PORT,
    TRAIN_COMPONENT,
    is_dns_label,
    is_dns_subdomain,
)
from k8s.manifests.pods import meta
from k8s.monitoring import operator_rbac, rules, stack
from k8s.monitoring.stack import COMPONENT, meta_label
from k8s.providers.settings import Settings
from ml.contract import training_metrics as train_metrics

API_VERSION = "monitoring.coreos.com/v1"
PREDICTOR = "distml-predictor"
TRAINING = "distml-training"
TRAINING_OPERATOR = "distml-training-operator"
KEDA = "distml-keda-operator"
RULES = "distml-rules"
METRICS_PATH = "/metrics"
TRAINING_COMPONENT = TRAIN_COMPONENT  # distml's TFJob pods' (k8s.manifests.pods.tfjob)
#: The labels of the Services the ServiceMonitors select, read in the pinned install files
#: (k8s/install/upstream.lock.json; the tests read them there again):
#: - training-operator v1.9.0's standalone overlay (training-operator-v1.9.0/standalone.yaml):
#:   Service kubeflow/training-operator, labels {app: training-operator}, ports
#:   monitoring-port 8080 (to the container's 8080, which has no name) and webhook-server 443.
#: - KEDA v2.20.2's (keda-2.20.2/keda-2.20.2.yaml, its config/manager/service.yaml): Service
#:   keda/keda-operator, labels app.kubernetes.io/name: keda-operator (and part-of, version),
#:   ports metricsservice 9666 (gRPC to its metrics adapter) and metrics 8080.
TRAINING_OPERATOR_SERVICE_LABELS = {"app": "training-operator"}
KEDA_SERVICE_LABELS = {"app.kubernetes.io/name": "keda-operator"}
#: The label kube-prometheus-stack's selectors require, ``release: <its Helm release>``
#: (its ``*SelectorNilUsesHelmValues``, true by default).
RELEASE_LABEL = "release"
#: Helm's limit on a release's name (``chartutil.ValidateReleaseName``: a DNS subdomain).
MAX_RELEASE_NAME = 53


class OperatorOptionError(DistmlError):
    """A `render --prometheus-operator` flag's value that cannot be used (says which)."""


@dataclass(frozen=True)
class OperatorOptions:
    """How the objects fit the Prometheus that loads them (`invoke render` flags)."""

    #: NAMESPACE/NAME of the Prometheus's ServiceAccount, which the Roles are bound to.
    prometheus_sa: str = operator_rbac.DEFAULT_ACCOUNT
    #: kube-prometheus-stack's Helm release: ``release: <it>`` on the monitors and the rule.
    release: str = ""
    #: Only objects in distml's namespace, and no alert on other namespaces' series.
    namespace_only: bool = False

    def __post_init__(self) -> None:
        namespace, _, name = self.prometheus_sa.partition("/")
        if not (is_dns_label(namespace) and is_dns_subdomain(name)):
            raise OperatorOptionError(
                f"--prometheus-sa must be NAMESPACE/NAME, e.g. {operator_rbac.DEFAULT_ACCOUNT} "
                f"(kube-prometheus's); not {self.prometheus_sa!r}"
            )
        release = self.release
        if release and not (len(release) <= MAX_RELEASE_NAME and is_dns_subdomain(release)):
            raise OperatorOptionError(
                f"--release must be a Helm release's name (lower-case letters, digits, "
                f"'-' and '.', at most {MAX_RELEASE_NAME}); not {release!r}"
            )

    @property
    def account(self) -> tuple[str, str]:
        """The ServiceAccount as (namespace, name)."""
        namespace, _, name = self.prometheus_sa.partition("/")
        return namespace, name

    @property
    def labels(self) -> dict[str, str]:
        """What the monitors and the rule carry beside distml's labels."""
        return {RELEASE_LABEL: self.release} if self.release else {}


def _meta(name: str, namespace: str, o: OperatorOptions) -> dict[str, Any]:
    return meta(name, namespace, COMPONENT, extra_labels=o.labels)


def _keep_running() -> dict[str, Any]:
    return {"sourceLabels": ["__meta_kubernetes_pod_phase"], "regex": "Running", "action": "keep"}


def predictor_pod_monitor(s: Settings, o: OperatorOptions) -> dict[str, Any]:
    """The predictor pods of every InferenceService in the namespace, labelled ``isvc``."""
    endpoint = {
        "portNumber": PREDICTOR_PORT,
        "path": METRICS_PATH,
        "relabelings": [
            _keep_running(),
            {
                "sourceLabels": [meta_label(ISVC_POD_LABEL)],
                "targetLabel": "isvc",
                "action": "replace",
            },
        ],
    }
    return {
        "apiVersion": API_VERSION,
        "kind": "PodMonitor",
        "metadata": _meta(PREDICTOR, s.namespace, o),
        "spec": {
            "selector": {"matchExpressions": [{"key": ISVC_POD_LABEL, "operator": "Exists"}]},
            "podMetricsEndpoints": [endpoint],
        },
    }


def training_pod_monitor(s: Settings, o: OperatorOptions) -> dict[str, Any]:
    """distml's training workers, on their ``metrics`` port; their series carry their own
    ``tfjob``, ``model`` and ``replica``."""
    endpoint = {
        "port": train_metrics.PORT_NAME,
        "path": METRICS_PATH,
        "relabelings": [_keep_running()],
    }
    return {
        "apiVersion": API_VERSION,
        "kind": "PodMonitor",
        "metadata": _meta(TRAINING, s.namespace, o),
        "spec": {
            "selector": {"matchLabels": {**COMMON_LABELS, COMPONENT_LABEL: TRAINING_COMPONENT}},
            "podMetricsEndpoints": [endpoint],
        },
    }


def _service_monitor(
    name: str, probe: str, labels: dict[str, str], endpoint: dict[str, Any], o: OperatorOptions
) -> dict[str, Any]:
    """A ServiceMonitor, in the namespace of ``PROBES[probe]``'s install, of the Service
    labelled ``labels``."""
    return {
        "apiVersion": API_VERSION,
        "kind": "ServiceMonitor",
        "metadata": _meta(name, PROBES[probe].namespace, o),
        "spec": {
            "selector": {"matchLabels": dict(labels)},
            "endpoints": [{**endpoint, "path": METRICS_PATH}],
        },
    }


def training_operator_monitor(o: OperatorOptions) -> dict[str, Any]:
    """The training operator's counters (``training_operator_jobs_*_total``)."""
    endpoint = {"port": stack.OPERATOR_METRICS_PORT_NAME}
    return _service_monitor(
        TRAINING_OPERATOR, "training_operator", TRAINING_OPERATOR_SERVICE_LABELS, endpoint, o
    )


def keda_monitor(o: OperatorOptions) -> dict[str, Any]:
    """KEDA's operator's counters, their own ``namespace`` kept (``honorLabels``)."""
    endpoint = {"port": stack.KEDA_METRICS_PORT_NAME, "honorLabels": True}
    return _service_monitor(KEDA, "keda", KEDA_SERVICE_LABELS, endpoint, o)


def prometheus_rule(s: Settings, o: OperatorOptions | None = None) -> dict[str, Any]:
    """distml's rules (``distml-rules.yaml``'s groups) as the Operator loads them;
    ``namespace_only``: without ``rules.OTHER_NAMESPACES``."""
    o = o or OperatorOptions()
    return {
        "apiVersion": API_VERSION,
        "kind": "PrometheusRule",
        "metadata": _meta(RULES, s.namespace, o),
        "spec": {"groups": rules.groups(namespace_only=o.namespace_only)},
    }


def monitors(s: Settings, o: OperatorOptions) -> list[dict[str, Any]]:
    """The PodMonitors, and unless ``namespace_only`` the ServiceMonitors (KEDA's in standard
    mode, where distml scales with it)."""
    found = [predictor_pod_monitor(s, o), training_pod_monitor(s, o)]
    if not o.namespace_only:
        found.append(training_operator_monitor(o))
        if s.serving_mode == "standard":
            found.append(keda_monitor(o))
    return found


def operator_objects(s: Settings, o: OperatorOptions | None = None) -> list[dict[str, Any]]:
    """What `render --prometheus-operator` writes, in the order it numbers them: the rights
    to discover the monitors' targets, the monitors, the rule."""
    o = o or OperatorOptions()
    watched = monitors(s, o)
    namespaces = [m["metadata"]["namespace"] for m in watched]
    rbac = operator_rbac.discovery_rbac(namespaces, o.account)
    return [*rbac, *watched, prometheus_rule(s, o)]
