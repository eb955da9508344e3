"""k8s.manifests.inference: the InferenceService (its storage URI, Knative or Standard
scaling, the predictor it runs), the ServingRuntime and its readiness probe, the ingress
Service per provider, and the request logger only when asked."""

from __future__ import annotations

from dataclasses import replace

import pytest

from k8s import manifests as m
from k8s.install import versions
from k8s.providers.settings import PREDICTORS, PROVIDERS
from ml.contract import serving_metrics
from tests.support import k8s_schemas
from tests.support.manifests_kit import all_objects, by_kind, one, settings


@pytest.mark.parametrize("predictor", PREDICTORS)
def test_storage_uri_is_the_services_folder_in_the_pvc(predictor) -> None:
    isvc = m.inference_service(settings(predictor=predictor))
    model = isvc["spec"]["predictor"]["model"]
    assert model["storageUri"] == "pvc://strategy-volume/serving/tf-mnist"
    assert "name" not in model  # KServe's webhook refuses a name on a standard predictor


def test_knative_mode_autoscales_on_concurrency() -> None:
    isvc = m.inference_service(settings(target=3, min_replicas=0, max_replicas=5))
    annotations = isvc["metadata"]["annotations"]
    assert annotations["autoscaling.knative.dev/target"] == "3"
    assert annotations["serving.kserve.io/deploymentMode"] == "Knative"
    predictor = isvc["spec"]["predictor"]
    assert (predictor["minReplicas"], predictor["maxReplicas"]) == (0, 5)
    assert "scaleMetric" not in predictor
    assert "containerConcurrency" not in predictor
    assert "sidecar.istio.io/inject" not in annotations
    with_cc = m.inference_service(settings(container_concurrency=4))
    assert with_cc["spec"]["predictor"]["containerConcurrency"] == 4
    assert not by_kind(all_objects(settings()), "Service")  # the Istio gateway is the way in


def test_standard_mode_scales_on_cpu_behind_an_ingress_service() -> None:
    isvc = m.inference_service(settings(serving_mode="standard"))
    annotations = isvc["metadata"]["annotations"]
    assert annotations["serving.kserve.io/deploymentMode"] == "Standard"
    assert annotations["serving.kserve.io/autoscalerClass"] == "hpa"
    assert "autoscaling.knative.dev/target" not in annotations
    assert isvc["spec"]["predictor"]["scaleMetric"] == "cpu"
    assert isvc["spec"]["predictor"]["scaleTarget"] == 80


@pytest.mark.parametrize("provider", PROVIDERS)
def test_ingress_service_per_provider(provider) -> None:
    svc = one(all_objects(settings(provider=provider, serving_mode="standard")), "Service")
    assert svc["metadata"]["name"] == "tf-mnist-ingress"
    assert svc["spec"]["selector"] == {"serving.kserve.io/inferenceservice": "tf-mnist"}
    (port,) = svc["spec"]["ports"]
    assert (port["port"], port["targetPort"]) == (80, 8080)
    if provider == "k3d":
        assert svc["spec"]["type"] == "LoadBalancer" and "nodePort" not in port
    else:
        assert svc["spec"]["type"] == "NodePort" and port["nodePort"] == 31080


def test_no_ingress_service_on_a_cluster_distml_did_not_create() -> None:
    """Its node ports and load balancers are not distml's to take: `deploy`, `render` and
    the Workflow (one predicate, ``has_ingress``) all leave the Service out."""
    s = settings(provider="existing", namespace="ml-team", serving_mode="standard")
    assert not m.has_ingress(s)
    assert not by_kind(all_objects(s), "Service")
    assert m.has_ingress(settings(provider="kind", serving_mode="standard"))
    assert not m.has_ingress(settings(provider="kind"))  # knative: Istio's gateway


def test_kserve_predictor_runs_our_server_from_the_model_mount() -> None:
    objs = all_objects(settings())
    runtime, isvc = one(objs, "ServingRuntime"), one(objs, "InferenceService")
    (c,) = runtime["spec"]["containers"]
    assert c["name"] == "kserve-container"
    # The canary folder is inside the mount: `deploy --canary` on a cluster, whose share
    # goes to the canary's own pod, named after the InferenceService (canary_pods.py).
    assert c["command"] + c["args"] == [
        "python", "-m", "ml", "serve", "--model-dir", "/mnt/models", "--model-name", "{{.Name}}",
        "--canary-dir", "/mnt/models/canary", "--canary-elsewhere",
        "--canary-host", "{{.Name}}-canary", "--host", "0.0.0.0", "--http-port", "8080",
    ]  # fmt: skip
    assert c["ports"] == [{"containerPort": 8080, "name": "http1", "protocol": "TCP"}]
    assert {"name": "TF_USE_LEGACY_KERAS", "value": "1"} in c["env"]
    model = isvc["spec"]["predictor"]["model"]
    assert model["runtime"] == runtime["metadata"]["name"] == "distml-predictor"
    (fmt,) = runtime["spec"]["supportedModelFormats"]
    assert fmt == {"name": "distml-savedmodel", "version": "1", "autoSelect": True}
    assert model["modelFormat"] == {"name": fmt["name"], "version": fmt["version"]}
    assert runtime["spec"]["protocolVersions"] == ["v1"]


def test_tfserving_predictor_uses_the_pinned_builtin_runtime() -> None:
    objs = all_objects(settings(predictor="tfserving"))
    assert not by_kind(objs, "ServingRuntime")
    model = one(objs, "InferenceService")["spec"]["predictor"]["model"]
    assert model["modelFormat"] == {"name": "tensorflow"}
    assert model["runtimeVersion"] == versions.TFSERVING_RUNTIME_VERSION
    assert "runtime" not in model


def test_request_logger_only_when_asked() -> None:
    off = all_objects(settings())
    assert "logger" not in one(off, "InferenceService")["spec"]["predictor"]
    assert not by_kind(off, "Deployment")
    on = all_objects(settings(request_logger=True, namespace="ml"))
    logger = one(on, "InferenceService")["spec"]["predictor"]["logger"]
    assert logger == {"mode": "all", "url": "http://message-dumper.ml.svc.cluster.local"}
    deployment, service = one(on, "Deployment"), one(on, "Service")
    assert deployment["metadata"]["name"] == service["metadata"]["name"] == "message-dumper"
    c = deployment["spec"]["template"]["spec"]["containers"][0]
    assert c["image"] == versions.MESSAGE_DUMPER_IMAGE
    assert service["spec"]["ports"][0]["targetPort"] == c["ports"][0]["containerPort"] == 8080
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert deployment["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()


def test_predictor_is_ready_only_when_a_model_answers():
    from k8s.providers.settings import Settings
    from ml.contract.serving_metrics import UNCOUNTED_PATHS

    s = Settings(image="distml:0123456789ab")
    container = m.serving_runtime(s)["spec"]["containers"][0]
    probe = container["readinessProbe"]["httpGet"]
    # The protocol's server readiness (every model loaded), never counted as a request: a
    # probe every 2 s is not the service's traffic.
    assert probe == {"path": "/v2/health/ready", "port": 8080}
    assert probe["path"] in UNCOUNTED_PATHS
    assert container["ports"][0]["containerPort"] == 8080


# ------------------------------------------------------------------ KEDA (--scale-metric)
KEDA_CASES = [
    ("concurrency", {"with_monitoring": True}, "http://distml-prometheus.kubeflow.svc:9090"),
    ("rps", {"prometheus": "monitoring/prom:9091"}, "http://prom.monitoring.svc:9091"),
]


@pytest.mark.parametrize(("metric", "where", "address"), KEDA_CASES)
def test_request_metrics_give_kserves_keda_form_strictly_valid(metric, where, address) -> None:
    s = settings(serving_mode="standard", scale_metric=metric, target=4, **where)
    isvc = m.inference_service(s)
    assert k8s_schemas.validate(isvc) == []
    assert isvc["metadata"]["annotations"]["serving.kserve.io/autoscalerClass"] == "keda"
    predictor = isvc["spec"]["predictor"]
    # KServe's webhook refuses scaleMetric with KEDA, and wants an External target's value.
    assert "scaleMetric" not in predictor and "scaleTarget" not in predictor
    one_metric, cpu = predictor["autoScaling"]["metrics"]
    external = one_metric["external"]
    assert one_metric["type"] == "External" and external["metric"]["backend"] == "prometheus"
    assert external["metric"]["serverAddress"] == address
    assert external["target"] == {"type": "Value", "value": "4"}
    # distml's own 5 s scrape: the 30 s floor; a time-averaged concurrency (Little's law).
    queries = {
        "concurrency": serving_metrics.concurrency("kubeflow", "tf-mnist", "30s"),
        "rps": serving_metrics.request_rate("kubeflow", "tf-mnist", "30s"),
    }
    assert external["metric"]["query"] == queries[metric]
    # Beside it, CPU: what the HPA still scales up on while Prometheus cannot be read
    # (KServe 0.20 sets no fallback). KServe's webhook (validateScalingKedaCompExtension)
    # wants a cpu target typed Utilization, 1-100.
    assert cpu == {
        "type": "Resource",
        "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}},
    }


def test_keda_s_window_is_four_scrapes_of_the_prometheus_it_reads() -> None:
    # The Prometheus Operator's 30 s: a 2 min window (30 s would hold one sample: empty,
    # which KEDA reads as 0).
    s = settings(serving_mode="standard", scale_metric="rps", prometheus="monitoring/p:9090")
    isvc = m.inference_service(replace(s, scrape_interval_s=30.0))
    metric = isvc["spec"]["predictor"]["autoScaling"]["metrics"][0]
    assert metric["external"]["metric"]["query"].endswith("[120s]))")


def test_a_request_metric_without_a_prometheus_is_refused_by_the_builder() -> None:
    with pytest.raises(ValueError, match=r"--scale-metric rps needs a Prometheus"):
        m.inference_service(settings(serving_mode="standard", scale_metric="rps"))


@pytest.mark.parametrize("metric", ["rps", "concurrency", "memory"])
def test_knative_mode_and_unknown_metrics_are_refused(metric) -> None:
    with pytest.raises(ValueError, match=r"standard serving mode|unknown scale metric"):
        m.check_settings(settings(scale_metric=metric, with_monitoring=True))


def test_cpu_is_the_hpa_as_before_whatever_monitoring_there_is() -> None:
    s = settings(serving_mode="standard", with_monitoring=True)
    predictor = m.inference_service(s)["spec"]["predictor"]
    assert (predictor["scaleMetric"], predictor["scaleTarget"]) == ("cpu", 80)
    assert "autoScaling" not in predictor


@pytest.mark.parametrize("mode", ["knative", "standard"])
def test_no_canary_is_asked_of_kserve_in_either_mode(mode: str) -> None:
    # distml's canary is split in the predictor's own server (docs/serving.md, Canary
    # releases): KServe's canaryTrafficPercent (Knative) and spec.canary (Standard) are never
    # set, so a canary never makes a revision or a Deployment, nor changes minReplicas.
    objs = all_objects(settings(serving_mode=mode))
    isvc = one(objs, "InferenceService")
    assert "canaryTrafficPercent" not in str(isvc) and "canary" not in isvc["spec"]
    (c,) = one(objs, "ServingRuntime")["spec"]["containers"]
    assert c["args"][c["args"].index("--canary-dir") + 1] == "/mnt/models/canary"
