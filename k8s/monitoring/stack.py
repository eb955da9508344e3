"""distml's own Prometheus (``invoke up --with-monitoring``), as pure builders: every object
it needs, in distml's namespace and only there.

- ServiceAccount, Role and RoleBinding: list/watch pods, endpoints and services in the
  namespace. No ClusterRole: it works for a user whose rights end at their namespace, on
  a cluster shared with others.
- ConfigMap ``prometheus.yml``: one scrape job (``serving_metrics.SCRAPE_JOB``) over the
  namespace's pods (``kubernetes_sd_configs`` role pod, that namespace only) that carry
  KServe's InferenceService label, on the server's container port (``PREDICTOR_PORT``) at
  ``/metrics``. Not KServe's ``serving.kserve.io/enable-prometheus-scraping`` annotation:
  it points at queue-proxy's port 9091, which Standard mode's pods do not have. The
  relabelling attaches the labels ``ml.contract.serving_metrics``'s queries select on:
  ``namespace``, ``isvc`` (the InferenceService) and ``pod``. In standard mode, a second
  job scrapes KEDA's operator through its Service (a static target: no right needed in
  KEDA's namespace), for the alert on KEDA's reads. Beside it, ``distml-rules.yaml``
  (``k8s.monitoring.rules``), which ``rule_files`` loads.
- Deployment: the pinned upstream image (``versions.PROMETHEUS_IMAGE``), small requests,
  readiness on ``/-/ready``, its TSDB on an emptyDir kept :data:`RETENTION` (the numbers
  live as long as the pod: enough for `status`, a load test, KEDA's triggers and the
  alerts' longest window, 3 days).
- Service :data:`k8s.monitoring.prometheus.OWN_SERVICE`, port
  :data:`k8s.monitoring.prometheus.PORT`.

Why distml's own manifests and not an upstream bundle: docs/monitoring.md.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from k8s.install import versions
from k8s.install.operator_check import PROBES
from k8s.manifests.names import (
    COMPONENT_LABEL,
    ISVC_POD_LABEL,
    NO_ISTIO_SIDECAR,
    PART_OF,
    PART_OF_LABEL,
    PREDICTOR_PORT,
    PREDICTOR_SERVICE_PORT,
    TRAIN_COMPONENT,
)
from k8s.manifests.pods import container_security_context, meta
from k8s.monitoring import alertmanager, rules
from k8s.monitoring.prometheus import OWN_SERVICE, PORT
from k8s.providers.settings import Resources, Settings
from ml.contract import serving_metrics
from ml.contract import training_metrics as train_metrics

COMPONENT = "monitoring"
NAME = OWN_SERVICE  # every object's name
CONFIG_FILE = "prometheus.yml"
RULES_FILE = rules.PATH.name
WATCHDOG_FILE = "distml-watchdog.yaml"  # alertmanager.watchdog_rules(): distml's own only
CONFIG_DIR = "/etc/prometheus"
DATA_DIR = "/prometheus"
RETENTION = "3d"  # the ticket alert's longest window (k8s.monitoring.rules.WINDOWS)
# The upstream image's user (its Dockerfile: USER nobody).
PROMETHEUS_UID = 65534
# What the scheduler counts (k8s.install.capacity adds it up): a Prometheus of a few hundred series.
RESOURCES = Resources("40m", "1", "128Mi", "512Mi")
CONFIG_HASH_ANNOTATION = "distml/prometheus-config"
RBAC_API = "rbac.authorization.k8s.io/v1"
# The pod's labels, and the Deployment's and Service's selector.
SELECTOR = {"app.kubernetes.io/name": NAME, "app.kubernetes.io/component": COMPONENT}


def meta_label(label: str) -> str:
    """Prometheus's meta label of a pod label (every character not [a-zA-Z0-9_] as '_')."""
    return "__meta_kubernetes_pod_label_" + "".join(
        c if c.isalnum() or c == "_" else "_" for c in label
    )


def scrape_config(s: Settings) -> dict[str, Any]:
    """The predictor pods' scrape job."""
    isvc = meta_label(ISVC_POD_LABEL)
    return {
        "job_name": serving_metrics.SCRAPE_JOB,
        "scrape_interval": f"{serving_metrics.SCRAPE_INTERVAL_S}s",
        "metrics_path": "/metrics",
        "kubernetes_sd_configs": [
            {
                "role": "pod",
                "namespaces": {"names": [s.namespace]},
                "selectors": [{"role": "pod", "label": ISVC_POD_LABEL}],
            }
        ],
        "relabel_configs": [
            {"source_labels": [isvc], "regex": ".+", "action": "keep"},
            {
                "source_labels": ["__meta_kubernetes_pod_phase"],
                "regex": "Running",
                "action": "keep",
            },
            {
                "source_labels": ["__meta_kubernetes_pod_container_port_number"],
                "regex": str(PREDICTOR_PORT),
                "action": "keep",
            },
            {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
            {"source_labels": [isvc], "target_label": "isvc"},
            {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
        ],
    }


#: The training workers' scrape job: TFJob pods' container port named "metrics"
#: (ml/contract/training_metrics.py; k8s.manifests.pods.tfjob), while Running.
TRAINING_JOB = "distml-training"


def training_scrape_config(s: Settings) -> dict[str, Any]:
    """Every training worker of the namespace, by its metrics port's name."""
    return {
        "job_name": TRAINING_JOB,
        "metrics_path": "/metrics",
        "kubernetes_sd_configs": [{"role": "pod", "namespaces": {"names": [s.namespace]}}],
        "relabel_configs": [
            # distml's TFJob pods only, as the PodMonitor selects them: another pod's
            # port named "metrics" is not a training worker.
            {
                "source_labels": [meta_label(PART_OF_LABEL), meta_label(COMPONENT_LABEL)],
                "regex": f"{PART_OF};{TRAIN_COMPONENT}",
                "action": "keep",
            },
            {
                "source_labels": ["__meta_kubernetes_pod_container_port_name"],
                "regex": train_metrics.PORT_NAME,
                "action": "keep",
            },
            {
                "source_labels": ["__meta_kubernetes_pod_phase"],
                "regex": "Running",
                "action": "keep",
            },
            {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
            {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
        ],
    }


#: The training operator serves its counters on its Service's port 8080, named
#: "monitoring-port" (training-operator v1.9.0's standalone overlay, Service
#: kubeflow/training-operator; --metrics-bind-address :8080).
OPERATOR_JOB = "training-operator"
OPERATOR_METRICS_PORT = 8080
OPERATOR_METRICS_PORT_NAME = "monitoring-port"


def operator_scrape_config(s: Settings) -> dict[str, Any]:
    """The training operator, by its Service's DNS name (no RBAC needed):
    ``training_operator_jobs_*_total``, of this namespace's TFJobs only. The operator is
    the cluster's and counts every namespace's: another team's failed TFJob is not this
    user's alert (a series without ``job_namespace``, the process's own, is kept)."""
    op = PROBES["training_operator"]
    target = f"{op.deployment}.{op.namespace}.svc:{OPERATOR_METRICS_PORT}"
    ours = {"source_labels": ["job_namespace"], "regex": f"|{s.namespace}", "action": "keep"}
    return {
        "job_name": OPERATOR_JOB,
        "static_configs": [{"targets": [target]}],
        "metric_relabel_configs": [ours],
    }


#: Each InferenceService's predictor Service, scraped as users reach it: its ``up`` is 0
#: when no pod is ready behind it (all Pending, evicted or gone: no pod target is left to
#: fail), which ``DistmlPredictorDown`` reads. Every sample it scrapes is dropped (the pods'
#: own job counts them); ``up`` is Prometheus's own and stays.
SERVICE_PROBE_JOB = "distml-predictor-service"
SERVICE_PROBE_INTERVAL = "15s"


def service_label(label: str) -> str:
    """Prometheus's meta label of a Service label."""
    return meta_label(label).replace("_pod_label_", "_service_label_")


def service_probe_config(s: Settings) -> dict[str, Any]:
    """The predictor Services (KServe's ``<isvc>-predictor``, labelled with its
    InferenceService), on :data:`PREDICTOR_SERVICE_PORT`; no ``pod`` label."""
    isvc = service_label(ISVC_POD_LABEL)
    return {
        "job_name": SERVICE_PROBE_JOB,
        "scrape_interval": SERVICE_PROBE_INTERVAL,
        "metrics_path": "/metrics",
        "kubernetes_sd_configs": [{"role": "service", "namespaces": {"names": [s.namespace]}}],
        "relabel_configs": [
            {"source_labels": [isvc], "regex": ".+", "action": "keep"},
            {
                "source_labels": ["__meta_kubernetes_service_name"],
                "regex": ".+-predictor",
                "action": "keep",
            },
            {
                "source_labels": ["__meta_kubernetes_service_port_number"],
                "regex": str(PREDICTOR_SERVICE_PORT),
                "action": "keep",
            },
            {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
            {"source_labels": [isvc], "target_label": "isvc"},
        ],
        "metric_relabel_configs": [{"source_labels": ["__name__"], "action": "drop"}],
    }


#: KEDA's operator serves its metrics on its Service's port "metrics" (KEDA v2.20.2's
#: config/manager/service.yaml; the operator's --metrics-bind-address :8080), plain HTTP.
KEDA_JOB = "keda-operator"
KEDA_METRICS_PORT = 8080
KEDA_METRICS_PORT_NAME = "metrics"


def keda_scrape_config() -> dict[str, Any]:
    """KEDA's operator, by its Service's DNS name: the counters of its scalers' failed and
    empty reads (``k8s.monitoring.rules``'s KEDA alerts)."""
    keda = PROBES["keda"]
    target = f"{keda.deployment}.{keda.namespace}.svc:{KEDA_METRICS_PORT}"
    return {"job_name": KEDA_JOB, "static_configs": [{"targets": [target]}]}


def prometheus_config(s: Settings) -> dict[str, Any]:
    """Its scrape jobs (KEDA's in standard mode, where `up --with-monitoring` installs it)
    and its rules."""
    interval = f"{serving_metrics.SCRAPE_INTERVAL_S}s"
    jobs = [scrape_config(s), training_scrape_config(s), operator_scrape_config(s)]
    jobs.append(alertmanager.scrape_config())
    if s.serving_mode == "standard":  # Knative's scale to zero leaves a Service no pod
        jobs += [keda_scrape_config(), service_probe_config(s)]
    return {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "rule_files": [f"{CONFIG_DIR}/{RULES_FILE}", f"{CONFIG_DIR}/{WATCHDOG_FILE}"],
        "alerting": alertmanager.prometheus_alerting(),
        "scrape_configs": jobs,
    }


def config_text(s: Settings) -> str:
    """prometheus.yml (JSON is YAML: no YAML library needed here)."""
    return json.dumps(prometheus_config(s), indent=2) + "\n"


def rbac(s: Settings) -> list[dict[str, Any]]:
    """ServiceAccount, Role and RoleBinding: service discovery in the namespace only."""
    account = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": meta(NAME, s.namespace, COMPONENT),
    }
    role = {
        "apiVersion": RBAC_API,
        "kind": "Role",
        "metadata": meta(NAME, s.namespace, COMPONENT),
        "rules": [
            {
                "apiGroups": [""],
                "resources": ["pods", "endpoints", "services"],
                "verbs": ["list", "watch"],
            }
        ],
    }
    binding = {
        "apiVersion": RBAC_API,
        "kind": "RoleBinding",
        "metadata": meta(NAME, s.namespace, COMPONENT),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": NAME},
        "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": s.namespace}],
    }
    return [account, role, binding]


def watchdog_text() -> str:
    """distml-watchdog.yaml (JSON is YAML)."""
    return json.dumps(alertmanager.watchdog_rules(), indent=2) + "\n"


def config_map(s: Settings) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta(NAME, s.namespace, COMPONENT),
        "data": {
            CONFIG_FILE: config_text(s),
            RULES_FILE: rules.render(),
            WATCHDOG_FILE: watchdog_text(),
        },
    }


def _container(s: Settings) -> dict[str, Any]:
    probe = {
        "httpGet": {"path": "/-/ready", "port": PORT},
        "periodSeconds": 5,
        "failureThreshold": 3,
    }
    return {
        "name": "prometheus",
        "image": versions.PROMETHEUS_IMAGE,
        "imagePullPolicy": "IfNotPresent",
        "args": [
            f"--config.file={CONFIG_DIR}/{CONFIG_FILE}",
            f"--storage.tsdb.path={DATA_DIR}",
            f"--storage.tsdb.retention.time={RETENTION}",
            f"--web.listen-address=:{PORT}",
        ],
        "ports": [{"name": "http", "containerPort": PORT, "protocol": "TCP"}],
        "readinessProbe": probe,
        "livenessProbe": {
            **probe,
            "httpGet": {"path": "/-/healthy", "port": PORT},
            "failureThreshold": 6,
        },
        "resources": RESOURCES.as_dict(),
        "securityContext": {
            **container_security_context(run_as=PROMETHEUS_UID),
            "readOnlyRootFilesystem": True,
        },
        "volumeMounts": [
            {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
            {"name": "data", "mountPath": DATA_DIR},
        ],
    }


def deployment(s: Settings) -> dict[str, Any]:
    """One replica, Alertmanager beside Prometheus; its pod rolls when prometheus.yml, the
    rules or Alertmanager's configuration change (their hash)."""
    text = config_text(s) + rules.render() + watchdog_text() + alertmanager.digest(s)
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    pod_meta = {
        "labels": meta(NAME, None, COMPONENT, extra_labels=SELECTOR)["labels"],
        "annotations": {**NO_ISTIO_SIDECAR, CONFIG_HASH_ANNOTATION: digest},
    }
    spec = {
        "serviceAccountName": NAME,
        "securityContext": {
            "fsGroup": PROMETHEUS_UID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [_container(s), alertmanager.container()],
        "volumes": [
            {"name": "config", "configMap": {"name": NAME}},
            {"name": "data", "emptyDir": {}},
            *alertmanager.volumes(),
        ],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta(NAME, s.namespace, COMPONENT),
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},  # one TSDB at a time on its emptyDir
            "selector": {"matchLabels": dict(SELECTOR)},
            "template": {"metadata": pod_meta, "spec": spec},
        },
    }


def service(s: Settings) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta(NAME, s.namespace, COMPONENT),
        "spec": {
            "selector": dict(SELECTOR),
            "ports": [{"name": "http", "port": PORT, "targetPort": PORT, "protocol": "TCP"}],
        },
    }


def prometheus_objects(s: Settings) -> list[dict[str, Any]]:
    """Every object of distml's own Prometheus, in apply order."""
    return [*rbac(s), config_map(s), alertmanager.secret(s), deployment(s), service(s)]


def written_names() -> list[tuple[str, str, str]]:
    """(apiVersion, kind, name) of each: `up` checks them before its first write."""
    return [
        (o["apiVersion"], o["kind"], o["metadata"]["name"])
        for o in prometheus_objects(Settings(image=""))
    ]
