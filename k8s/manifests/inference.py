"""The serving objects: our ServingRuntime, the InferenceService, the request logger and
the standard mode's ingress Service."""

from __future__ import annotations

from typing import Any

from k8s.install import versions
from k8s.manifests import canary_pods
from k8s.manifests.names import (
    COMPONENT_LABEL,
    HPA_CPU_TARGET_PERCENT,
    IMAGE_ANNOTATION,
    ISVC_POD_LABEL,
    KSERVE_MODEL_DIR,
    MESSAGE_DUMPER,
    MODEL_FORMAT,
    MODEL_FORMAT_VERSION,
    NO_ISTIO_SIDECAR,
    PREDICTOR_PORT,
    PROJECT_UID,
    RUNTIME_NAME,
    labels,
    storage_uri,
)
from k8s.manifests.placement import predictor_placement, volume_labels
from k8s.manifests.pods import base_env, container_security_context, env_list, meta
from k8s.monitoring import prometheus
from k8s.providers.settings import REQUEST_METRICS, Resources, Settings
from ml import contract
from ml.contract import serving_metrics

# With the canary folder (``deploy --canary``): the server finds a canary release in the
# service's own folder, the one KServe mounts, and forwards the share its weight file gives
# to the canary's own pod (k8s/manifests/canary_pods.py), never loading it here.
_SERVE = contract.serve(
    KSERVE_MODEL_DIR,
    "{{.Name}}",
    host="0.0.0.0",
    http_port=PREDICTOR_PORT,
    canary_dir=f"{KSERVE_MODEL_DIR}/{contract.CANARY_SUBDIR}",
    canary_elsewhere=True,
    canary_host=canary_pods.HOST_TEMPLATE,
)


def serving_runtime(s: Settings) -> dict[str, Any]:
    """The ServingRuntime running our own server (``python -m ml serve``) in the project
    image; ``inference_service`` selects it for ``predictor == "kserve"``."""
    container = {
        "name": "kserve-container",
        "image": s.image,
        "imagePullPolicy": "IfNotPresent",
        # KServe replaces {{.Name}} with the InferenceService's name.
        "command": contract.split_step(_SERVE)[0],
        "args": contract.split_step(_SERVE)[1],
        "env": env_list(base_env()),
        "ports": [{"containerPort": PREDICTOR_PORT, "name": "http1", "protocol": "TCP"}],
        # Ready only once a model version has loaded (the server answers 503 until then):
        # without this, KServe/Knative fall back to a TCP probe and route requests to a
        # pod that is still loading the SavedModel, which fails them during scale-out. The
        # protocol's server readiness (every model ready), which is never counted as a
        # request: a probe every 2 s is not traffic.
        "readinessProbe": {
            "httpGet": {"path": contract.READY_PATH, "port": PREDICTOR_PORT},
            "periodSeconds": 2,
            "failureThreshold": 2,
            "timeoutSeconds": 2,
        },
        "resources": s.predictor_resources.as_dict(),
        # A ServingRuntime has no pod-level securityContext: all of it goes here.
        "securityContext": container_security_context(run_as=PROJECT_UID),
    }
    return {
        "apiVersion": "serving.kserve.io/v1alpha1",
        "kind": "ServingRuntime",
        "metadata": meta(RUNTIME_NAME, s.namespace, "serve"),
        "spec": {
            "supportedModelFormats": [
                {"name": MODEL_FORMAT, "version": MODEL_FORMAT_VERSION, "autoSelect": True}
            ],
            "protocolVersions": ["v1"],
            "containers": [container],
        },
    }


# What KServe makes per autoscaler class in standard mode, named ``<service>-predictor``
# and owned by the InferenceService. It deletes neither when the class changes:
# `deploy` does (runtime.cluster.serving).
AUTOSCALER_OBJECTS = {
    "hpa": ("autoscaling/v2", "HorizontalPodAutoscaler"),
    "keda": ("keda.sh/v1alpha1", "ScaledObject"),
}


def _keda(s: Settings) -> bool:
    """Standard mode scaling on requests: KServe's KEDA class, on a Prometheus query."""
    return s.serving_mode == "standard" and s.scale_metric in REQUEST_METRICS


def autoscaler_class(s: Settings) -> str:
    """Standard mode's ``serving.kserve.io/autoscalerClass``: keda or hpa."""
    return "keda" if _keda(s) else "hpa"


def predictor_name(s: Settings) -> str:
    """The name KServe gives the predictor's Deployment and its autoscaler (standard mode)."""
    return f"{s.service}-predictor"


#: The shortest window of KEDA's query: six of distml's own 5 s scrapes.
KEDA_FLOOR_S = 30


def request_query(s: Settings) -> str:
    """The PromQL KEDA scales on: predict and infer requests in flight (time-averaged), or
    per second, all pods together, over four of the Prometheus's scrapes: short, so that
    scaling follows a load within a few scrapes, and long enough for rate() to have two
    samples when one scrape is late."""
    window = serving_metrics.rate_window(s.scrape_interval_s, KEDA_FLOOR_S)
    if s.scale_metric == "concurrency":
        return serving_metrics.concurrency(s.namespace, s.service, window)
    return serving_metrics.request_rate(s.namespace, s.service, window)


def keda_autoscaling(s: Settings) -> dict[str, Any]:
    """KServe 0.20's KEDA form (``autoScaling.metrics``): the External Prometheus metric,
    and CPU beside it.

    KServe makes a ScaledObject whose Prometheus trigger has ``threshold`` = the target's
    value and no ``metricType``, so KEDA gives the HPA an AverageValue target: the HPA
    divides the query's total by the replicas, and ``desired = ceil(total / target)``.
    The target is per replica, as Knative's concurrency target is (KServe's webhook wants
    the target typed Value, and ignores the type when it builds the trigger).

    KServe 0.20 sets no ``fallback`` on the ScaledObject. When Prometheus cannot be read
    (down, or the query errs) KEDA reports the metric as an error, and the HPA, with one
    metric of two invalid, keeps the replicas it has but may still scale up on the other
    (kubernetes' ``computeReplicasForMetrics``): the CPU trigger, at the HPA's target, is
    that other, so a load that arrives while Prometheus is out still adds replicas. An
    empty answer (no samples in the window) KEDA reads as 0 (``ignoreNullValues``
    defaults to true): the window is four scrapes so that one missed scrape is not empty.
    """
    ref = prometheus.ref(s)
    if ref is None:
        raise ValueError(
            f"--scale-metric {s.scale_metric} needs a Prometheus: `invoke up --with-monitoring`, "
            f"or name yours in {prometheus.SETTING}"
        )
    metric = {"backend": "prometheus", "serverAddress": ref.address, "query": request_query(s)}
    target = {"type": "Value", "value": str(s.target)}
    cpu = {"type": "Utilization", "averageUtilization": HPA_CPU_TARGET_PERCENT}
    return {
        "metrics": [
            {"type": "External", "external": {"metric": metric, "target": target}},
            {"type": "Resource", "resource": {"name": "cpu", "target": cpu}},
        ]
    }


def _isvc_annotations(s: Settings) -> dict[str, str]:
    if s.serving_mode == "knative":
        return {
            # The project image: a new build changes this, which rolls the predictor (the
            # ServingRuntime's image alone does not).
            IMAGE_ANNOTATION: s.image,
            "serving.kserve.io/deploymentMode": "Knative",
            # Knative's KPA: concurrent requests per replica before it adds one.
            "autoscaling.knative.dev/target": str(s.target),
        }
    return {
        IMAGE_ANNOTATION: s.image,
        "serving.kserve.io/deploymentMode": "Standard",
        # KServe's webhook checks scaleMetric/scaleTarget against the HPA rules only
        # with this class named explicitly (else it applies Knative's, refusing cpu); with
        # keda, KServe hands a ScaledObject to KEDA instead of making an HPA.
        "serving.kserve.io/autoscalerClass": autoscaler_class(s),
    }


def inference_service(s: Settings) -> dict[str, Any]:
    """The KServe InferenceService serving ``pvc://<volume>/serving/<service>``."""
    annotations = _isvc_annotations(s)
    model: dict[str, Any]
    if s.predictor == "kserve":
        model = {
            "modelFormat": {"name": MODEL_FORMAT, "version": MODEL_FORMAT_VERSION},
            "runtime": RUNTIME_NAME,
            "protocolVersion": "v1",
            "storageUri": storage_uri(s),
            "resources": s.predictor_resources.as_dict(),
        }
    else:
        # KServe's built-in TF Serving runtime, its image tag pinned. That runtime asks
        # for 1 CPU / 2Gi per replica by default; ours (predictor_resources) is smaller
        # so that several replicas fit a laptop cluster.
        model = {
            "modelFormat": {"name": "tensorflow"},
            "runtimeVersion": versions.TFSERVING_RUNTIME_VERSION,
            "storageUri": storage_uri(s),
            "resources": s.predictor_resources.as_dict(),
        }
    predictor: dict[str, Any] = {
        "minReplicas": s.min_replicas,
        "maxReplicas": s.max_replicas,
    }
    if _keda(s):  # KServe refuses scaleMetric with KEDA
        predictor["autoScaling"] = keda_autoscaling(s)
    elif s.serving_mode == "standard":
        predictor["scaleMetric"] = "cpu"
        predictor["scaleTarget"] = HPA_CPU_TARGET_PERCENT
    if s.container_concurrency is not None:
        predictor["containerConcurrency"] = s.container_concurrency
    if s.request_logger:
        predictor["logger"] = {"mode": "all", "url": message_dumper_url(s)}
    # Its storage initializer mounts the volume: placed like every pod that does.
    predictor["labels"] = volume_labels(s)
    predictor.update(predictor_placement(s, spread_by={ISVC_POD_LABEL: s.service}))
    # The server reads the volume and answers HTTP: no API token in its pods (Knative
    # accepts this pod field only when false).
    predictor["automountServiceAccountToken"] = False
    predictor["model"] = model
    return {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": meta(s.service, s.namespace, "serve", annotations=annotations),
        "spec": {"predictor": predictor},
    }


def message_dumper_url(s: Settings) -> str:
    """Where the predictor's request logger sends its CloudEvents."""
    return f"http://{MESSAGE_DUMPER}.{s.namespace}.svc.cluster.local"


def message_dumper(s: Settings) -> list[dict[str, Any]]:
    """A Deployment + Service printing every request/response the logger sends."""
    pod_labels = labels("request-logger", **{"app.kubernetes.io/name": MESSAGE_DUMPER})
    match = {"app.kubernetes.io/name": MESSAGE_DUMPER, COMPONENT_LABEL: "request-logger"}
    container = {
        "name": MESSAGE_DUMPER,
        "image": versions.MESSAGE_DUMPER_IMAGE,
        "imagePullPolicy": "IfNotPresent",
        "ports": [{"containerPort": 8080, "name": "http", "protocol": "TCP"}],
        "resources": Resources("10m", "100m", "32Mi", "64Mi").as_dict(),
        # ko-built image: its user is 65532 (nonroot); named here so the check can pass.
        "securityContext": container_security_context(run_as=65532),
    }
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta(MESSAGE_DUMPER, s.namespace, "request-logger"),
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": match},
            "template": {
                "metadata": {"labels": pod_labels, "annotations": dict(NO_ISTIO_SIDECAR)},
                "spec": {"automountServiceAccountToken": False, "containers": [container]},
            },
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta(MESSAGE_DUMPER, s.namespace, "request-logger"),
        "spec": {
            "selector": dict(match),
            # Port 80, so the logger URL needs no port.
            "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}],
        },
    }
    return [deployment, service]


def has_ingress(s: Settings) -> bool:
    """Whether the deployment has ``ingress_service(s)``: standard mode, on a cluster
    distml made (an existing cluster's node ports and load balancers are not distml's to
    take; `invoke loadtest` finds its way in there: runtime.cluster.reach)."""
    return s.serving_mode == "standard" and s.owns_cluster


def ingress_service(s: Settings) -> dict[str, Any]:
    """Standard mode's way in from the host: a Service in front of the predictor pods.

    k3d: LoadBalancer (k3s's ServiceLB takes the port k3d maps to the host); kind and
    minikube: NodePort ``s.ingress_node_port`` (the port the cluster maps to the host).
    In Knative mode the Istio ingress gateway is the way in instead.
    """
    port: dict[str, Any] = {
        "name": "http",
        "port": 80,
        "targetPort": PREDICTOR_PORT,
        "protocol": "TCP",
    }
    if s.provider == "k3d":
        service_type = "LoadBalancer"
    else:
        service_type = "NodePort"
        port["nodePort"] = s.ingress_node_port
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta(f"{s.service}-ingress", s.namespace, "ingress"),
        "spec": {
            "type": service_type,
            "selector": {ISVC_POD_LABEL: s.service},
            "ports": [port],
        },
    }
