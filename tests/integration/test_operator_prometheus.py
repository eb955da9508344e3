"""integration/operator_prometheus.py without a cluster: the Prometheus it makes is the one
the Operator would make from `render --prometheus-operator`'s objects (30 s, the Operator's
jobs, the PrometheusRule's groups as its rules), reachable as the cluster.prometheus it
names, with rights in distml's namespace only; and the lifecycle's output checks."""

from __future__ import annotations

import json

import yaml

from integration import operator_prometheus as op
from k8s.monitoring import prometheus, prometheus_operator, rules
from k8s.providers.settings import Settings

S = Settings(image="-", namespace="kubeflow", serving_mode="standard")


def by_kind(kind: str) -> list[dict]:
    return [o for o in op.objects(S) if o["kind"] == kind]


def test_it_scrapes_at_30s_with_the_operators_jobs_and_loads_distmls_rules():
    config = op.prometheus_yml(S)
    assert config["global"]["scrape_interval"] == "30s"
    assert [j["job_name"] for j in config["scrape_configs"]] == [
        "podMonitor/kubeflow/distml-predictor/0",
        "podMonitor/kubeflow/distml-training/0",
        "serviceMonitor/kubeflow/distml-training-operator/0",
        "serviceMonitor/keda/distml-keda-operator/0",
    ]
    roles = {j["job_name"]: j["kubernetes_sd_configs"][0]["role"] for j in config["scrape_configs"]}
    assert roles["serviceMonitor/keda/distml-keda-operator/0"] == "endpoints"
    keda = config["scrape_configs"][-1]
    assert keda["honor_labels"] is True  # KEDA's own namespace label, the ScaledObject's
    main, rule_files = by_kind("ConfigMap")
    assert json.loads(main["data"]["prometheus.yml"]) == config
    (text,) = rule_files["data"].values()
    assert yaml.safe_load(text) == prometheus_operator.prometheus_rule(S)["spec"]
    assert yaml.safe_load(text)["groups"] == rules.groups()


def test_it_is_the_cluster_prometheus_it_names_with_rights_in_distmls_namespace_only():
    ref = prometheus.parse_ref(op.SETTING)
    (service,) = by_kind("Service")
    assert (ref.namespace, ref.service, ref.port) == (
        op.NAMESPACE,
        service["metadata"]["name"],
        9090,
    )
    (deployment,) = by_kind("Deployment")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert all(labels[k] == v for k, v in service["spec"]["selector"].items())
    # It schedules while the earlier steps' predictors hold their peak: no CPU request.
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert "cpu" not in container["resources"]["requests"]
    # Its rights are the Roles `render --prometheus-operator` wrote, as a user applies
    # them, bound to kube-prometheus's ServiceAccount; nothing of its own, nothing cluster-wide.
    rendered = [o for o in prometheus_operator.operator_objects(S) if o["kind"] == "Role"]
    assert by_kind("Role") == rendered
    assert {r["metadata"]["namespace"] for r in rendered} == {"kubeflow", "keda"}
    (account,) = by_kind("ServiceAccount")
    for binding in by_kind("RoleBinding"):
        (subject,) = binding["subjects"]
        assert (subject["namespace"], subject["name"]) == (
            account["metadata"]["namespace"], account["metadata"]["name"]
        )  # fmt: skip
    assert not by_kind("ClusterRole") and not by_kind("ClusterRoleBinding")


def test_the_lifecycles_output_must_show_the_30s_interval_found_and_used():
    deploy = (
        f"Prometheus {op.SETTING} scrapes every 30 s (its 1 target(s))\n"
        "scaling: KEDA on requests in flight, 1 per replica, read from Prometheus over the "
        "last 120s"
    )
    status = f"replicas scraped   1 up ({op.SETTING}, every 30 s)"
    assert op.check([deploy, "", status]) == []
    assert op.check([deploy.replace("120s", "30s"), "", status]) == [
        "read from Prometheus over the last 120s"
    ]
