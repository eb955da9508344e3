"""For a cluster whose Prometheus the Prometheus Operator runs: the objects that have it
scrape distml's pods and load distml's rules, as pure builders (``invoke render
--prometheus-operator`` writes them; nothing applies them).

- PodMonitor :data:`PREDICTOR` - the predictor pods of every InferenceService in distml's
  namespace (KServe's :data:`~k8s.manifests.names.ISVC_POD_LABEL`), on the server's
  container port :data:`~k8s.manifests.names.PREDICTOR_PORT` by number, as distml's own job
  keeps it (a name could miss: KServe's TF Serving runtime declares no port), at
  ``/metrics``.
- PodMonitor :data:`TRAINING` - distml's training workers (the TFJob pods' labels), on
  their container port named ``metrics`` (``ml.contract.training_metrics.PORT_NAME``).
- PrometheusRule :data:`RULES` - ``k8s.monitoring.rules.groups()`` as they are.

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

from typing import Any

from k8s.manifests.names import (
    COMMON_LABELS,
    COMPONENT_LABEL,
    ISVC_POD_LABEL,
    PREDICTOR_PORT,
    TRAIN_COMPONENT,
)
from k8s.manifests.pods import meta
from k8s.monitoring import rules
from k8s.monitoring.stack import COMPONENT, meta_label
from k8s.providers.settings import Settings
from ml.contract import training_metrics as train_metrics

API_VERSION = "monitoring.coreos.com/v1"
PREDICTOR = "distml-predictor"
TRAINING = "distml-training"
RULES = "distml-rules"
METRICS_PATH = "/metrics"
TRAINING_COMPONENT = TRAIN_COMPONENT  # distml's TFJob pods' (k8s.manifests.pods.tfjob)


def _keep_running() -> dict[str, Any]:
    return {"sourceLabels": ["__meta_kubernetes_pod_phase"], "regex": "Running", "action": "keep"}


def predictor_pod_monitor(s: Settings) -> dict[str, Any]:
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
        "metadata": meta(PREDICTOR, s.namespace, COMPONENT),
        "spec": {
            "selector": {"matchExpressions": [{"key": ISVC_POD_LABEL, "operator": "Exists"}]},
            "podMetricsEndpoints": [endpoint],
        },
    }


def training_pod_monitor(s: Settings) -> dict[str, Any]:
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
        "metadata": meta(TRAINING, s.namespace, COMPONENT),
        "spec": {
            "selector": {"matchLabels": {**COMMON_LABELS, COMPONENT_LABEL: TRAINING_COMPONENT}},
            "podMetricsEndpoints": [endpoint],
        },
    }


def prometheus_rule(s: Settings) -> dict[str, Any]:
    """distml's rules (``distml-rules.yaml``'s groups) as the Operator loads them."""
    return {
        "apiVersion": API_VERSION,
        "kind": "PrometheusRule",
        "metadata": meta(RULES, s.namespace, COMPONENT),
        "spec": {"groups": rules.groups()},
    }


def operator_objects(s: Settings) -> list[dict[str, Any]]:
    """What `render --prometheus-operator` writes, in the order it numbers them."""
    return [predictor_pod_monitor(s), training_pod_monitor(s), prometheus_rule(s)]
