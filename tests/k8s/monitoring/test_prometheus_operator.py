"""k8s.monitoring.prometheus_operator: the PodMonitors keep exactly the pods and ports distml's
own scrape jobs keep, labelled as ml.contract.serving_metrics's and ml.contract.training_metrics's
queries select them, once the Prometheus Operator has turned them into scrape jobs (its
relabelling, transcribed in tests/support/relabel.py, run here); the PrometheusRule is
distml's rules; the objects come in apply order, each in its namespace, shaped by the options
(render's flags), whose bad values are refused. The ServiceMonitors:
test_prometheus_operator_services.py; the Roles: test_operator_rbac.py; strict validation
against the Operator's CRDs: test_prometheus_operator_crds.py.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import yaml

from k8s import manifests
from k8s.manifests.names import ISVC_POD_LABEL, PREDICTOR_PORT, is_ours
from k8s.monitoring import operator_rbac, rules, stack
from k8s.monitoring import prometheus_operator as po
from k8s.providers.settings import Settings
from ml.contract import serving_metrics
from ml.contract import training_metrics as train_metrics
from tests.support.relabel import pod_monitor_relabelings, relabel, sd_target
from tests.support.upstream import selector_matches

NS = "team-a"
KSERVE_CONTAINER = "kserve-container"
ISVC = {ISVC_POD_LABEL: "tf-mnist"}
#: What a scrape gives every series beside its target's labels.
SCRAPE_LABELS = {"instance", "job"}


def settings(**changes: Any) -> Settings:
    return Settings(image="distml:0123456789ab", namespace=NS, **changes)


def by_name() -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in po.operator_objects(settings())}


def predictor_target(**kw: Any) -> dict[str, str]:
    kw.setdefault("labels", ISVC)
    kw.setdefault("port", str(PREDICTOR_PORT))
    kw.setdefault("container", KSERVE_CONTAINER)
    return sd_target("tf-mnist-predictor-1", **kw)


def worker_pod_labels() -> dict[str, str]:
    """A TFJob worker pod's labels: the template's, and the training operator's."""
    job = manifests.tfjob(settings(), "cnn")
    template = job["spec"]["tfReplicaSpecs"]["Worker"]["template"]
    operator = {"training.kubeflow.org/job-name": "train-cnn",
                "training.kubeflow.org/replica-type": "worker",
                "training.kubeflow.org/replica-index": "0"}  # fmt: skip
    return {**template["metadata"]["labels"], **operator}


def worker_ports() -> dict[str, str]:
    job = manifests.tfjob(settings(), "cnn")
    container = job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    return {p["name"]: str(p["containerPort"]) for p in container["ports"]}


def worker_target(port_name: str = train_metrics.PORT_NAME, **kw: Any) -> dict[str, str]:
    kw.setdefault("labels", worker_pod_labels())
    kw.setdefault("container", manifests.TFJOB_CONTAINER)
    return sd_target("train-cnn-worker-0", port=worker_ports()[port_name], port_name=port_name,
                     **kw)  # fmt: skip


def assert_no_label_is_renamed(kept: dict[str, str], series_labels: tuple[str, ...]) -> None:
    """A series label that is also a target label is renamed ``exported_<name>`` (no
    honorLabels): none of the series' own labels may be one."""
    assert not set(series_labels) & (set(kept) | SCRAPE_LABELS), sorted(kept)


# ------------------------------------------------------------------ the predictors


def test_a_predictor_s_server_port_is_scraped_with_the_labels_the_queries_select() -> None:
    monitor = by_name()[po.PREDICTOR]
    kept = relabel(pod_monitor_relabelings(monitor), predictor_target())
    assert kept == {
        "namespace": NS,
        "isvc": "tf-mnist",
        "pod": "tf-mnist-predictor-1",
        "container": KSERVE_CONTAINER,
        "job": f"{NS}/{po.PREDICTOR}",  # the Operator's; distml never selects on it
    }
    for matcher in serving_metrics.selector(NS, "tf-mnist").split(","):
        name, value = matcher.split("=", 1)
        assert kept[name] == json.loads(value)
    assert "job=" not in serving_metrics.selector(NS, "tf-mnist")
    assert_no_label_is_renamed(kept, serving_metrics.REQUEST_LABELS)


def test_the_predictors_labels_are_those_distml_s_own_prometheus_gives_them() -> None:
    own = relabel(stack.scrape_config(settings())["relabel_configs"], predictor_target())
    operator = relabel(pod_monitor_relabelings(by_name()[po.PREDICTOR]), predictor_target())
    assert own is not None and operator is not None
    assert {k: operator[k] for k in own} == own


def test_only_running_predictor_server_ports_are_scraped() -> None:
    rules_ = pod_monitor_relabelings(by_name()[po.PREDICTOR])
    dropped = {
        "the storage initializer (an init container, no port)": predictor_target(
            port="", container="storage-initializer", init="true"
        ),
        "queue-proxy's metrics port (Knative)": predictor_target(
            port="9091", container="queue-proxy", port_name="http-usermetric"
        ),
        "a pod of no InferenceService": sd_target("web", port="8080", labels={"app": "web"}),
        "a predictor not running yet": predictor_target(phase="Pending"),
        "a predictor that is done": predictor_target(phase="Succeeded"),
    }
    for why, target in dropped.items():
        assert relabel(rules_, target) is None, why
    own = stack.scrape_config(settings())["relabel_configs"]
    for why, target in dropped.items():  # the same ones distml's own job drops
        assert relabel(own, target) is None, why


def test_the_port_scraped_is_the_serving_runtime_s_server_port() -> None:
    (container,) = manifests.serving_runtime(settings())["spec"]["containers"]
    endpoint = by_name()[po.PREDICTOR]["spec"]["podMetricsEndpoints"][0]
    assert endpoint["portNumber"] in [p["containerPort"] for p in container["ports"]]
    assert endpoint["path"] == "/metrics" and "interval" not in endpoint


# ------------------------------------------------------------------ the training workers


def test_a_training_worker_s_metrics_port_is_scraped_with_namespace_and_pod() -> None:
    kept = relabel(pod_monitor_relabelings(by_name()[po.TRAINING]), worker_target())
    assert kept == {
        "namespace": NS,
        "pod": "train-cnn-worker-0",
        "container": manifests.TFJOB_CONTAINER,
        "job": f"{NS}/{po.TRAINING}",
        "endpoint": train_metrics.PORT_NAME,
    }
    # The series carry their own tfjob, model and replica, kept as they are.
    assert_no_label_is_renamed(kept, train_metrics.LABELS)
    own = relabel(stack.training_scrape_config(settings())["relabel_configs"], worker_target())
    assert own is not None and {k: kept[k] for k in own} == own


def test_nothing_but_running_workers_metrics_ports_is_scraped() -> None:
    rules_ = pod_monitor_relabelings(by_name()[po.TRAINING])
    dropped = {
        "the TF gRPC port": worker_target(manifests.TFJOB_PORT_NAME),
        "a worker that is done": worker_target(phase="Succeeded"),
        "a worker not started": worker_target(phase="Pending"),
        "a predictor": predictor_target(),
        "another app's port named metrics": sd_target(
            "web", port="9464", port_name="metrics", labels={"app": "web"}
        ),
    }
    for why, target in dropped.items():
        assert relabel(rules_, target) is None, why


def test_the_training_selector_is_what_every_tfjob_pod_carries() -> None:
    selector = by_name()[po.TRAINING]["spec"]["selector"]
    assert selector_matches(selector, worker_pod_labels())
    for model in ("cnn", "cnn_dropout"):
        job = manifests.tfjob(settings(), model)
        labels = job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["metadata"]["labels"]
        assert selector_matches(selector, labels), model
    assert by_name()[po.TRAINING]["spec"]["podMetricsEndpoints"][0]["port"] in worker_ports()


# ------------------------------------------------------------------ the rules and the objects


def test_the_rule_holds_distml_s_rule_groups_as_the_file_has_them() -> None:
    rule = by_name()[po.RULES]
    assert rule["spec"] == {"groups": rules.groups()}
    assert rule["spec"]["groups"] == yaml.safe_load(rules.PATH.read_text())["groups"]


def placed(objects: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    return [(o["kind"], o["metadata"]["namespace"], o["metadata"]["name"]) for o in objects]


def test_the_rights_come_first_then_the_monitors_each_where_it_watches_then_the_rule() -> None:
    rbac = [("Role", ns, operator_rbac.NAME) for ns in (NS, "kubeflow", "keda")]
    rbac = [x for role in rbac for x in (role, ("RoleBinding", *role[1:]))]
    monitors = [("PodMonitor", NS, po.PREDICTOR), ("PodMonitor", NS, po.TRAINING),
                ("ServiceMonitor", "kubeflow", po.TRAINING_OPERATOR)]  # fmt: skip
    rule = [("PrometheusRule", NS, po.RULES)]
    assert placed(po.operator_objects(settings())) == [*rbac[:4], *monitors, *rule]
    standard = po.operator_objects(settings(serving_mode="standard"))
    assert placed(standard) == [*rbac, *monitors, ("ServiceMonitor", "keda", po.KEDA), *rule]
    # Where distml's namespace is the training operator's (a cluster distml made): once.
    home = po.operator_objects(Settings(image="x", namespace="kubeflow"))
    assert [k for k, ns, _ in placed(home) if ns == "kubeflow"].count("Role") == 1


def test_namespace_only_keeps_distml_s_namespace_and_the_alerts_it_can_match() -> None:
    o = po.OperatorOptions(namespace_only=True)
    objects = po.operator_objects(settings(serving_mode="standard"), o)
    assert {ns for _, ns, _ in placed(objects)} == {NS}
    assert [k for k, _, _ in placed(objects)] == [
        "Role", "RoleBinding", "PodMonitor", "PodMonitor", "PrometheusRule",
    ]  # fmt: skip
    assert objects[-1]["spec"]["groups"] == rules.groups(namespace_only=True)


def test_every_object_is_distml_s_and_its_monitors_and_rule_are_the_operator_s() -> None:
    objects = po.operator_objects(settings(serving_mode="standard"))
    for obj in objects:
        assert is_ours(obj), obj["metadata"]["name"]
        assert obj["metadata"]["labels"]["app.kubernetes.io/component"] == stack.COMPONENT
        rbac = obj["kind"] in ("Role", "RoleBinding")
        assert obj["apiVersion"] == (stack.RBAC_API if rbac else "monitoring.coreos.com/v1")
    assert objects == po.operator_objects(settings(serving_mode="standard"))  # fresh dicts
    assert objects[0] is not po.operator_objects(settings(serving_mode="standard"))[0]


# ------------------------------------------------------------------ the options (render's flags)


def test_release_labels_the_monitors_and_the_rule_which_kube_prometheus_stack_selects() -> None:
    o = po.OperatorOptions(release="kps")
    for obj in po.operator_objects(settings(serving_mode="standard"), o):
        labels = obj["metadata"]["labels"]
        if obj["kind"] in ("Role", "RoleBinding"):  # no Prometheus selects these
            assert "release" not in labels
        else:
            assert labels["release"] == "kps", obj["metadata"]["name"]
    plain = po.operator_objects(settings(serving_mode="standard"))
    assert not any("release" in obj["metadata"]["labels"] for obj in plain)


def test_the_service_account_is_the_one_named() -> None:
    assert po.OperatorOptions().account == ("monitoring", "prometheus-k8s")
    o = po.OperatorOptions(prometheus_sa="observability/kube-prometheus-stack-prometheus")
    bindings = [b for b in po.operator_objects(settings(), o) if b["kind"] == "RoleBinding"]
    assert bindings and all(b["subjects"] == [{
        "kind": "ServiceAccount", "name": "kube-prometheus-stack-prometheus",
        "namespace": "observability",
    }] for b in bindings)  # fmt: skip


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("prometheus_sa", "prometheus-k8s", "--prometheus-sa must be NAMESPACE/NAME"),
        ("prometheus_sa", "monitoring/", "--prometheus-sa must be NAMESPACE/NAME"),
        ("prometheus_sa", "/prometheus-k8s", "--prometheus-sa must be NAMESPACE/NAME"),
        ("prometheus_sa", "Monitoring/prometheus-k8s", "not 'Monitoring/prometheus-k8s'"),
        ("prometheus_sa", "monitoring/prom/k8s", "e.g. monitoring/prometheus-k8s"),
        ("release", "Kube_Prometheus", "--release must be a Helm release's name"),
        ("release", "-kps", "--release must be a Helm release's name"),
        ("release", "k" * 54, "at most 53"),
    ],
    ids=[
        "no namespace", "no name", "an empty namespace", "upper case", "two slashes",
        "an underscore", "a leading dash", "longer than Helm allows",
    ],
)  # fmt: skip
def test_a_value_that_cannot_be_used_is_refused_saying_which_flag(field, value, message) -> None:
    with pytest.raises(po.OperatorOptionError, match=re.escape(message)):
        po.OperatorOptions(**{field: value})


def test_helm_s_own_release_names_are_accepted() -> None:
    for name in ("kps", "kube-prometheus-stack", "monitoring.v2", "k" * 53):
        assert po.OperatorOptions(release=name).labels == {"release": name}
    assert po.OperatorOptions().labels == {}
