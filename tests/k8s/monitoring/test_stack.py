"""k8s.monitoring.stack: distml's own Prometheus is strictly valid for the pinned Kubernetes, needs
no right outside its namespace, and its scrape config keeps exactly the predictors' server
ports, labelled as ml.contract.serving_metrics's queries select them (the relabelling run
here the way Prometheus runs it: keep, and replace with its defaults)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from k8s.install import versions
from k8s.manifests import ISVC_POD_LABEL, PREDICTOR_PORT
from k8s.monitoring import alertmanager, prometheus, rules, stack
from k8s.providers.settings import Settings
from ml.contract import serving_metrics
from tests.support import k8s_schemas
from tests.support.relabel import relabel, sd_target
from tests.support.upstream import selector_matches

PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"


def settings(namespace: str = "team-a", **changes: Any) -> Settings:
    return Settings(image="distml:0123456789ab", namespace=namespace, **changes)


def by_kind(s: Settings) -> dict[str, dict[str, Any]]:
    return {o["kind"]: o for o in stack.prometheus_objects(s)}


@pytest.mark.parametrize("provider", ["k3d", "existing"])
def test_every_object_is_strictly_valid(provider: str) -> None:
    for obj in stack.prometheus_objects(settings(provider=provider)):
        assert k8s_schemas.validate(obj) == [], obj["kind"]


def test_its_rights_are_read_only_and_end_at_its_namespace() -> None:
    objs = stack.prometheus_objects(settings())
    assert {o["kind"] for o in objs} == {
        "ServiceAccount", "Role", "RoleBinding", "ConfigMap", "Secret", "Deployment", "Service",
    }  # fmt: skip
    assert all(o["metadata"]["namespace"] == "team-a" for o in objs)
    kinds = by_kind(settings())
    rules = kinds["Role"]["rules"]
    assert {v for r in rules for v in r["verbs"]} == {"list", "watch"}
    assert {r for rule in rules for r in rule["resources"]} == {"pods", "endpoints", "services"}
    binding = kinds["RoleBinding"]
    assert binding["roleRef"]["kind"] == "Role"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": stack.NAME, "namespace": "team-a"}
    ]
    pod = kinds["Deployment"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == stack.NAME
    sd = stack.prometheus_config(settings())["scrape_configs"][0]["kubernetes_sd_configs"]
    assert sd == [
        {
            "role": "pod",
            "namespaces": {"names": ["team-a"]},
            "selectors": [{"role": "pod", "label": ISVC_POD_LABEL}],
        }
    ]


def test_the_deployment_runs_the_pinned_image_ready_on_its_api_and_rolls_on_a_new_config() -> None:
    kinds = by_kind(settings())
    deployment, service = kinds["Deployment"], kinds["Service"]
    template = deployment["spec"]["template"]
    container, beside = template["spec"]["containers"]
    assert container["image"] == versions.PROMETHEUS_IMAGE
    assert beside["image"] == versions.ALERTMANAGER_IMAGE
    assert container["readinessProbe"]["httpGet"] == {"path": "/-/ready", "port": prometheus.PORT}
    assert f"--storage.tsdb.retention.time={stack.RETENTION}" in container["args"]
    assert {"name": "data", "emptyDir": {}} in template["spec"]["volumes"]
    assert container["resources"]["requests"] == {"cpu": "40m", "memory": "128Mi"}
    labels = template["metadata"]["labels"]
    assert selector_matches(deployment["spec"]["selector"], labels)
    assert all(labels.get(k) == v for k, v in service["spec"]["selector"].items())
    assert service["metadata"]["name"] == prometheus.OWN_SERVICE
    assert service["spec"]["ports"][0]["port"] == prometheus.PORT
    other = by_kind(settings("team-b"))["Deployment"]["spec"]["template"]["metadata"]
    assert (
        other["annotations"][stack.CONFIG_HASH_ANNOTATION]
        != template["metadata"]["annotations"][stack.CONFIG_HASH_ANNOTATION]
    )


def test_the_config_map_holds_the_config_as_prometheus_reads_it() -> None:
    s = settings()
    text = by_kind(s)["ConfigMap"]["data"][stack.CONFIG_FILE]
    assert json.loads(text) == stack.prometheus_config(s)  # JSON is YAML
    job = stack.prometheus_config(s)["scrape_configs"][0]
    assert job["job_name"] == serving_metrics.SCRAPE_JOB
    assert job["scrape_interval"] == f"{serving_metrics.SCRAPE_INTERVAL_S}s"
    assert job["metrics_path"] == "/metrics"


# ------------------------------------------------------------------ the relabelling, run


def test_only_the_predictors_server_port_is_scraped_labelled_as_the_queries_select() -> None:
    rules = stack.scrape_config(settings())["relabel_configs"]
    isvc = {ISVC_POD_LABEL: "tf-mnist"}
    kept = relabel(rules, sd_target("tf-mnist-predictor-1", port=str(PREDICTOR_PORT), labels=isvc))
    assert kept == {"namespace": "team-a", "isvc": "tf-mnist", "pod": "tf-mnist-predictor-1"}
    # Every label matcher of the queries' selector holds on the series of that target.
    for matcher in serving_metrics.selector("team-a", "tf-mnist").split(","):
        name, value = matcher.split("=", 1)
        assert kept[name] == json.loads(value)
    dropped = {
        "the storage initializer (an init container, no port)": sd_target(
            "tf-mnist-predictor-1", labels=isvc, init="true"
        ),
        "queue-proxy's metrics port (Knative)": sd_target(
            "tf-mnist-predictor-1", port="9091", labels=isvc
        ),
        "a pod of no InferenceService": sd_target("web", port="8080", labels={"app": "web"}),
        "a predictor not running yet": sd_target(
            "tf-mnist-predictor-2", port="8080", labels=isvc, phase="Pending"
        ),
    }
    for why, target in dropped.items():
        assert relabel(rules, target) is None, why


def test_every_training_worker_s_metrics_port_is_scraped_and_nothing_else() -> None:
    # A TFJob pod's two ports, as k8s.manifests.pods.tfjob declares them.
    rules = stack.training_scrape_config(settings())["relabel_configs"]
    ports = {p["name"]: str(p["containerPort"]) for p in tfjob_ports()}
    worker = {**tfjob_pod_labels(), "training.kubeflow.org/job-name": "train-cnn"}
    kept = relabel(rules, sd_target("train-cnn-worker-0", port=ports["metrics"],
                                    labels=worker, port_name="metrics"))  # fmt: skip
    assert kept == {"namespace": "team-a", "pod": "train-cnn-worker-0"}
    dropped = {
        "another pod's port named metrics": sd_target("exporter", port="9100",
                                                      labels={"app": "node-exporter"},
                                                      port_name="metrics"),
        "the TF gRPC port": sd_target("train-cnn-worker-0", port=ports["tfjob-port"],
                                      labels=worker, port_name="tfjob-port"),
        "a worker that is done": sd_target("train-cnn-worker-0", port=ports["metrics"],
                                           labels=worker, port_name="metrics",
                                           phase="Succeeded"),
        "a predictor": sd_target("tf-mnist-predictor-1", port=str(PREDICTOR_PORT),
                                 labels={ISVC_POD_LABEL: "tf-mnist"}),
    }  # fmt: skip
    for why, target in dropped.items():
        assert relabel(rules, target) is None, why


def tfjob_ports() -> list[dict]:
    from k8s import manifests

    job = manifests.tfjob(settings(), "cnn")
    return job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["ports"]


def tfjob_pod_labels() -> dict[str, str]:
    from k8s import manifests

    job = manifests.tfjob(settings(), "cnn")
    return job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["metadata"]["labels"]


def test_the_predictor_service_is_probed_with_no_pod_label_and_every_sample_dropped() -> None:
    from tests.support.relabel import service_sd_target

    job = stack.service_probe_config(settings())
    rules, isvc = job["relabel_configs"], {ISVC_POD_LABEL: "tf-mnist"}
    kept = relabel(rules, service_sd_target("tf-mnist-predictor", port=80, labels=isvc))
    assert kept == {"namespace": "team-a", "isvc": "tf-mnist"}  # no pod: not a pod's target
    dropped = {
        "another Service's port": service_sd_target("tf-mnist-predictor", port=9090, labels=isvc),
        "a Service of no InferenceService": service_sd_target("web", port=80, labels={}),
        "the canary's own Service": service_sd_target("tf-mnist-canary", port=80, labels=isvc),
    }
    for why, target in dropped.items():
        assert relabel(rules, target) is None, why
    (drop_all,) = job["metric_relabel_configs"]
    assert relabel([drop_all], {"__name__": "distml_requests_total"}) is None
    assert job["kubernetes_sd_configs"] == [
        {"role": "service", "namespaces": {"names": ["team-a"]}}
    ]


def test_the_training_operator_s_counts_of_other_namespaces_are_dropped() -> None:
    (ours,) = stack.operator_scrape_config(settings())["metric_relabel_configs"]
    failed = {"__name__": "training_operator_jobs_failed_total", "framework": "tensorflow"}
    assert relabel([ours], {**failed, "job_namespace": "team-a"}) is not None
    assert relabel([ours], {**failed, "job_namespace": "team-b"}) is None
    assert relabel([ours], {"__name__": "process_cpu_seconds_total"}) is not None


def test_the_names_up_checks_are_the_objects_it_applies() -> None:
    assert stack.written_names() == [
        (o["apiVersion"], o["kind"], o["metadata"]["name"])
        for o in stack.prometheus_objects(settings("elsewhere"))
    ]


# ------------------------------------------------------------------ rules, and KEDA's scrape


def test_the_config_map_holds_the_generated_rules_and_prometheus_yml_loads_them() -> None:
    s = settings()
    data = by_kind(s)["ConfigMap"]["data"]
    assert data[stack.RULES_FILE] == rules.render() == rules.PATH.read_text()
    config = stack.prometheus_config(s)
    assert config["rule_files"] == [
        f"{stack.CONFIG_DIR}/{stack.RULES_FILE}",
        f"{stack.CONFIG_DIR}/{stack.WATCHDOG_FILE}",
    ]
    container = by_kind(s)["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    mount = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mount["config"] == stack.CONFIG_DIR  # every key of the ConfigMap is a file there
    assert config["global"]["evaluation_interval"] == "5s"
    assert rules.WINDOWS[-1] == stack.RETENTION  # the longest window the alerts read


def test_promtool_accepts_the_config_with_its_rules(tmp_path: Path) -> None:
    if not Path(PROMTOOL).is_file():
        pytest.skip(f"no promtool at {PROMTOOL}: apt-get install prometheus")
    """The ConfigMap's files as the pod sees them, under tmp_path. Debian's build of
    Prometheus has no Kubernetes discovery: the predictors' job is checked by the relabelling
    tests above, and given a static target here."""
    s = settings(serving_mode="standard")
    data = by_kind(s)["ConfigMap"]["data"]
    (tmp_path / stack.RULES_FILE).write_text(data[stack.RULES_FILE])
    (tmp_path / stack.WATCHDOG_FILE).write_text(data[stack.WATCHDOG_FILE])
    config = json.loads(data[stack.CONFIG_FILE].replace(stack.CONFIG_DIR, str(tmp_path)))
    for job in config["scrape_configs"]:  # the predictors' and the training workers'
        if "kubernetes_sd_configs" in job:
            del job["kubernetes_sd_configs"], job["relabel_configs"]
            job["static_configs"] = [{"targets": ["10.0.0.7:8080"]}]
    (tmp_path / stack.CONFIG_FILE).write_text(json.dumps(config))
    run = subprocess.run(
        [PROMTOOL, "check", "config", str(tmp_path / stack.CONFIG_FILE)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    rule_count = sum(len(g["rules"]) for g in rules.groups())
    assert f"SUCCESS: {rule_count} rules found" in run.stdout
    assert "SUCCESS: 1 rules found" in run.stdout  # the watchdog's file


def test_the_pod_rolls_when_the_rules_change(monkeypatch: pytest.MonkeyPatch) -> None:
    def digest() -> str:
        pod = by_kind(settings())["Deployment"]["spec"]["template"]["metadata"]
        return pod["annotations"][stack.CONFIG_HASH_ANNOTATION]

    before = digest()
    monkeypatch.setattr(rules, "render", lambda: "groups: []\n")
    assert digest() != before


def test_keda_is_scraped_by_its_service_in_standard_mode_only() -> None:
    standard = stack.prometheus_config(settings(serving_mode="standard"))["scrape_configs"]
    knative = stack.prometheus_config(settings(serving_mode="knative"))["scrape_configs"]
    both = [
        serving_metrics.SCRAPE_JOB,
        stack.TRAINING_JOB,
        stack.OPERATOR_JOB,
        alertmanager.SCRAPE_JOB,
    ]
    assert [j["job_name"] for j in knative] == both
    # With KEDA, and the predictor Service's probe (Knative's scale to zero would fail it).
    assert [j["job_name"] for j in standard] == [*both, stack.KEDA_JOB, stack.SERVICE_PROBE_JOB]
    # A static target: no discovery, so no right in KEDA's namespace; KEDA's own
    # `namespace` label (the ScaledObject's) is not overwritten by a target label.
    keda = standard[-2]
    assert keda["static_configs"] == [{"targets": ["keda-operator.keda.svc:8080"]}]
    assert "relabel_configs" not in keda
    # The training operator alike, by its Service (training-operator v1.9.0: port 8080).
    operator = standard[2]
    assert operator["static_configs"] == [{"targets": ["training-operator.kubeflow.svc:8080"]}]


def test_the_operator_s_service_serves_port_8080_as_scraped() -> None:
    from k8s.install import versions
    from tests.support.upstream import objects

    found = objects(versions.TRAINING_OPERATOR_KUSTOMIZE)
    (svc,) = [
        o for o in found if o["kind"] == "Service" and o["metadata"]["name"] == "training-operator"
    ]
    assert svc["metadata"]["namespace"] == "kubeflow"
    assert stack.OPERATOR_METRICS_PORT in [p["port"] for p in svc["spec"]["ports"]]
