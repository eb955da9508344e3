"""tasks/chain.py through the real ``invoke`` CLI: flags become requests, the runtime's
capabilities decide the notes (or a refusal), and bad values exit 2 before a runtime is
chosen."""

from __future__ import annotations

import pytest

from runtime.image import image_tag
from tests.support.cli import REPO, invoke


def test_cluster_only_flags_are_noted_as_ignored_on_the_local_runtime(wd):
    r = invoke(wd, "--dry", "deploy", "--target", "3", "--request-logger", "--http-port", "8181")
    assert r.returncode == 0, r.stderr
    assert "note: --target, --request-logger apply to cluster runtimes; ignored on local" in (
        r.stdout
    )
    assert "would run (selection): python -m ml select" in r.stdout
    # publish.json's code version: the image tag this repository's code builds to.
    assert f"--code-version {image_tag(REPO)}" in r.stdout
    assert r.stdout.rstrip().endswith("--host 127.0.0.1 --http-port 8181")


def test_with_argo_is_noted_as_ignored_by_the_local_runtime(wd):
    r = invoke(wd, "--dry", "up", "--runtime", "local", "--with-argo")
    assert r.returncode == 0, r.stderr
    assert "note: --with-argo applies to cluster runtimes; ignored on local" in r.stdout
    assert "argoproj" not in r.stdout  # nothing of Argo is planned


def test_gpus_on_the_local_runtime_are_refused_not_ignored(wd):
    r = invoke(wd, "train", "--model-type", "cnn", "--gpus-per-worker", "1")
    assert r.returncode == 2
    assert "error: --gpus-per-worker cannot be used on the local runtime" in r.stderr


def test_train_and_train_all_build_the_same_request(wd):
    one = invoke(wd, "--dry", "train", "--model-type", "cnn_dropout", "--epochs", "2")
    every = invoke(wd, "--dry", "train-all", "--model-type", "cnn_dropout", "--epochs", "2")
    assert one.returncode == every.returncode == 0, one.stderr + every.stderr
    assert one.stdout == every.stdout
    assert "--model-type cnn_dropout --profile quick --log-every 5 --epochs 2" in one.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["deploy", "--min-accuracy", "86"], "(did you mean 0.86?)"),
        (["loadtest", "--concurrency", "0"], "--concurrency must be at least 1, got 0"),
        (["train-all", "--model-type", "vgg"], "unknown model type 'vgg'"),
        (["up", "--serving-mode", "mesh"], "--serving-mode must be one of knative, standard"),
    ],
)
def test_bad_values_exit_2_before_a_runtime_is_chosen(wd, args, message):
    r = invoke(wd, *args)
    assert r.returncode == 2
    assert message in r.stderr
    assert "runtime:" not in r.stdout  # refused before anything was looked at


def test_down_forget_clears_the_record_without_any_cluster(wd):
    from runtime.workdir import Workdir

    w = Workdir.at(wd)
    w.create()
    w.update_state(up=True, runtime="existing", context="gone-ctx", instance="abcd1234")
    # No kubectl, no kubeconfig is consulted: the context is gone.
    r = invoke(wd, "down", "--forget")
    assert r.returncode == 0, r.stderr
    assert "forgot context gone-ctx: no cluster was touched" in r.stdout
    assert "distml/instance=abcd1234" in r.stdout
    state = w.state()
    assert (state.context, state.runtime, state.up) == (None, None, False)
    refused = invoke(wd, "down", "--forget", "--keep-cluster")
    assert refused.returncode == 2 and "--forget takes no other flag" in refused.stderr


def test_a_bad_istio_gateway_type_setting_stops_up_with_the_valid_ones(wd):
    r = invoke(
        wd,
        "--dry",
        "up",
        "--runtime",
        "existing",
        "--context",
        "c",
        INVOKE_CLUSTER_ISTIO_GATEWAY_TYPE="External",
    )
    assert r.returncode != 0
    assert "cluster.istio_gateway_type (INVOKE_CLUSTER_ISTIO_GATEWAY_TYPE) 'External'" in r.stderr
    assert "ClusterIP, NodePort, LoadBalancer" in r.stderr


def test_an_existing_cluster_keeps_the_namespace_up_claimed(wd):
    # Its objects and its volume are there: another namespace would be another tenant's.
    from runtime.workdir import Workdir

    w = Workdir.at(wd)
    w.create()
    w.update_state(up=True, runtime="existing", context="c", namespace="ml-a")
    refused = invoke(wd, "--dry", "up", "--runtime", "existing", INVOKE_CLUSTER_NAMESPACE="ml-b")
    assert refused.returncode == 2
    assert "set up in namespace 'ml-a', not 'ml-b'" in refused.stderr
    other = invoke(wd, "--dry", "status", INVOKE_CLUSTER_NAMESPACE="ml-b")
    assert "namespace: ml-a (the one `invoke up` set up; 'ml-b' applies after" in other.stdout


def test_monitoring_flags_are_noted_as_ignored_on_the_local_runtime(wd):
    up = invoke(wd, "--dry", "up", "--runtime", "local", "--with-monitoring")
    assert up.returncode == 0, up.stderr
    assert "note: --with-monitoring applies to cluster runtimes; ignored on local" in up.stdout
    deploy = invoke(wd, "--dry", "deploy", "--runtime", "local", "--scale-metric", "rps")
    assert deploy.returncode == 0, deploy.stderr
    assert "note: --scale-metric applies to cluster runtimes; ignored on local" in deploy.stdout


def test_an_unknown_scale_metric_exits_2_with_the_valid_ones(wd):
    r = invoke(wd, "deploy", "--scale-metric", "memory")
    assert r.returncode == 2
    assert "--scale-metric must be one of cpu, concurrency, rps, got 'memory'" in r.stderr


def test_a_bad_prometheus_setting_stops_a_cluster_task_with_its_form(wd):
    r = invoke(wd, "--dry", "up", "--runtime", "kind", INVOKE_CLUSTER_PROMETHEUS="prometheus:9090")
    assert r.returncode == 2
    assert "cluster.prometheus (INVOKE_CLUSTER_PROMETHEUS) 'prometheus:9090'" in r.stderr
    assert "NAMESPACE/SERVICE:PORT" in r.stderr


def test_a_bad_alert_webhook_stops_a_cluster_task_and_a_good_one_reaches_its_secret(wd):
    r = invoke(wd, "--dry", "up", "--runtime", "kind", INVOKE_CLUSTER_ALERT_WEBHOOK="sink:80/x")
    assert r.returncode == 2
    assert "cluster.alert_webhook (INVOKE_CLUSTER_ALERT_WEBHOOK) 'sink:80/x'" in r.stderr
    url = "https://hooks.example.com/distml"
    r = invoke(
        wd, "--dry", "up", "--runtime", "kind", "--with-monitoring",
        INVOKE_CLUSTER_ALERT_WEBHOOK=url,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "would apply Secret kubeflow/distml-alertmanager" in r.stdout
    assert url in r.stdout  # the dry run shows what would be applied


def test_dry_up_with_monitoring_prints_keda_and_prometheus_in_order(wd):
    r = invoke(
        wd, "--dry", "up", "--runtime", "kind", "--serving-mode", "standard", "--with-monitoring"
    )
    assert r.returncode == 0, r.stderr
    out = r.stdout
    keda = out.index("apply --server-side -f https://github.com/kedacore/keda/releases/")
    kserve = out.index("kserve/releases/download/v0.20.0/kserve.yaml")
    prom = out.index("would apply Deployment kubeflow/distml-prometheus")
    assert keda < kserve < prom
    assert "image: quay.io/prometheus/prometheus:v3.16.0" in out
